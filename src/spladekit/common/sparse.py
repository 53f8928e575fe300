"""Operations on sparse weights that encoding, indexing, evaluation, export and the search backends must do
identically.

``best_first``: the one ordering rule of spladekit (score descending, then lower key first), used for search
hits (key = document row) and for per-vector pruning (key = term id), so that every backend and every export
breaks ties the same way. ``keep_top_weights``: that rule applied to every row of a CSR matrix at once
(``max_active_dims``: at encode time, in the index, in evaluation and in exports). ``quantize``: weights to
whole numbers ``round(w × scale)``, for search-engine exports (impact indexes) and for BMP's 8-bit impacts;
``check_rounded_away``: the one rule for the weights a scale rounds to 0; ``quantize_impacts``: the one check that an
engine's integers can hold the impacts (:class:`ImpactRange`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast, overload

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from spladekit.common.errors import SpladekitError

if TYPE_CHECKING:
    import torch

log = logging.getLogger("spladekit")

# Non-zero weights a quantization scale may round to 0: above REFUSED the index or export is refused (it would have
# lost most of its postings, e.g. --quantization-scale 1e-6), above WARNED it is written with a warning.
ROUNDED_AWAY_REFUSED = 0.5
ROUNDED_AWAY_WARNED = 0.01
IMPACT_LEVELS = 2048  # integer levels the default impact scale gives the largest document weight (11 bits)


def round_down_3(value: float) -> float:
    """``value`` (finite, > 0) rounded down to 3 significant digits: a scale a person can read and type."""
    step = 10 ** (np.floor(np.log10(value)) - 2)
    return float(np.floor(value / step) * step)


def impact_scale(max_document_weight: float, levels: int = IMPACT_LEVELS) -> float:
    """The default integer-impact scale of a collection (PISA, Anserini, CIFF): ``levels / max(d)`` rounded down to
    3 significant digits, so the largest document weight becomes about ``levels`` and every weight is kept to
    ``0.5 / scale = max(d) / (2 · levels)``. Derived from the weights, not fixed: a fixed scale keeps few levels of
    a model with small weights, and the engines' customary 100 drifted from float32 on real collections (the
    measurements, and the cost of a larger scale: docs/results/impact-scale). 100 when no document has a positive
    weight (nothing to scale)."""
    if not np.isfinite(max_document_weight) or max_document_weight <= 0:
        return 100.0
    return round_down_3(levels / max_document_weight)


def max_weight(blocks: Iterable[sp.spmatrix]) -> float:
    """The largest stored weight over row blocks (one pass; a block at a time)."""
    return max((float(block.data.max(initial=0.0)) for block in blocks), default=0.0)


def best_first(keys: np.ndarray, scores: np.ndarray, k: int | None = None) -> np.ndarray:
    """Positions of the ``k`` best entries (all when ``k`` is None), best first: score descending, then key
    ascending. Above ``k`` entries, a partition keeps only those scoring at least the k-th before sorting."""
    positions = np.arange(len(scores))
    if k is not None and len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        positions = np.flatnonzero(scores >= kth)
    return positions[np.lexsort((keys[positions], -scores[positions]))][:k]


def check_max_active_dims(k: int | None) -> None:
    """``max_active_dims`` is None (no pruning) or a whole number >= 1; anything else is a SpladekitError."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise SpladekitError(f"max_active_dims must be a whole number >= 1, got {k!r}")


def keep_top_weights(matrix: sp.spmatrix, k: int) -> sp.csr_matrix:
    """The ``k`` largest stored weights of every row, the rest dropped (rows with at most ``k`` keep all).

    Ties follow :func:`best_first` (weight descending, then lower term id), so the result is deterministic.
    Vectorised over the CSR arrays: one ``lexsort`` of (row, -weight, term id) gives each entry its rank in
    its row, ``rank = position - first position of the row``, and entries with ``rank < k`` are kept (in
    their original column order).
    """
    check_max_active_dims(k)
    matrix = sp.csr_matrix(matrix, copy=True)  # the input is never modified
    matrix.sum_duplicates()  # one stored weight per (row, term)
    lengths = np.diff(matrix.indptr)
    if not (lengths > k).any():
        return matrix
    rows = np.repeat(np.arange(matrix.shape[0]), lengths)
    order = np.lexsort((matrix.indices, -matrix.data, rows))  # by row, then weight descending, then term id
    rank = np.empty(matrix.nnz, dtype=np.int64)
    rank[order] = np.arange(matrix.nnz) - matrix.indptr[rows]  # rows is sorted, so rows[order] == rows
    keep = rank < k
    indptr = np.concatenate([[0], np.cumsum(np.minimum(lengths, k))])
    return sp.csr_matrix((matrix.data[keep], matrix.indices[keep], indptr), shape=matrix.shape, dtype=matrix.dtype)


@overload
def quantize(
    weights: np.ndarray, scale: float, minimum: int | None = None, dtype: npt.DTypeLike | None = None
) -> np.ndarray: ...
@overload
def quantize(
    weights: sp.spmatrix, scale: float, minimum: int | None = None, dtype: npt.DTypeLike | None = None
) -> sp.csr_matrix: ...
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


def check_rounded_away(weights: int, dropped: int, scale: float, what: str) -> None:
    """Of ``weights`` non-zero weights, ``dropped`` round to 0 at ``scale`` (``|w| × scale < 0.5``): refused above
    :data:`ROUNDED_AWAY_REFUSED` of them (a :class:`SpladekitError`, raised before the output is sealed), a
    warning above :data:`ROUNDED_AWAY_WARNED`; both name the fraction and the weight below which nothing is kept."""
    if not weights or dropped / weights <= ROUNDED_AWAY_WARNED:
        return
    lost = (
        f"{what}: {dropped / weights:.1%} of the {weights:,} non-zero weights round to 0 at quantization scale "
        f"{scale:g} (every weight below {0.5 / scale:.3g} is lost)"
    )
    if dropped / weights > ROUNDED_AWAY_REFUSED:
        raise SpladekitError(f"{lost}; nothing was written: use a larger scale")
    log.warning("%s", lost)


INT32_MAX = 2**31 - 1  # CIFF's protobuf int32 tf and doclength; Anserini reads an impact as a Java int
UINT32_MAX = 2**32 - 1  # PISA's impacts and document lengths


@dataclass(frozen=True)
class ImpactRange:
    """The integer impacts an engine can hold: each at most ``limit``, and per document a length (the sum over its
    terms of impact × ``unit(term ids)``, 1 when no unit is given: the sum of its impacts) at most ``length_limit``.
    ``name`` and ``option`` (what sets the scale) are for the error; ``length`` says what the length is."""

    name: str
    option: str
    limit: int
    length_limit: int
    length: str = "the sum of its impacts"
    unit: Callable[[np.ndarray], np.ndarray] | None = None


def quantize_impacts(
    documents: sp.csr_matrix,
    scale: float,
    limits: ImpactRange,
    first_row: int = 0,
    ids: Sequence[str] | None = None,
) -> sp.csr_matrix:
    """``quantize(documents, scale)`` (in the documents' float type: what the engine then stores), refusing a
    document whose impacts ``limits`` cannot hold, before anything is written. The one check of every integer-impact
    output (PISA, Anserini, CIFF): past the limit an engine wraps the number or drops the document and still exits
    0 (Anserini returned a collection without its top hit). The error names the document (``ids[row]``, else its row
    counted from ``first_row``), the limit, and the largest scale that fits."""
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing product is an impact over any limit
        levels = quantize(documents, scale)
    if not levels.nnz:
        return levels

    def document(row: int) -> str:
        return repr(ids[row]) if ids is not None else f"row {first_row + row}"

    worst = int(np.argmax(np.where(np.isnan(levels.data), np.inf, levels.data)))
    level = float(levels.data[worst])
    cost = levels.data.astype(np.float64) * (1 if limits.unit is None else limits.unit(levels.indices))
    lengths = np.bincount(
        np.repeat(np.arange(levels.shape[0]), np.diff(levels.indptr)), weights=cost, minlength=levels.shape[0]
    )
    longest = int(np.argmax(lengths))
    # a scale that fits both limits (the impact and the length) for every document of the block
    fitting = _fitting_scale(scale * min(limits.limit / level, limits.length_limit / lengths[longest]))
    if not level <= limits.limit:
        row = int(np.searchsorted(levels.indptr, worst, side="right")) - 1
        impact = (
            f"an impact of {level:,.0f} (weight {level / scale:.6g} on term {levels.indices[worst]} x scale {scale:g})"
            if np.isfinite(level)
            else f"an impact that overflows float (term {levels.indices[worst]} x scale {scale:g})"
        )
        raise SpladekitError(
            f"{limits.name}: document {document(row)} has {impact}, over {limits.limit:,}, the largest "
            f"{limits.name} can hold; lower {limits.option}{fitting}"
        )
    if lengths[longest] > limits.length_limit:
        raise SpladekitError(
            f"{limits.name}: document {document(longest)} has a length of {lengths[longest]:,.0f} at scale "
            f"{scale:g} ({limits.length}), over {limits.length_limit:,}, the most {limits.name} can hold; lower "
            f"{limits.option}{fitting}"
        )
    return levels


def _fitting_scale(fitting: float) -> str:
    """`` to S or less``: ``fitting`` rounded down to 3 significant digits; empty when no scale fits (an impact
    that overflowed float)."""
    if not np.isfinite(fitting) or fitting <= 0:
        return ""
    return f" to {round_down_3(fitting):g} or less"


def dense_to_csr(batch: torch.Tensor) -> sp.csr_matrix:
    """B × V torch tensor → float32 CSR, keeping only strictly positive entries' structure."""
    with warnings.catch_warnings():  # "sparse CSR support is in beta": conversion only, which is stable
        warnings.simplefilter("ignore", UserWarning)
        sparse = batch.detach().float().cpu().to_sparse_csr()
    return sp.csr_matrix(
        (sparse.values().numpy(), sparse.col_indices().numpy(), sparse.crow_indices().numpy()),
        shape=tuple(batch.shape),
        dtype=np.float32,
    )


def nnz_per_row(matrix: sp.csr_matrix) -> np.ndarray:
    """Stored entries per row (SPLADE stores only positive weights, so: active terms per text)."""
    return np.diff(matrix.indptr)
