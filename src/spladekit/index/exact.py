"""Exact search over an inverted index (term → postings) built from the CSR document matrix.

The inverted index is the transposed document matrix ``P = Dᵀ`` in CSR form (V × N): row v is the
posting list of term v (document rows, weights). A query q is scored term-at-a-time into a dense
accumulator ``s`` of n_docs float32 zeros::

    for every query term v (ascending term id):   s[P_v.rows] += P_v.weights × q_v

so ``s[d] = Σ_v q_v · d_v`` with the terms added in the same order as scipy's brute-force ``Q @ D.T``
(identical float32 sums). Each posting list holds a document at most once, so every update is a plain
scatter-add, done in C with the GIL released (below), without copying the posting lists.

Top-k: highest score first; equal scores are ordered by document row (lower row first). Documents that
share no term with the query (score 0) are not returned; the result is padded with -1. The k-th largest
score comes from a partition of ``s``; only the documents scoring at least that much (and more than 0)
are sorted.

Queries are split into blocks of ``query_batch`` that ``num_threads`` threads take in turn, each with its
own accumulator (memory: 2 × n_docs × 4 bytes per thread). The threads run in parallel because the
scatter-add, the partition and the comparisons release the GIL; results do not depend on the number of
threads (every query is scored by exactly the same operations).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

# scipy's C kernel behind ``csc_matrix @ vector``: ``y[Ai[j]] += Ax[j] × x[col]``, in place, GIL released.
# Called once per query term on the whole index's arrays (the term's range, no copy). The public operator
# would allocate an n_docs result per call, and selecting the query's posting lists first (``P[terms]``)
# copies them (about half as fast when measured, docs/benchmarks.md "Search", and the copy did not gain from threads).
from scipy.sparse._sparsetools import csc_matvec

from spladekit.common.sparse import best_first
from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.index.params import Param

POSTINGS_FILE = "postings.npz"


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; ``os.cpu_count`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


class ExactSearcher(Searcher):
    """Exact inner-product top-k (the reference every approximate backend is measured against)."""

    name = "exact"
    summary = "inverted index, exact top-k"
    declared_params = (
        Param("query_batch", int, 16, "queries a thread takes at a time (smaller: threads finish together)", minimum=1),
        Param(
            "num_threads",
            int,
            0,
            "search threads (0: all cores this process may use); results do not depend on it",
            role="search",
            minimum=0,
        ),
    )

    def __init__(self, postings: sp.csr_matrix, params: dict) -> None:
        self.postings = postings
        self.vocab_size, self.n_docs = postings.shape
        self.params = params
        self.query_batch = params["query_batch"]

    @classmethod
    def build(cls, documents: sp.csr_matrix, **params: Any) -> ExactSearcher:
        params = cls.defaults() | cls.check_params(params)
        postings = check_documents(documents).T.tocsr()
        postings.sort_indices()
        return cls(postings, params)

    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """``params``: num_threads (default: the index's)."""
        threads = self.search_settings(params)["num_threads"] or available_cores()
        k = self.result_size(k)
        queries = self.check_queries(queries)
        doc_indices = np.full((queries.shape[0], k), -1, dtype=np.int64)
        scores = np.zeros((queries.shape[0], k), dtype=np.float32)

        def search_block(start: int) -> None:
            accumulator = np.empty(self.n_docs, dtype=np.float32)
            for i in range(start, min(start + self.query_batch, queries.shape[0])):
                low, high = queries.indptr[i], queries.indptr[i + 1]
                self.accumulate(queries.indices[low:high], queries.data[low:high], accumulator)
                rows, values = top_k(accumulator, k)
                doc_indices[i, : len(rows)], scores[i, : len(rows)] = rows, values

        blocks = range(0, queries.shape[0], self.query_batch)
        if threads == 1 or len(blocks) <= 1:
            for start in blocks:
                search_block(start)
        else:
            with ThreadPoolExecutor(max_workers=min(threads, len(blocks))) as pool:
                list(pool.map(search_block, blocks))  # list(): re-raises a thread's exception here
        return SearchResult(doc_indices, scores)

    def accumulate(self, terms: np.ndarray, weights: np.ndarray, accumulator: np.ndarray) -> None:
        """``accumulator`` ← the scores of the query ``Σ_v weights_v · P_v`` (terms ascending)."""
        accumulator.fill(0)
        indptr, indices, data = self.postings.indptr, self.postings.indices, self.postings.data
        for j, term in enumerate(terms.tolist()):
            # one column whose entries are the whole index's from indptr[term] to indptr[term + 1]: no copy
            csc_matvec(self.n_docs, 1, indptr[term : term + 2], indices, data, weights[j : j + 1], accumulator)

    def write_files(self, folder: Path) -> None:
        sp.save_npz(folder / POSTINGS_FILE, self.postings, compressed=False)

    @classmethod
    def stored_files(cls, params: dict) -> tuple[str, ...]:
        return (POSTINGS_FILE,)

    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> ExactSearcher:
        postings = sp.load_npz(folder / POSTINGS_FILE).tocsr()
        return cls(postings, cls.defaults() | manifest["params"])


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows and scores of the ``k`` best positive entries of a dense score vector, best first (score
    descending, then lower row: :func:`best_first`). A partition finds the k-th largest score; only the
    entries at least that high (and above 0) are sorted."""
    kth = np.partition(scores, len(scores) - k)[len(scores) - k]
    rows = np.flatnonzero(scores >= kth) if kth > 0 else np.flatnonzero(scores > 0)
    order = best_first(rows, scores[rows], k)
    return rows[order], scores[rows[order]]
