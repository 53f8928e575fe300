"""A TREC run from an index folder: what ``spladekit search`` does, as one function.

The queries are encoded texts (a JSONL file and the model that encoded the documents) or pre-encoded query vectors;
everything is checked before the index is opened (search parameters, the queries, then the vocabulary), and the run
file is written atomically (:func:`spladekit.common.atomic.open_output`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from spladekit.common.atomic import open_output
from spladekit.common.errors import SpladekitError
from spladekit.evaluation.run import Run


@dataclass(frozen=True)
class SearchedRun:
    """What :func:`search_to_run` wrote."""

    run: str
    queries: int
    k: int
    backend: str
    search_ms_per_query: float

    def to_dict(self) -> dict:
        return asdict(self)


def search_to_run(
    index: str | Path,
    output: str | Path,
    *,
    queries: str | Path | None = None,
    model: str | None = None,
    query_vectors: str | Path | None = None,
    k: int = 1000,
    query_max_length: int | None = None,
    batch_size: int = 32,
    params: dict | None = None,
    device: str = "auto",
    precision: str = "fp32",
    trust_remote_code: bool = False,
    overwrite: bool = False,
) -> SearchedRun:
    """Search the index folder ``index`` with ``queries`` encoded by ``model`` (or with ``query_vectors``) and write
    the top ``k`` of each query to the TREC run file ``output``. ``params``: search parameters (default: the
    index's own)."""
    from spladekit.data import read_corpus
    from spladekit.index import index_backend
    from spladekit.vectors.artifact import Vectors

    if query_vectors is None and (queries is None or model is None):
        raise SpladekitError("give --queries and --model, or --query-vectors")
    with open_output(output, folder=False, overwrite=overwrite) as staged:
        searcher_class = index_backend(index)
        checked = searcher_class.check_params(params or {}, "search")  # before reading anything
        # then the queries: unreadable or empty ones fail before the index is opened (an engine's may be rebuilt)
        if query_vectors is not None:
            encoded = Vectors.load(query_vectors)
            vectors, query_ids = encoded.matrix, encoded.ids
            if not query_ids:
                raise SpladekitError(f"{query_vectors}: no query vectors: nothing to search")
        else:
            assert queries is not None  # checked above
            parsed = read_corpus(queries)  # an empty file is refused
            query_ids = parsed.ids
        with searcher_class.load(index) as searcher:
            if searcher.doc_ids is None:
                raise SpladekitError(f"{index}: index has no ids.json; rebuild it with `spladekit index`")
            if query_vectors is None:
                from spladekit.model.loading import load_model

                assert model is not None  # checked above
                encoder = load_model(model, trust_remote_code=trust_remote_code, device=device, precision=precision)
                if encoder.vocab_size != searcher.vocab_size:
                    raise SpladekitError(
                        f"vocabulary mismatch: model {model} has {encoder.vocab_size} terms, the index "
                        f"{searcher.vocab_size}"
                    )
                vectors = encoder.encode_query(
                    parsed.texts, batch_size=batch_size, max_length=query_max_length, ids=parsed.ids
                )
            started = time.perf_counter()
            result = searcher.search(vectors, k=k, **checked)
            seconds = time.perf_counter() - started
            Run.from_hits(query_ids, searcher.doc_ids, result.doc_indices, result.scores).write(
                staged.staging, tag=f"spladekit-{searcher.name}"
            )
    return SearchedRun(
        run=str(output),
        queries=len(query_ids),
        k=k,
        backend=searcher.name,
        search_ms_per_query=1000 * seconds / max(len(query_ids), 1),
    )
