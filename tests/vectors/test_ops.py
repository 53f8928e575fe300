"""vectors_ops.keep_top_weights (max_active_dims): equal to a per-row brute force, ties to the lower term id."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.common.errors import SpladekitError
from spladekit.common.sparse import check_max_active_dims, keep_top_weights


def brute_force_top(matrix: sp.csr_matrix, k: int) -> np.ndarray:
    """Row by row: sort the stored (term, weight) pairs by weight descending then term id, keep the first k."""
    dense = np.zeros(matrix.shape, dtype=matrix.dtype)
    for row in range(matrix.shape[0]):
        start, end = matrix.indptr[row], matrix.indptr[row + 1]
        pairs = sorted(
            zip(matrix.indices[start:end].tolist(), matrix.data[start:end].tolist()),
            key=lambda pair: (-pair[1], pair[0]),
        )
        for term, weight in pairs[:k]:
            dense[row, term] = weight
    return dense


def random_matrix(seed: int, rows: int = 40, columns: int = 60) -> sp.csr_matrix:
    """Rows from empty to dense, weights drawn from few levels (many ties, also at the cut)."""
    rng = np.random.default_rng(seed)
    dense = np.zeros((rows, columns), dtype=np.float32)
    for row in range(rows):
        active = rng.choice(columns, size=rng.integers(0, columns), replace=False)
        dense[row, active] = rng.integers(1, 5, size=active.size) / 4
    return sp.csr_matrix(dense)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [1, 2, 7, 30, 59, 60, 100])
def test_keep_top_weights_equals_a_per_row_brute_force(seed, k):
    matrix = random_matrix(seed)
    before = matrix.copy()
    pruned = keep_top_weights(matrix, k)
    assert sp.isspmatrix_csr(pruned) and pruned.dtype == matrix.dtype and pruned.shape == matrix.shape
    np.testing.assert_array_equal(pruned.toarray(), brute_force_top(matrix, k))
    np.testing.assert_array_equal(np.diff(pruned.indptr), np.minimum(np.diff(matrix.indptr), k))
    assert pruned.has_sorted_indices
    assert (matrix != before).nnz == 0  # the input is not modified


def test_ties_go_to_the_lower_term_id_and_short_rows_keep_everything():
    matrix = sp.csr_matrix(
        np.array(
            [[0.5, 2.0, 0.0, 2.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [3.0, 0.0, 1.0, 0.0, 0.0, 0.0]],
            dtype=np.float32,
        )
    )
    np.testing.assert_array_equal(
        keep_top_weights(matrix, 2).toarray(), [[0, 2, 0, 2, 0, 0], [0] * 6, [3, 0, 1, 0, 0, 0]]
    )
    np.testing.assert_array_equal(keep_top_weights(matrix, 1).toarray()[0], [0, 2, 0, 0, 0, 0])


def test_unsorted_csr_input_is_pruned_by_term_id_not_by_storage_order():
    # row 0 stores term 4 before term 1, both weight 1.0: term 1 must win the tie
    matrix = sp.csr_matrix(
        (np.array([1.0, 1.0, 0.5], dtype=np.float32), np.array([4, 1, 2]), np.array([0, 3])), shape=(1, 6)
    )
    assert not matrix.has_sorted_indices
    np.testing.assert_array_equal(keep_top_weights(matrix, 1).toarray(), [[0, 1, 0, 0, 0, 0]])


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_a_bad_k_is_refused(bad):
    with pytest.raises(SpladekitError, match="max_active_dims must be a whole number >= 1"):
        keep_top_weights(sp.csr_matrix(np.ones((1, 3), dtype=np.float32)), bad)
    with pytest.raises(SpladekitError):
        check_max_active_dims(bad)
    check_max_active_dims(None)
