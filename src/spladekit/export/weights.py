"""Per-vector top-k pruning and integer weight quantization applied before export."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from spladekit.errors import SpladekitError


def prune_top_k(vectors: sp.csr_matrix, k: int) -> sp.csr_matrix:
    """Keep the ``k`` largest weights of every row (ties: the lower term id wins); the rest are dropped."""
    if k < 1:
        raise SpladekitError(f"top-k pruning needs k >= 1, got {k}")
    vectors = vectors.tocsr()
    vectors.sort_indices()
    keep = np.zeros(vectors.nnz, dtype=bool)
    for row in range(vectors.shape[0]):
        start, end = vectors.indptr[row], vectors.indptr[row + 1]
        order = np.lexsort((vectors.indices[start:end], -vectors.data[start:end]))
        keep[start + order[:k]] = True
    rows = np.repeat(np.arange(vectors.shape[0]), np.diff(vectors.indptr))
    counts = np.bincount(rows[keep], minlength=vectors.shape[0])
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return sp.csr_matrix((vectors.data[keep], vectors.indices[keep], indptr), shape=vectors.shape, dtype=vectors.dtype)


def quantize(vectors: sp.csr_matrix, scale: float) -> sp.csr_matrix:
    """Weights → ``round(w × scale)`` as whole numbers (like Anserini/Lucene impact indexes); zeros dropped.

    The dot product is multiplied by about ``scale²`` for every document alike, so rankings are kept up to
    the rounding error (≤ 0.5/scale per weight).
    """
    if not np.isfinite(scale) or scale <= 0:
        raise SpladekitError(f"quantization scale must be a positive finite number, got {scale}")
    quantized = vectors.tocsr().copy()
    quantized.data = np.rint(quantized.data * scale).astype(vectors.dtype)
    quantized.eliminate_zeros()
    return quantized
