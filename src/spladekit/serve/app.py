"""The FastAPI application of ``spladekit serve``: :func:`create_app` over a served model and, optionally, an index.

Routes (text-embeddings-inference's shapes where TEI has the route; :mod:`spladekit.serve.tei`):

* ``POST /embed_sparse`` (also ``POST /``, TEI's default route of a SPLADE model): SPLADE vectors.
* ``POST /tokenize``, ``GET /info``, ``GET /health``, ``GET /metrics`` (Prometheus text).
* ``POST /search`` ``{"query", "k", "explain"}`` when an index is served: hits, and with ``explain`` the query's
  terms and, per hit with a known text, the shared terms behind its score.
* ``GET /``: the page (:mod:`spladekit.serve.page`).

Threads: requests are handled on the event loop; tokenization (counting, ``/tokenize``, explanations) runs in one
thread with its own tokenizer, encoding in another (the batcher's), index searches in a third. Bodies are read up
to ``payload_limit`` bytes (413 beyond), parsed strictly (:func:`spladekit.serve.tei.parse_body`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import scipy.sparse as sp
from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from spladekit.common.errors import SpladekitError
from spladekit.common.version import __version__
from spladekit.index.base import Searcher
from spladekit.serve.batching import Batcher, Job
from spladekit.serve.encoding import ServedModel
from spladekit.serve.metrics import Metrics
from spladekit.serve.page import PAGE
from spladekit.serve.search import SearchService
from spladekit.serve.security import ApiKeyMiddleware
from spladekit.serve.settings import MAX_CHAR_MULTIPLIER, ServeSettings
from spladekit.serve.tei import (
    EMPTY_INPUTS,
    EmbedSparseRequest,
    SearchRequest,
    TeiError,
    TokenizeRequest,
    parse_body,
)

EXPLAINED_HITS = 20  # hits of a search whose document is re-encoded to explain its score
EXPLAINED_TERMS = 20  # contributions shown per explained hit
JSON_TYPES = ("application/json",)
INLINE_CHARACTERS = 2000  # a request of string inputs up to this size is counted on the event loop, not in a thread

T = TypeVar("T")


class BatchSizeError(TeiError):
    """More inputs than ``max_client_batch_size`` (TEI counts it as ``err="batch_size"``)."""

    def __init__(self, error: str):
        super().__init__(error, "Validation")


class ClientGone(Exception):
    """The client disconnected while its request waited: nothing is sent."""


# ---------------------------------------------------------------------------------------------- request helpers
async def read_body(request: Request, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes (413 beyond, read no further), sent as JSON (415 otherwise, as
    TEI's JSON extractor answers)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in JSON_TYPES and not content_type.endswith("+json"):
        raise TeiError("Expected request with `Content-Type: application/json`", "Validation", 415)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TeiError(f"request body of {declared} bytes is above the limit of {limit} bytes", "Validation", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TeiError(f"request body is above the limit of {limit} bytes", "Validation", 413)
        chunks.append(chunk)
    return b"".join(chunks)


async def until_disconnect(request: Request) -> None:
    """Return when the client disconnects (the ASGI server reports it once the body is read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, or :class:`ClientGone` (``work`` cancelled: a queued job is then dropped) when the client
    disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientGone()


def split_inputs(inputs: Any) -> tuple[list, str]:
    """A request's ``inputs`` as a list and TEI's ``method`` label: one string or one list of token ids is a single
    input; a list of those is a batch."""
    if isinstance(inputs, str):
        return [inputs], "single"
    if inputs and all(isinstance(item, int) for item in inputs):
        return [inputs], "single"
    return list(inputs), "batch"


# ---------------------------------------------------------------------------------------------- response shapes
def pruned(vectors: sp.csr_matrix, top_k: int | None, threshold: float | None) -> sp.csr_matrix:
    """Rows without zero weights, below ``threshold`` weights, and beyond the ``top_k`` heaviest."""
    from spladekit.common.sparse import keep_top_weights

    if top_k is None and threshold is None and vectors.has_sorted_indices and vectors.data.all():
        return vectors  # the model's rows as they are (no copy: the common request costs nothing here)
    vectors = sp.csr_matrix(vectors, dtype=np.float32, copy=True)
    if threshold is not None:
        vectors.data[vectors.data < threshold] = 0
    vectors.eliminate_zeros()
    if top_k is not None:
        vectors = keep_top_weights(vectors, top_k)
    vectors.sort_indices()
    return vectors


def sparse_body(vectors: sp.csr_matrix, form: str, tokens: list[str] | None) -> list:
    """The response rows: TEI's ``[{index, value}]`` lists, OpenSearch's ``{token: weight}`` objects (feature names
    escaped as ``spladekit export`` writes them), or Qdrant's ``{indices, values}``."""
    from spladekit.export.feature_names import escape_feature

    rows: list[Any] = []
    for row in range(vectors.shape[0]):
        start, end = vectors.indptr[row], vectors.indptr[row + 1]
        indices, values = vectors.indices[start:end].tolist(), vectors.data[start:end].tolist()
        if form == "opensearch":
            assert tokens is not None
            rows.append({escape_feature(tokens[i]): v for i, v in zip(indices, values)})
        elif form == "qdrant":
            entry: dict[str, Any] = {"indices": indices, "values": values}
            if tokens is not None:
                entry["tokens"] = [tokens[i] for i in indices]
            rows.append(entry)
        elif tokens is not None:
            rows.append([{"index": i, "value": v, "token": tokens[i]} for i, v in zip(indices, values)])
        else:
            rows.append([{"index": i, "value": v} for i, v in zip(indices, values)])
    return rows


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def error_response(error: TeiError) -> Response:
    return json_response(error.body(), error.status, error.headers)


# ---------------------------------------------------------------------------------------------- the server's state
class Server:
    """What every route shares: the model, the batcher, the executors, the optional index, the metrics."""

    def __init__(self, model: ServedModel, search: SearchService | None, settings: ServeSettings, model_id: str):
        self.model, self.search, self.settings, self.model_id = model, search, settings, model_id
        self.metrics = Metrics()
        self.batcher = Batcher(model.encode, settings, self.metrics)
        self.tokenization: ThreadPoolExecutor | None = None
        self.searching: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        self.tokenization = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spladekit-tokenize")
        self.searching = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spladekit-search")
        await self.batcher.start()

    async def stop(self) -> None:
        await self.batcher.stop()
        for executor in (self.tokenization, self.searching):
            if executor is not None:
                executor.shutdown(wait=True)

    async def in_thread(self, executor: ThreadPoolExecutor | None, function: Callable[..., T], *args: Any) -> T:
        if executor is None:
            raise TeiError("the server is not running", "Unhealthy")
        return await asyncio.get_running_loop().run_in_executor(executor, function, *args)

    # ------------------------------------------------------------------ validation (tokenization thread)
    def prepare(self, inputs: list, side: str, truncate: bool, on_loop: bool = False) -> tuple[list[str], list[int]]:
        """TEI's per-input checks, in its order: empty → 400; above ``max_input_length × 250`` characters → 422
        unless truncating (then cut there); above the side's token limit → 422 unless truncating. Returns the
        texts and their token counts (after truncation). ``on_loop``: counted by the event loop's tokenizer."""
        limit = self.model.limit(side)
        char_limit = limit * MAX_CHAR_MULTIPLIER
        texts = []
        for item in inputs:
            if isinstance(item, list):
                if not item:
                    raise TeiError(f"Input validation error: {EMPTY_INPUTS}", "Empty")
                try:
                    item = self.model.decode_ids(item)
                except SpladekitError as error:
                    raise TeiError(f"tokenizer error {error}", "Tokenizer") from None
            if not item:
                raise TeiError(f"Input validation error: {EMPTY_INPUTS}", "Empty")
            if len(item) > char_limit:
                if not truncate:
                    raise TeiError(
                        f"Input validation error: `inputs` must have less than {char_limit} characters. "
                        f"Given: {len(item)}",
                        "Validation",
                    )
                item = item[:char_limit]
            texts.append(item)
        counts = self.model.count(texts, side, on_loop)
        for count in counts:
            self.metrics.input_length.observe(count)
            if count > limit and not truncate:
                raise TeiError(
                    f"Input validation error: `inputs` must have less than {limit} tokens. Given: {count}",
                    "Validation",
                )
        return texts, [min(count, limit) for count in counts]

    async def encode(
        self, request: Any, inputs: list, side: str, truncate: bool, direction: str, admission: Any
    ) -> tuple[Job, list[str], int, float]:
        """Validate and tokenize ``inputs`` (tokenization thread), then encode them through the batcher; the job,
        the texts, their tokens and the tokenization seconds."""
        started = time.perf_counter()
        if all(isinstance(item, str) for item in inputs) and sum(map(len, inputs)) <= INLINE_CHARACTERS:
            texts, counts = self.prepare(inputs, side, truncate, on_loop=True)
        else:
            texts, counts = await self.in_thread(self.tokenization, self.prepare, inputs, side, truncate)
        tokenization_s = time.perf_counter() - started
        admission.arrived()
        job = await unless_gone(request, self.batcher.submit(texts, sum(counts), side, direction))
        return job, texts, sum(counts), tokenization_s


# ---------------------------------------------------------------------------------------------- the app
def create_app(
    model: ServedModel | Any,
    search: SearchService | Searcher | None = None,
    settings: ServeSettings | None = None,
    model_id: str | None = None,
    collection: dict[str, str] | None = None,
) -> FastAPI:
    """The FastAPI app serving ``model`` and, when given, the index ``search``. ``model``: a
    :class:`spladekit.serve.encoding.ServedModel` (:func:`~spladekit.serve.encoding.load_served_model`) or a loaded
    model (``SparseEncoder``, ``InferenceFreeEncoder``, ``OnnxEncoder``); ``search``: a
    :class:`~spladekit.serve.search.SearchService` or any loaded ``Searcher`` with document ids (then ``collection``
    maps ids to texts). Its lifespan starts the batcher and the threads; ``TestClient(app)`` and uvicorn both run
    it. The vocabulary of ``search`` must be the model's (checked here, in one line)."""
    if not isinstance(model, ServedModel):
        model = ServedModel(model, str(getattr(model, "source", type(model).__name__)))
    if isinstance(search, Searcher):
        search = SearchService(search, f"the {search.name} index", collection)
    settings = settings or ServeSettings()
    if search is not None and search.searcher.vocab_size != model.vocab_size:
        raise SpladekitError(
            f"{search.path}: vocabulary mismatch: the index has {search.searcher.vocab_size} terms, the model "
            f"{model.source} {model.vocab_size}: serve the model that encoded its documents"
        )
    server = Server(model, search, settings, model_id or model.source)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    app = FastAPI(
        title="spladekit serve",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.server = server
    if settings.api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    if settings.cors_origins:  # outermost: preflights are answered before the key is asked for
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["content-type", "authorization"],
        )

    @app.exception_handler(TeiError)
    async def tei_error(request: Request, error: TeiError) -> Response:
        route = request.scope.get("route")
        server.metrics.responses.labels(route=getattr(route, "path", "other"), status=str(error.status)).inc()
        return error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        return error_response(TeiError(str(error.detail), "Validation", error.status_code))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> Response:  # logged by the server; a TEI body
        import logging

        logging.getLogger("spladekit").exception("unexpected error")
        return error_response(TeiError("internal error", "Backend", 500))

    def count_failure(error: TeiError) -> None:  # TEI's te_request_failure labels
        reason = {"Empty": "validation", "Validation": "validation", "Tokenizer": "tokenizer"}
        label = "batch_size" if isinstance(error, BatchSizeError) else reason.get(error.error_type)
        server.metrics.request_failure.labels(err=label or error.error_type.lower()).inc()

    # ------------------------------------------------------------------ TEI routes
    async def embed_sparse(request: Request) -> Response:
        started = time.perf_counter()
        try:
            body = parse_body(await read_body(request, settings.payload_limit), EmbedSparseRequest)
            inputs, method = split_inputs(body.inputs)
            server.metrics.request_count.labels(method=method).inc()
            if not inputs:
                raise TeiError(EMPTY_INPUTS, "Empty")
            if len(inputs) > settings.max_client_batch_size:
                raise BatchSizeError(
                    f"batch size {len(inputs)} > maximum allowed batch size {settings.max_client_batch_size}"
                )
            if body.prompt_name is not None:
                raise TeiError(
                    f"`prompt_name` is set to `{body.prompt_name}` but no prompts were found in the model's "
                    "configuration",
                    "Validation",
                )
            truncate = settings.auto_truncate if body.truncate is None else body.truncate
            with server.batcher.admission(len(inputs)) as admission:
                job, texts, tokens, tokenization_s = await server.encode(
                    request, inputs, body.side, truncate, body.truncation_direction.lower(), admission
                )
        except TeiError as error:
            count_failure(error)
            raise
        except ClientGone:
            return Response(status_code=499)
        vectors = pruned(job.future.result(), body.top_k, body.threshold)
        tokens_of = server.model.vocabulary if (body.return_tokens or body.format == "opensearch") else None
        payload = sparse_body(vectors, body.format, tokens_of)
        server.metrics.request_success.labels(method=method).inc()
        total = time.perf_counter() - started
        metrics = server.metrics
        metrics.request_duration.observe(total)
        metrics.tokenization_duration.observe(tokenization_s)
        metrics.queue_duration.observe(job.queue_s)
        metrics.inference_duration.observe(job.inference_s)
        metrics.responses.labels(route="/embed_sparse", status="200").inc()
        headers = {
            "x-compute-type": model.kind,
            "x-compute-time": str(int(total * 1000)),
            "x-compute-characters": str(sum(len(text) for text in texts)),
            "x-compute-tokens": str(tokens),
            "x-total-time": str(int(total * 1000)),
            "x-tokenization-time": str(int(tokenization_s * 1000)),
            "x-queue-time": str(int(job.queue_s * 1000)),
            "x-inference-time": str(int(job.inference_s * 1000)),
        }
        return json_response(payload, headers=headers)

    app.add_api_route("/embed_sparse", embed_sparse, methods=["POST"])
    app.add_api_route("/", embed_sparse, methods=["POST"])  # TEI's default route of a SPLADE model

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        body = parse_body(await read_body(request, settings.payload_limit), TokenizeRequest)
        inputs = [body.inputs] if isinstance(body.inputs, str) else body.inputs
        if not inputs:
            raise TeiError(EMPTY_INPUTS, "Empty")
        if len(inputs) > settings.max_client_batch_size:
            raise TeiError(
                f"batch size {len(inputs)} > maximum allowed batch size {settings.max_client_batch_size}", "Validation"
            )
        if body.prompt_name is not None:
            raise TeiError(f"`prompt_name` is set to `{body.prompt_name}` but no prompts were found", "Validation")
        if any(not text for text in inputs):
            raise TeiError(f"Input validation error: {EMPTY_INPUTS}", "Empty")
        char_limit = model.max_input_length * MAX_CHAR_MULTIPLIER
        for text in inputs:
            if len(text) > char_limit:
                raise TeiError(
                    f"Input validation error: `inputs` must have less than {char_limit} characters. Given: {len(text)}",
                    "Validation",
                )

        def run() -> list:
            return [model.tokenize(text, body.add_special_tokens) for text in inputs]

        return json_response(await server.in_thread(server.tokenization, run))

    def info() -> dict:
        described = model.describe()
        return {
            "model_id": server.model_id,
            "model_sha": None,
            "model_dtype": {"bf16": "bfloat16", "int8": "int8"}.get(described["precision"], "float32"),
            "model_type": {"embedding": {"pooling": "splade"}},
            "max_concurrent_requests": settings.max_concurrent_requests,
            "max_input_length": model.max_input_length,
            "max_batch_tokens": settings.max_batch_tokens,
            "max_batch_requests": settings.max_batch_requests,
            "max_client_batch_size": settings.max_client_batch_size,
            "auto_truncate": settings.auto_truncate,
            "tokenization_workers": 1,
            "version": __version__,
            "sha": None,
            "docker_label": None,
            "served_model_name": settings.served_model_name or server.model_id,
            "spladekit": {
                "model": described,
                "index": None if search is None else search.describe(),
                "max_search_hits": settings.max_search_hits,
                "payload_limit": settings.payload_limit,
            },
        }

    described_info = info()

    @app.get("/info")
    async def get_info() -> Response:
        return json_response(described_info)

    @app.get("/health")
    async def health() -> Response:
        if not server.batcher.running:
            return error_response(TeiError("unhealthy", "Unhealthy"))
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics() -> Response:
        return PlainTextResponse(server.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/")
    async def page() -> Response:
        return HTMLResponse(
            PAGE,
            headers={
                "X-Content-Type-Options": "nosniff",
                "X-Frame-Options": "DENY",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            },
        )

    # ------------------------------------------------------------------ search
    @app.post("/search")
    async def search_route(request: Request) -> Response:
        started = time.perf_counter()
        if search is None:
            raise TeiError("no index is served: start the server with --index", "Validation", 404)
        body = parse_body(await read_body(request, settings.payload_limit), SearchRequest)
        if not body.query.strip():
            raise TeiError("`query` cannot be empty", "Empty")
        if body.k > settings.max_search_hits:
            raise TeiError(f"k {body.k} > maximum allowed k {settings.max_search_hits}", "Validation")
        truncate = settings.auto_truncate if body.truncate is None else body.truncate
        try:
            with server.batcher.admission(1) as admission:
                job, _, _, _ = await server.encode(request, [body.query], "query", truncate, "right", admission)
            query_vector = sp.csr_matrix(job.future.result(), dtype=np.float32)
            searched = time.perf_counter()
            hits = await server.in_thread(server.searching, search.search, query_vector, body.k)
            server.metrics.search_duration.observe(time.perf_counter() - searched)
            result: dict[str, Any] = {"query": body.query, "k": body.k, "backend": search.searcher.name}
            explanations: list[dict | None] = [None] * len(hits)
            if body.explain:
                explanations, result["query_terms"] = await explain(request, body.query, query_vector, hits)
        except ClientGone:
            return Response(status_code=499)
        result["hits"] = [
            {"rank": rank, "id": doc_id, "score": score, "text": search.text(doc_id), "explanation": explanation}
            for rank, ((doc_id, score), explanation) in enumerate(zip(hits, explanations), start=1)
        ]
        result["took_ms"] = round(1000 * (time.perf_counter() - started), 3)
        server.metrics.responses.labels(route="/search", status="200").inc()
        return json_response(result)

    async def explain(
        request: Request, query: str, query_vector: sp.csr_matrix, hits: list[tuple[str, float]]
    ) -> tuple[list[dict | None], list[dict]]:
        """The query's terms, and for each of the first hits whose text is known, the shared terms behind its
        score (its text re-encoded on the document side: ``explanation.score`` is that vector's score)."""
        from spladekit.evaluation.explain import explain_vector, explain_vectors

        assert search is not None
        tokenizer = model.dimension_tokenizer
        query_terms = await server.in_thread(
            server.tokenization, lambda: explain_vector(tokenizer, query_vector, query, "query").to_dict()["terms"]
        )
        explained: list[tuple[int, str]] = []
        for i, (doc_id, _) in enumerate(hits[: min(EXPLAINED_HITS, settings.max_concurrent_requests)]):
            text = search.text(doc_id)
            if text:
                explained.append((i, text))
        explanations: list[dict | None] = [None] * len(hits)
        if not explained:
            return explanations, query_terms
        texts = [text for _, text in explained]
        with server.batcher.admission(len(texts)) as admission:
            job, _, _, _ = await server.encode(request, texts, "document", True, "right", admission)
        documents = job.future.result()

        def pairs() -> list[dict]:
            found = []
            for row, (_, text) in enumerate(explained):
                pair = explain_vectors(tokenizer, query_vector, documents[row], query, text).to_dict(EXPLAINED_TERMS)
                found.append({key: pair[key] for key in ("score", "shared_terms", "shown_score", "contributions")})
            return found

        for (i, _), explanation in zip(explained, await server.in_thread(server.tokenization, pairs)):
            explanations[i] = explanation
        return explanations, query_terms

    return app
