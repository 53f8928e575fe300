"""Evaluation: collection → SPLADE vectors → index → run → ir_measures metrics + efficiency statistics.

Effectiveness is computed by ``ir_measures`` on the run and the (reconciled) qrels. A judged query that
retrieves nothing counts as 0 (as ``trec_eval -c``): the mean is over every judged query, from
``ir_measures.iter_calc``'s per-query values.

Efficiency (SPLADE's definitions, Formal et al. 2021):

* ``flops = Σ_v p_q(v) · p_d(v)``, where ``p_q(v)`` (``p_d(v)``) is the fraction of queries (documents)
  in which term v is active (weight > 0): the expected number of multiply-adds of one query–document
  dot product over an inverted index;
* ``avg_q_nnz``, ``avg_d_nnz``: mean number of active terms per query / document;
* ``encode_docs_seconds``, ``encode_queries_seconds``, ``index_seconds``, ``search_ms_per_query``.

Queries are encoded with ``encode_query`` and documents with ``encode_document``, each side with its own token
limit. ``max_active_dims`` keeps the k largest weights of every query and document vector
(``vectors_ops.keep_top_weights``) before indexing and before the efficiency statistics.

Encoded corpora are cached under ``$SPLADEKIT_CACHE`` (default ``~/.cache/spladekit``) in
``vectors/<sha256(model hash, corpus hash, max length, pooling)>/`` (a sharded vectors folder) so that re-evaluating
the same model on the
same corpus does not re-encode it; the cache holds the full vectors, pruned after reading, so one entry
serves every ``max_active_dims``. A damaged entry is read through ``Vectors.load`` like any vectors
folder; it is then ignored with a warning and re-encoded (see :func:`read_cache_entry`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import ir_measures
import numpy as np
import scipy.sparse as sp

from spladekit.common import distributed
from spladekit.common.atomic import OutputBusy, final_path
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.sources import cache_root
from spladekit.common.sparse import check_max_active_dims, keep_top_weights, nnz_per_row
from spladekit.data.collections import Collection, load_collection, reconcile
from spladekit.data.jsonl import Corpus
from spladekit.data.stream import corpus_fingerprint
from spladekit.data.suites import SUITES, load_suite
from spladekit.data.trec import Qrels
from spladekit.evaluation.result import EvaluationResult
from spladekit.evaluation.run import Run
from spladekit.index import build_index, check_backend
from spladekit.model.loading import RetrievalModel, model_fingerprint
from spladekit.vectors.artifact import Vectors
from spladekit.vectors.encoding import ShardSelection, build_plan, write_shards
from spladekit.vectors.shards import DEFAULT_SHARD_SIZE, MANIFEST, finalize, is_sharded, shard_count

logger = logging.getLogger("spladekit")


# ----------------------------------------------------------------------------------------- efficiency
def retrieval_flops(queries: sp.csr_matrix, documents: sp.csr_matrix) -> float:
    """``Σ_v p_q(v) · p_d(v)`` with ``p(v)`` the fraction of rows whose weight on term v is > 0."""
    if queries.shape[1] != documents.shape[1]:
        raise SpladekitError(f"vocabulary mismatch: {queries.shape[1]} vs {documents.shape[1]} dimensions")
    p_q = np.bincount(queries.indices[queries.data > 0], minlength=queries.shape[1]) / max(queries.shape[0], 1)
    p_d = np.bincount(documents.indices[documents.data > 0], minlength=documents.shape[1]) / max(documents.shape[0], 1)
    return float(p_q @ p_d)


def active_per_row(matrix: sp.csr_matrix) -> np.ndarray:
    """Number of strictly positive weights per row."""
    positive = sp.csr_matrix(matrix, copy=True)
    positive.data = (positive.data > 0).astype(np.float32)
    positive.eliminate_zeros()
    return nnz_per_row(positive)


# ----------------------------------------------------------------------------------------- caching
def read_cache_entry(folder: Path, corpus: Corpus, vocab_size: int) -> Vectors | None:
    """The cached vectors in ``folder``, or None when there are none, the entry is an interrupted encoding
    (a sharded folder without its manifest: resumed by :func:`encode_corpus`) or it is unusable.

    A cache entry is derived data under a content hash, so a damaged one (truncated file, foreign ids,
    another vocabulary) holds nothing the user could lose: it is reported as a warning, ignored and
    replaced by the re-encoding, rather than stopping the evaluation until someone deletes it by hand.
    """
    if not folder.exists() or (is_sharded(folder) and not (folder / MANIFEST).is_file()):
        return None
    try:
        vectors = Vectors.load(folder)
        if vectors.ids != corpus.ids or vectors.vocab_size != vocab_size:
            raise InputError("cached vectors do not match the corpus or the model", folder)
    except InputError as error:
        logger.warning("ignoring a damaged evaluation cache entry, re-encoding: %s", error)
        shutil.rmtree(folder, ignore_errors=True)  # the interrupted shards of a good plan are kept, not these
        return None
    return vectors


def encode_corpus(
    encoder: RetrievalModel,
    corpus: Corpus,
    max_length: int,
    batch_size: int = 32,
    cache: bool = True,
    show_progress: bool = True,
    processes: distributed.Processes | None = None,
) -> tuple[Vectors, dict]:
    """Encoded corpus and ``{"encode_docs_seconds", "corpus_cached", "cache_dir"}``; reuses the cache
    (:func:`cache_corpus`; under ``torchrun``, ``processes``: every rank encodes its share of it).

    The cache key covers everything that changes the vectors: the model's weights, the corpus, the
    token limit, the pooling implementation (``fused-bf16`` may differ from ``fused`` in the last bits) and the
    precision (bf16 or int8 arithmetic changes the vectors).
    An entry is a sharded vectors folder written through :func:`spladekit.vectors.encoding.write_shards`
    (one shard's vectors in memory at a time while encoding; an interrupted evaluation resumes its shards).
    """
    if not cache:
        if processes is not None and processes.world_size > 1:
            raise SpladekitError(
                "evaluating under torchrun shares the corpus through the evaluation cache: drop --no-cache"
            )
        started = time.perf_counter()
        matrix = encoder.encode_document(
            corpus.texts, batch_size=batch_size, max_length=max_length, show_progress=show_progress, ids=corpus.ids
        )
        seconds = round(time.perf_counter() - started, 3)
        return (
            Vectors(
                matrix,
                corpus.ids,
                {
                    "max_length": max_length,
                    "pooling": encoder.pooling,
                    "precision": encoder.precision,
                    "encode_seconds": seconds,
                },
            ),
            {"encode_docs_seconds": seconds, "corpus_cached": False, "cache_dir": None},
        )
    started = time.perf_counter()
    try:
        folder, cached = cache_corpus(encoder, corpus, max_length, batch_size, show_progress, processes)
    except OutputBusy:  # another process is caching the same vectors: encode without the cache
        if processes is not None and processes.world_size > 1:
            raise SpladekitError(f"{cache_root()}: another process is caching these vectors; retry later") from None
        return encode_corpus(encoder, corpus, max_length, batch_size, False, show_progress)
    if cached is not None:
        return cached, {
            "encode_docs_seconds": cached.meta.get("encode_seconds"),
            "corpus_cached": True,
            "cache_dir": str(folder),
        }
    took = round(time.perf_counter() - started, 3)
    return Vectors.load(folder), {"encode_docs_seconds": took, "corpus_cached": False, "cache_dir": str(folder)}


def cache_corpus(
    encoder: RetrievalModel,
    corpus: Corpus,
    max_length: int,
    batch_size: int = 32,
    show_progress: bool = True,
    processes: distributed.Processes | None = None,
) -> tuple[Path, Vectors | None]:
    """Make sure the evaluation cache holds ``corpus``'s vectors; (its folder, the vectors if it already held
    them, read and checked). Under ``torchrun`` (``processes``) every rank encodes the shards
    ``j % world_size == rank`` into the one shared entry, then all meet at a barrier and the folder is complete
    (each rank may finalize it: identical bytes)."""
    model_sha256 = model_fingerprint(encoder)
    corpus_sha256 = corpus_fingerprint(zip(corpus.ids, corpus.texts))
    # appended only when not fp32: earlier cache entries stay valid (bf16 ones too: the same "|bf16" as before)
    precision = "" if encoder.precision == "fp32" else f"|{encoder.precision}"
    key = hashlib.sha256(
        f"{model_sha256}|{corpus_sha256}|{max_length}|{encoder.pooling}{precision}".encode()
    ).hexdigest()
    folder = cache_root() / "vectors" / key
    cached = read_cache_entry(folder, corpus, encoder.vocab_size)
    if cached is not None:
        return folder, cached
    plan = build_plan(
        encoder, "", "", corpus_sha256, len(corpus), "document", max_length, None, DEFAULT_SHARD_SIZE, model_sha256
    )
    ranks = processes if processes is not None and processes.world_size > 1 else None
    folder.mkdir(parents=True, exist_ok=True)
    write_shards(
        folder,
        encoder,
        zip(corpus.ids, corpus.texts),
        plan,
        ShardSelection() if ranks is None else ShardSelection(ranks.rank, ranks.world_size),
        resume=True,
        batch_size=batch_size,
        show_progress=show_progress,
    )
    if ranks is not None:
        distributed.barrier(ranks)
    finalize(folder, plan, shard_count(len(corpus), DEFAULT_SHARD_SIZE))
    return folder, None


def cache_corpora(
    encoder: RetrievalModel,
    data: str | Path,
    split: str = "test",
    data_root: str | Path | None = None,
    max_length: int | None = None,
    batch_size: int = 32,
    processes: distributed.Processes | None = None,
) -> None:
    """What a ``torchrun`` rank other than 0 does for ``evaluate``: its shards of every collection's corpus, in
    the order rank 0 evaluates them (:func:`evaluate_data` with the same ``processes``), into the shared cache."""
    for collection in resolve_collections(data, split, data_root):
        corpus = reconcile(collection).corpus
        cache_corpus(encoder, corpus, encoder.side_max_length("document", max_length), batch_size, False, processes)


# ----------------------------------------------------------------------------------------- metrics
def compute_metrics(qrels: Qrels, run: Run, measures: Iterable[str]) -> tuple[dict[str, float], dict]:
    """(mean per measure, ``{measure: {query_id: value}}``) over every judged query.

    ``ir_measures`` (>= 0.4) counts a judged query that the run does not contain as 0 in both, as
    ``trec_eval -c`` does.
    """
    evaluator = ir_measures.evaluator([ir_measures.parse_measure(name) for name in measures], qrels)
    means = {str(measure): float(value) for measure, value in evaluator.calc_aggregate(run.scores).items()}
    per_query: dict[str, dict[str, float]] = {name: {} for name in means}
    for value in evaluator.iter_calc(run.scores):
        per_query[str(value.measure)][value.query_id] = float(value.value)
    return means, per_query


def score_hits(
    collection: Collection, doc_indices: np.ndarray, scores: np.ndarray, k: int, run_path: str | Path | None, tag: str
) -> tuple[dict[str, float], dict, int | None]:
    """Score a retrieval of ``collection`` (n_queries × depth document rows, -1 = none, best first): the
    run, without self-hits when the collection drops them (then cut to ``k``), written to ``run_path`` when
    given; returns (means, per-query values, self-hits dropped or None)."""
    run = Run.from_hits(collection.queries.ids, collection.corpus.ids, doc_indices, scores)
    self_hits = None
    if collection.drop_self_hits:
        run, self_hits = run.without_self_hits(k)
    if run_path is not None:
        run.write(run_path, tag=tag)
    metrics, per_query = compute_metrics(collection.qrels, run, collection.measures)
    return metrics, per_query, self_hits


# ----------------------------------------------------------------------------------------- evaluation
def evaluate(
    encoder: RetrievalModel,
    collection: Collection,
    backend: str = "exact",
    k: int = 1000,
    max_length: int | None = None,
    batch_size: int = 32,
    backend_params: dict | None = None,
    cache: bool = True,
    run_path: str | Path | None = None,
    show_progress: bool = True,
    query_max_length: int | None = None,
    max_active_dims: int | None = None,
    processes: distributed.Processes | None = None,
) -> EvaluationResult:
    """Evaluate ``encoder`` on one collection: metrics (ir_measures names), per-query values, efficiency.

    Token limits: ``max_length`` for documents (default: the model's) and, unless ``query_max_length`` is
    given, for queries too, as before the two sides existed (default: the model's query limit).
    ``max_active_dims`` prunes queries and documents to their k largest weights. ``cache=False`` always
    re-encodes (use it while training: every checkpoint is a new model). Under ``torchrun`` (``processes``,
    rank 0; the other ranks run :func:`cache_corpora`) the corpus is encoded by every rank.
    """
    backend_params = check_backend(backend, backend_params)  # parameters and prerequisites, before any encoding
    check_max_active_dims(max_active_dims)
    collection = reconcile(collection)
    document_limit = encoder.side_max_length("document", max_length)
    query_limit = encoder.side_max_length("query", query_max_length or max_length)
    documents, encode_info = encode_corpus(
        encoder, collection.corpus, document_limit, batch_size, cache, show_progress, processes
    )
    document_matrix = documents.matrix
    if max_active_dims is not None:  # after the cache: it holds the full vectors
        document_matrix = keep_top_weights(document_matrix, max_active_dims)
    started = time.perf_counter()
    queries = encoder.encode_query(
        collection.queries.texts,
        batch_size=batch_size,
        max_length=query_limit,
        show_progress=show_progress,
        max_active_dims=max_active_dims,
        ids=collection.queries.ids,
    )
    encode_queries_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with build_index(document_matrix, backend, **backend_params) as searcher:
        index_seconds = time.perf_counter() - started
        started = time.perf_counter()
        # one hit more where the query's own document is dropped, so k others remain
        hits = searcher.search_batches(queries, k=k + collection.drop_self_hits, show_progress=show_progress)
        search_seconds = time.perf_counter() - started
    metrics, per_query, self_hits = score_hits(
        collection, hits.doc_indices, hits.scores, k, run_path, f"spladekit-{backend}"
    )
    return EvaluationResult(
        name=collection.name,
        measures=tuple(collection.measures),
        metrics=metrics,
        per_query=per_query,
        efficiency={
            "flops": retrieval_flops(queries, document_matrix),
            "avg_q_nnz": float(active_per_row(queries).mean()),
            "avg_d_nnz": float(active_per_row(document_matrix).mean()),
            "docs": len(collection.corpus),
            "queries": len(collection.queries),
            "search_ms_per_query": 1000 * search_seconds / len(collection.queries),
        },
        timings={
            "encode_docs_seconds": encode_info["encode_docs_seconds"],
            "encode_queries_seconds": round(encode_queries_seconds, 3),
            "index_seconds": round(index_seconds, 3),
        },
        provenance={
            "source": collection.source,
            **collection.dropped,
            "backend": backend,
            "backend_params": searcher.params,
            "k": k,
            "max_length": document_limit,
            "query_max_length": query_limit,
            "max_active_dims": max_active_dims,
            "self_hits_removed": self_hits,
            "pooling": encoder.pooling,
            "bf16": encoder.bf16,
            "precision": encoder.precision,  # fp32, bf16 or int8: what ran (--precision auto resolved)
            "corpus_cached": encode_info["corpus_cached"],
            "cache_dir": encode_info["cache_dir"],
            "run": None if run_path is None else str(final_path(run_path)),
        },
    )


# (collection, run path or None) → its result: a model's evaluation, or a baseline's (spladekit.evaluation.baselines)
EvaluateOne = Callable[[Collection, Path | None], EvaluationResult]


def evaluate_suite(
    encoder: RetrievalModel,
    collections: Iterable[Collection],
    name: str,
    run_dir: str | Path | None = None,
    **options: Any,
) -> EvaluationResult:
    """Evaluate each collection; the result's ``members`` hold them, its metrics their means."""
    return suite_result(model_evaluation(encoder, options), collections, name, run_dir)


def model_evaluation(encoder: RetrievalModel, options: dict[str, Any]) -> EvaluateOne:
    """:func:`evaluate` of ``encoder`` with ``options``, one collection at a time; the backend is checked now (its
    parameters and what it runs on), before the first collection is loaded, downloaded or encoded."""
    check_backend(options.get("backend", "exact"), options.get("backend_params"))
    return lambda collection, run_path: evaluate(encoder, collection, run_path=run_path, **options)


def suite_result(
    evaluate_one: EvaluateOne, collections: Iterable[Collection], name: str, run_dir: str | Path | None = None
) -> EvaluationResult:
    """``evaluate_one`` on each collection (runs to RUN_DIR/<collection>.trec); the mean of their results."""
    members = {collection.name: evaluate_one(collection, run_file(run_dir, collection)) for collection in collections}
    if not members:
        raise SpladekitError(f"suite {name!r}: no collection to evaluate")
    return EvaluationResult.mean_of(name, members)


def run_file(run_dir: str | Path | None, collection: Collection) -> Path | None:
    return None if run_dir is None else Path(run_dir) / f"{collection.name}.trec"


def evaluate_data(
    encoder: RetrievalModel,
    data: str | Path,
    split: str = "test",
    data_root: str | Path | None = None,
    run_dir: str | Path | None = None,
    **options: Any,
) -> EvaluationResult:
    """Resolve ``data`` (suite name, folder, HF or ir_datasets id) and evaluate it (the CLI's entry)."""
    return evaluate_resolved(model_evaluation(encoder, options), data, split, data_root, run_dir)


def evaluate_resolved(
    evaluate_one: EvaluateOne,
    data: str | Path,
    split: str = "test",
    data_root: str | Path | None = None,
    run_dir: str | Path | None = None,
) -> EvaluationResult:
    """``evaluate_one`` on ``data``: a suite's collections (and their mean), or one collection."""
    return evaluate_collections(evaluate_one, data, resolve_collections(data, split, data_root), run_dir)


def evaluate_collections(
    evaluate_one: EvaluateOne, data: str | Path, collections: Iterable[Collection], run_dir: str | Path | None = None
) -> EvaluationResult:
    """``evaluate_one`` on the collections ``data`` names (:func:`resolve_collections`): a suite's mean with its
    members, or the one collection's result."""
    if str(data) in SUITES:
        return suite_result(evaluate_one, collections, str(data), run_dir)
    (collection,) = collections
    return evaluate_one(collection, run_file(run_dir, collection))


def evaluate_loaded(
    encoder: RetrievalModel, data: str | Path, collections: list[Collection], **options: Any
) -> EvaluationResult:
    """:func:`evaluate_data` on collections already read by :func:`resolve_collections` (training reads its
    evaluation data once): a suite's mean with its members, or the one collection's result; no run files."""
    return evaluate_collections(model_evaluation(encoder, options), data, collections)


def resolve_collections(
    data: str | Path, split: str = "test", data_root: str | Path | None = None
) -> Iterable[Collection]:
    """The collections ``data`` names, in evaluation order: a suite's members (loaded one at a time), or one."""
    return load_suite(str(data), data_root, split) if str(data) in SUITES else [load_collection(data, split)]


# ----------------------------------------------------------------------------------------- display
def results_table(result: EvaluationResult) -> str:
    """A readable table (rich) of one result, or of a suite's collections and their mean."""
    from rich.console import Console
    from rich.table import Table

    rows = result.members or {result.name: result}
    first = next(iter(rows.values()))
    provenance = first.provenance
    pruned = provenance.get("max_active_dims")
    lengths = f"max length {provenance.get('max_length')}" + (
        ""
        if provenance.get("query_max_length") in (None, provenance.get("max_length"))
        else f" (queries {provenance['query_max_length']})"
    )
    table = Table(
        title=f"{result.name} ({provenance.get('backend')}, k={provenance.get('k')}, {lengths}"
        + ("" if pruned is None else f", max active dims {pruned}")
        + ")"
    )
    for column in ("dataset", *result.measures, "flops", "q nnz", "d nnz", "docs", "queries", "ms/query"):
        table.add_column(column, justify="left" if column == "dataset" else "right")

    def add(label: str, row: EvaluationResult, style: str | None = None) -> None:
        numbers = row.efficiency
        table.add_row(
            label,
            *(f"{row.metrics[m]:.4f}" for m in result.measures),
            f"{numbers['flops']:.2f}",
            f"{numbers['avg_q_nnz']:.1f}",
            f"{numbers['avg_d_nnz']:.1f}",
            f"{numbers['docs']:,.0f}",
            f"{numbers['queries']:,.0f}",
            f"{numbers['search_ms_per_query']:.2f}",
            style=style,
        )

    for label, row in rows.items():
        add(label, row)
    if result.is_suite:
        add("mean", result, style="bold")
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, color_system=None)
    console.print(table)
    return buffer.getvalue().rstrip()
