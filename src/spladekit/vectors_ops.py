"""Two operations on sparse weights that export and the search backends must do identically.

``best_first``: the one ordering rule of spladekit (score descending, then lower key first), used for search
hits (key = document row) and for per-vector pruning (key = term id), so that every backend and every export
breaks ties the same way. ``quantize``: weights to whole numbers ``round(w × scale)``, for search-engine
exports (impact indexes) and for BMP's 8-bit impacts.
"""

from __future__ import annotations

from typing import cast, overload

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from spladekit.errors import SpladekitError


def best_first(keys: np.ndarray, scores: np.ndarray, k: int | None = None) -> np.ndarray:
    """Positions of the ``k`` best entries (all when ``k`` is None), best first: score descending, then key
    ascending. Above ``k`` entries, a partition keeps only those scoring at least the k-th before sorting."""
    positions = np.arange(len(scores))
    if k is not None and len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        positions = np.flatnonzero(scores >= kth)
    return positions[np.lexsort((keys[positions], -scores[positions]))][:k]


@overload
def quantize(weights: np.ndarray, scale: float, minimum: int | None = None, dtype: npt.DTypeLike | None = None) -> np.ndarray: ...
@overload
def quantize(weights: sp.spmatrix, scale: float, minimum: int | None = None, dtype: npt.DTypeLike | None = None) -> sp.csr_matrix: ...
def quantize(
    weights: np.ndarray | sp.spmatrix, scale: float, minimum: int | None = None, dtype: npt.DTypeLike | None = None
) -> np.ndarray | sp.csr_matrix:
    """Weights → ``round(w × scale)`` (like Anserini/Lucene impact indexes), as ``dtype`` (default: unchanged).

    ``minimum`` raises every level below it (BMP: ``minimum=1`` keeps every positive weight positive). A
    sparse matrix is quantized in its stored weights and the zeros rounding produces are dropped. The dot
    product is multiplied by about ``scale²`` for every document alike, so rankings are kept up to the
    rounding error (≤ 0.5/scale per weight).
    """
    if not np.isfinite(scale) or scale <= 0:
        raise SpladekitError(f"quantization scale must be a positive finite number, got {scale}")
    if sp.issparse(weights):
        quantized = cast(sp.spmatrix, weights).tocsr().copy()  # issparse() does not narrow the type
        quantized.data = quantize(quantized.data, scale, minimum, dtype)
        quantized.eliminate_zeros()
        return quantized
    levels = np.rint(weights * scale)
    if minimum is not None:
        levels = np.maximum(minimum, levels)
    return levels.astype(dtype or weights.dtype)
