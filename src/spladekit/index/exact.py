"""Exact search over an inverted index (term → postings) built from the CSR document matrix.

The inverted index is the transposed document matrix ``P = Dᵀ`` in CSR form (V × N): row v is the
posting list of term v (document rows, weights). A query batch is scored term-at-a-time by the sparse
product ``S = Q · P`` (scipy's SpGEMM walks the posting list of every query term and accumulates into
a per-query accumulator), so ``S[q, d] = Σ_v q_v · d_v`` exactly as brute-force ``Q @ D.T``.

Top-k: highest score first; equal scores are ordered by document row (lower row first). Documents that
share no term with the query (score 0) are not returned; the result is padded with -1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.index.params import Param
from spladekit.vectors_ops import best_first

POSTINGS_FILE = "postings.npz"


class ExactSearcher(Searcher):
    """Exact inner-product top-k (the reference every approximate backend is measured against)."""

    name = "exact"
    summary = "inverted index, exact top-k"
    declared_params = (
        Param("query_batch", int, 64, "queries scored per sparse product (bounds the score matrix's memory)",
              minimum=1),
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
        self.check_params(params, "search")  # exact search has no parameters: refuse any, clearly
        k = self.result_size(k)
        queries = self.check_queries(queries)
        hits = []
        for start in range(0, queries.shape[0], self.query_batch):
            scores = (queries[start : start + self.query_batch] @ self.postings).tocsr()
            for i in range(scores.shape[0]):
                low, high = scores.indptr[i], scores.indptr[i + 1]
                rows, values = scores.indices[low:high].astype(np.int64), scores.data[low:high]
                order = best_first(rows, values, k)
                hits.append((rows[order], values[order]))
        return SearchResult.from_hits(hits, k)

    def write_files(self, folder: Path) -> None:
        sp.save_npz(folder / POSTINGS_FILE, self.postings, compressed=False)

    @classmethod
    def stored_files(cls, params: dict) -> tuple[str, ...]:
        return (POSTINGS_FILE,)

    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> ExactSearcher:
        postings = sp.load_npz(folder / POSTINGS_FILE).tocsr()
        return cls(postings, cls.defaults() | manifest["params"])
