"""FLOPS / L1 regularizers and the quadratic λ warm-up."""

from __future__ import annotations

import math

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


def test_df_weights_by_hand():
    from spladekit.training.regularizers import df_weights

    frequency = torch.tensor([0.0, 0.1, 1.0, 0.05], dtype=torch.float64)
    weights = df_weights(frequency, alpha=0.1, beta=2.0)
    # activ(x) = 1 / (1 + (x^(log_0.1 2) - 1)^2): 0 unheld, 1/2 at the cutoff, 1 when every document holds it
    exponent = math.log(2) / math.log(0.1)
    expected = [0.0, 0.5, 1.0, 1 / (1 + (0.05**exponent - 1) ** 2)]
    assert weights.tolist() == pytest.approx(expected, abs=1e-12)
    assert 0 < expected[3] < 0.5


def test_df_flops_and_its_gradient_equal_a_naive_loop():
    from spladekit.training.regularizers import df_flops, df_weights

    generator = torch.Generator().manual_seed(0)
    docs = torch.relu(torch.randn(12, 7, generator=generator, dtype=torch.float64))
    docs[:, 3] = 0  # a term no document holds: weight 0
    docs[:, 5] = docs[:, 5].abs() + 0.1  # a term every document holds: weight 1
    x = torch.relu(torch.randn(5, 7, generator=generator, dtype=torch.float64)).requires_grad_()
    value = df_flops(x, docs, alpha=0.2, beta=3.0)
    (gradient,) = torch.autograd.grad(value, x)
    expected = 0.0
    for v in range(7):
        frequency = sum(1 for i in range(12) if docs[i, v] > 0) / 12
        weight = float(df_weights(torch.tensor([frequency], dtype=torch.float64), 0.2, 3.0)[0])
        mean = sum(abs(float(x[i, v])) for i in range(5)) / 5
        expected += weight * mean**2
        for i in range(5):  # d/dx_iv of w_v (mean_v)^2 = 2 w_v mean_v sign(x_iv) / N
            want = 2 * weight * mean * (1.0 if float(x[i, v]) > 0 else 0.0) / 5
            assert float(gradient[i, v]) == pytest.approx(want, abs=1e-12)
    assert float(value) == pytest.approx(expected, rel=1e-12)
    # less than FLOPS itself: every weight is at most 1, and term 3's is 0
    assert float(value) < float(flops(x))
