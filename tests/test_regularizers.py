"""FLOPS / L1 regularizers and the quadratic λ warm-up."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spladekit.training.regularizers import flops, l1, lambda_at


def test_flops_by_hand():
    x = torch.tensor([[1.0, 0.0, 2.0], [3.0, -2.0, 0.0]])
    # column means of |x|: 2, 1, 1 -> 4 + 1 + 1
    assert float(flops(x)) == pytest.approx(6.0)


def test_l1_by_hand():
    x = torch.tensor([[1.0, 0.0, 2.0], [3.0, -2.0, 0.0]])
    assert float(l1(x)) == pytest.approx((3 + 5) / 2)


def test_flops_of_a_batch_is_not_the_mean_of_micro_batch_flops():
    """Why gradient accumulation needs the whole batch (training/loop.py): FLOPS is a square of a mean."""
    x = torch.tensor([[4.0, 0.0], [0.0, 4.0]])
    micro = (float(flops(x[:1])) + float(flops(x[1:]))) / 2
    assert float(flops(x)) == pytest.approx(8.0) and micro == pytest.approx(16.0)


def test_lambda_warm_up_is_quadratic_then_flat():
    assert lambda_at(5, 2.0, 10) == pytest.approx(2.0 * 0.25)
    assert lambda_at(10, 2.0, 10) == pytest.approx(2.0)
    assert lambda_at(50, 2.0, 10) == pytest.approx(2.0)
    assert lambda_at(1, 2.0, 0) == pytest.approx(2.0)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 200), st.integers(1, 200))
def test_lambda_is_non_decreasing(step, warmup):
    assert lambda_at(step, 1.0, warmup) <= lambda_at(step + 1, 1.0, warmup) <= 1.0


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(1, 5), st.integers(0, 1000))
def test_flops_is_invariant_to_batch_order_and_sign(n, v, seed):
    x = torch.randn(n, v, generator=torch.Generator().manual_seed(seed))
    assert float(flops(x)) == pytest.approx(float(flops(-x.flip(0))), rel=1e-6)
