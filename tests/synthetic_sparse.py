"""Small SPLADE-like random sparse matrices for index tests (Zipf-distributed terms, positive weights)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


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
