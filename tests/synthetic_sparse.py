"""Small SPLADE-like random sparse matrices for index tests (Zipf-distributed terms, positive weights)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from spladekit.common.sparse import best_first, quantize
from spladekit.index.base import Searcher


def zipf_matrix(rows: int, vocab: int, nnz_per_row: int, seed: int, exponent: float = 1.0) -> sp.csr_matrix:
    """rows × vocab float32 CSR; each row draws ``nnz_per_row`` terms with P(v) ∝ 1/(v+1)^exponent
    (duplicates merged, so rows hold slightly fewer), weights Gamma(2, 0.5) like SPLADE's log-saturated ones."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** exponent
    terms = rng.choice(vocab, size=(rows, nnz_per_row), p=p / p.sum())
    weights = rng.gamma(2.0, 0.5, size=(rows, nnz_per_row)).astype(np.float32)
    matrix = sp.coo_matrix(
        (weights.ravel(), (np.repeat(np.arange(rows), nnz_per_row), terms.ravel())), shape=(rows, vocab)
    ).tocsr()
    matrix.sort_indices()
    return matrix


def coarse(matrix: sp.csr_matrix, levels: int) -> sp.csr_matrix:
    """Weights rounded up to ``levels`` distinct values (0.01 … levels/100): many tied scores."""
    matrix = matrix.copy()
    matrix.data = (np.ceil(matrix.data / matrix.data.max() * levels) / 100).astype(np.float32)
    return matrix


def brute_force(
    documents: sp.csr_matrix, queries: sp.csr_matrix, scale: float, k: int
) -> list[tuple[list, np.ndarray]]:
    """Top-k rows and integer scores of ``round(q·scale) · round(d·scale)``, best first, ties by row."""
    scores = (quantize(queries, scale).astype(np.int64) @ quantize(documents, scale).astype(np.int64).T).tocsr()
    hits = []
    for i in range(scores.shape[0]):
        low, high = scores.indptr[i], scores.indptr[i + 1]
        rows, values = scores.indices[low:high].astype(np.int64), scores.data[low:high]
        order = best_first(rows, values, k)
        hits.append((rows[order].tolist(), values[order]))
    return hits


def assert_equals_brute_force(searcher: Searcher, documents, queries, k: int, **params) -> None:
    result = searcher.search(queries, k=k, **params)
    scale = searcher.params["scale"]
    for i, (rows, values) in enumerate(brute_force(documents, queries, scale, k)):
        found = result.doc_indices[i]
        assert found[found >= 0].tolist() == rows, f"query {i}"
        np.testing.assert_allclose(result.scores[i, : len(rows)], values / scale**2, rtol=1e-6)
