"""Serving: a model (and an index) behind HTTP, as ``spladekit serve`` runs it. text-embeddings-inference's API
(``/embed_sparse``, ``/tokenize``, ``/info``, ``/health``, ``/metrics``: :mod:`.tei`), dynamic batching
(:mod:`.batching`), search with explanations (:mod:`.search`), a page (:mod:`.page`), the API key (:mod:`.security`)
and the app itself (:mod:`.app`). FastAPI, uvicorn and prometheus-client come with the ``serve`` extra.
May import: every stage below ``cli`` (model, index, evaluation, data, export)."""
