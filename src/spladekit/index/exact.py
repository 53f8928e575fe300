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

import numpy as np
import scipy.sparse as sp

from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.vectors_ops import best_first

POSTINGS_FILE = "postings.npz"


class ExactSearcher(Searcher):
    """Exact inner-product top-k (the reference every approximate backend is measured against).

    ``query_batch``: queries scored per sparse product; bounds the memory of the score matrix.
    """

    name = "exact"
    build_params = ("query_batch",)
    search_params = ()

    def __init__(self, postings: sp.csr_matrix, query_batch: int = 64):
        self.postings = postings
        self.vocab_size, self.n_docs = postings.shape
        self.params = {"query_batch": query_batch}
        self.query_batch = query_batch

    @classmethod
    def build(cls, documents: sp.csr_matrix, query_batch: int = 64) -> ExactSearcher:
        postings = check_documents(documents).T.tocsr()
        postings.sort_indices()
        return cls(postings, query_batch=query_batch)

    def search(self, queries: sp.csr_matrix, k: int = 10) -> SearchResult:
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
    def read_files(cls, folder: Path, manifest: dict) -> ExactSearcher:
        postings = sp.load_npz(folder / POSTINGS_FILE).tocsr()
        return cls(postings, **manifest["params"])
