"""Ranking losses against their formulas written out element by element."""

from __future__ import annotations

import math

import pytest
import torch

from spladekit.training.losses import LOSSES, in_batch_nll, kl_distillation, margin_mse


def batch(b=3, k=2, v=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q, p, n = (torch.rand(*shape, generator=generator) for shape in [(b, v), (b, v), (b, k, v)])
    teacher = torch.randn(b, 1 + k, generator=generator) * 3
    return q, p, n, teacher


def test_in_batch_nll_matches_the_formula():
    q, p, n, _ = batch()
    expected = 0.0
    for i in range(q.shape[0]):
        logits = [float(q[i] @ p[j]) for j in range(p.shape[0])] + [float(q[i] @ n[i, k]) for k in range(n.shape[1])]
        expected -= logits[i] - math.log(sum(math.exp(s) for s in logits))
    assert float(in_batch_nll(q, p, n)) == pytest.approx(expected / q.shape[0], rel=1e-5)


def test_in_batch_nll_falls_when_positive_scores_rise():
    q, p, n, _ = batch()
    assert float(in_batch_nll(q, p + q, n)) < float(in_batch_nll(q, p, n))


def test_margin_mse_matches_the_formula_and_is_zero_on_matching_margins():
    q, p, n, teacher = batch()
    total = 0.0
    for i in range(3):
        for k in range(2):
            student = float(q[i] @ p[i]) - float(q[i] @ n[i, k])
            total += (student - float(teacher[i, 0] - teacher[i, 1 + k])) ** 2
    assert float(margin_mse(q, p, n, teacher)) == pytest.approx(total / 6, rel=1e-5)
    own = torch.stack([torch.stack([q[i] @ p[i]] + [q[i] @ n[i, k] for k in range(2)]) for i in range(3)])
    assert float(margin_mse(q, p, n, own + 4.0)) == pytest.approx(0.0, abs=1e-10)


def test_kl_is_zero_for_the_same_ranking_distribution_and_positive_otherwise():
    q, p, n, teacher = batch()
    own = torch.stack([torch.stack([q[i] @ p[i]] + [q[i] @ n[i, k] for k in range(2)]) for i in range(3)])
    assert float(kl_distillation(q, p, n, own - 1.0)) == pytest.approx(0.0, abs=1e-6)
    t, s = torch.softmax(teacher, 1), torch.softmax(own, 1)
    expected = float((t * (t.log() - s.log())).sum() / 3)
    assert float(kl_distillation(q, p, n, teacher)) == pytest.approx(expected, rel=1e-5)
    assert expected > 0


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_have_finite_gradients(name):
    q, p, n, teacher = batch()
    q.requires_grad_(True)
    LOSSES[name](q, p, n, teacher).backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0
