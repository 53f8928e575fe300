"""Per-vector top-k pruning and integer weight quantization applied before export."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from spladekit.errors import SpladekitError
from spladekit.vectors_ops import best_first, quantize

__all__ = ["prune_top_k", "quantize"]


def prune_top_k(vectors: sp.csr_matrix, k: int) -> sp.csr_matrix:
    """Keep the ``k`` largest weights of every row (ties: the lower term id wins); the rest are dropped."""
    if k < 1:
        raise SpladekitError(f"top-k pruning needs k >= 1, got {k}")
    vectors = vectors.tocsr()
    vectors.sort_indices()
    keep = np.zeros(vectors.nnz, dtype=bool)
    for row in range(vectors.shape[0]):
        start, end = vectors.indptr[row], vectors.indptr[row + 1]
        keep[start + best_first(vectors.indices[start:end], vectors.data[start:end], k)] = True
    rows = np.repeat(np.arange(vectors.shape[0]), np.diff(vectors.indptr))
    counts = np.bincount(rows[keep], minlength=vectors.shape[0])
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return sp.csr_matrix((vectors.data[keep], vectors.indices[keep], indptr), shape=vectors.shape, dtype=vectors.dtype)
