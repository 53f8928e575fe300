"""Baselines every experiment table needs next to its trained models.

* **BM25** — the lexical reference: ``bm25s`` (Lucene's BM25; k1 = 0.9, b = 0.4, Anserini's defaults; lowercase
  ``\\w+`` tokens, no stemming, no stopwords), the same ranker :mod:`spladekit.training.mining` draws negatives from,
  scored with the same measures, self-hit rule and per-query values as a model
  (:func:`spladekit.evaluation.evaluate.score_hits`).
* **The untouched backbone** — the model before any training, evaluated as it is
  (:func:`spladekit.evaluation.evaluate.evaluate_data`): what a fine-tune must beat for a grid to measure learning,
  not only
  damage avoided.
"""

from __future__ import annotations

import time
from pathlib import Path

from spladekit.data.collections import Collection, reconcile
from spladekit.evaluation.bm25 import bm25_ranker
from spladekit.evaluation.evaluate import evaluate_resolved, score_hits
from spladekit.evaluation.result import EvaluationResult

BM25_K1, BM25_B = 0.9, 0.4


def evaluate_bm25(
    collection: Collection,
    k: int = 1000,
    run_path: str | Path | None = None,
    k1: float = BM25_K1,
    b: float = BM25_B,
    show_progress: bool = False,
) -> EvaluationResult:
    """BM25 on one collection: metrics and per-query values as :func:`spladekit.evaluation.evaluate.evaluate` gives a
    model
    (documents sharing no term with the query are not retrieved, as with a sparse model)."""
    collection = reconcile(collection)
    started = time.perf_counter()
    rank = bm25_ranker(collection.corpus.texts, k1, b, show_progress)
    index_seconds = time.perf_counter() - started
    depth = min(k + collection.drop_self_hits, len(collection.corpus))
    started = time.perf_counter()
    rows, scores = rank(collection.queries.texts, depth)
    search_seconds = time.perf_counter() - started
    rows[scores <= 0] = -1  # bm25s pads with score-0 documents
    metrics, per_query, self_hits = score_hits(collection, rows, scores, k, run_path, "spladekit-bm25")
    return EvaluationResult(
        name=collection.name,
        measures=tuple(collection.measures),
        metrics=metrics,
        per_query=per_query,
        efficiency={
            "docs": len(collection.corpus),
            "queries": len(collection.queries),
            "search_ms_per_query": 1000 * search_seconds / len(collection.queries),
        },
        timings={"index_seconds": round(index_seconds, 3)},
        provenance={
            "source": collection.source,
            **collection.dropped,
            "retriever": "bm25 (bm25s, lucene)",
            "k1": k1,
            "b": b,
            "k": k,
            "self_hits_removed": self_hits,
        },
    )


def evaluate_bm25_data(
    data: str | Path,
    split: str = "test",
    data_root: str | Path | None = None,
    run_dir: str | Path | None = None,
    k: int = 1000,
) -> EvaluationResult:
    """BM25 on ``data`` as ``spladekit evaluate --data`` resolves it (a suite: every member and their mean)."""
    return evaluate_resolved(
        lambda collection, run_path: evaluate_bm25(collection, k=k, run_path=run_path), data, split, data_root, run_dir
    )
