"""Sparsity regularizers over a batch of SPLADE vectors ``X`` (N × V), and their λ warm-up.

SPLADE's objective (Formal et al., "SPLADE v2", arXiv:2109.10086, eq. 4):
``L = L_rank + λ_q·R(Q) + λ_d·R(D)``, with separate weights for queries and documents.
"""

from __future__ import annotations

import math

import torch


def flops(x: torch.Tensor) -> torch.Tensor:
    """FLOPS regularizer: ``Σ_v (1/N Σ_i |x_iv|)²``.

    A smooth relaxation of the expected number of floating-point operations of a sparse dot product
    (Paria et al., "Minimizing FLOPs to Learn Efficient Sparse Representations", ICLR 2020,
    arXiv:2004.05665). The mean is over the batch, so it must see the whole batch: see training/loop.py.
    """
    return x.abs().mean(dim=0).pow(2).sum()


def l1(x: torch.Tensor) -> torch.Tensor:
    """L1 regularizer: ``1/N Σ_i Σ_v |x_iv|`` (the mean L1 norm of the vectors)."""
    return x.abs().sum(dim=1).mean()


def df_weights(document_frequency: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """DF-FLOPS' per-term weight ``w_v = activ(DF_v / |C|)`` with the generalized logistic

        activ(x; α, β) = 1 / (1 + (x^(log_α 2) − 1)^β)

    (Porco et al., "An Alternative to FLOPS Regularization to Effectively Productionize SPLADE-Doc", SIGIR 2025,
    arXiv:2505.15070): 0 for a term no document holds, 1/2 at ``DF/|C| = α`` (the cutoff), 1 for a term every
    document holds; β sets the steepness. ``document_frequency``: ``DF_v / |C|`` in [0, 1]."""
    x = document_frequency.double().clamp(0.0, 1.0)
    exponent = math.log(2.0) / math.log(alpha)  # log_α 2 < 0 for α in (0, 1)
    with torch.no_grad():
        powered = torch.where(x > 0, x.clamp(min=1e-300).pow(exponent), torch.full_like(x, math.inf))
        weights = 1.0 / (1.0 + (powered - 1.0).clamp(min=0.0).pow(beta))
    return weights.to(document_frequency.dtype)


def df_flops(x: torch.Tensor, documents: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """DF-FLOPS (arXiv:2505.15070): FLOPS with each term weighted by how many documents hold it,

        R(X) = Σ_v w_v · (1/N Σ_i |x_iv|)²,   w_v = activ(DF_v / |C|; α, β)   (:func:`df_weights`),

    so a term in many documents (a long posting list, what makes an engine slow) costs more than a rare one. The
    weights are constants of the step (no gradient flows through them). Where the paper re-estimates DF every 100
    steps from the vectors of its validation documents, here ``DF_v / |C|`` is the fraction of the step's own
    ``documents`` (the full batch's positives and negatives, N_d × V) holding v: no state, so the value is the same
    under DDP, gradient accumulation and resume, at the price of a noisier estimate (a batch is small). Secondary
    summaries of the paper disagree on whether w_v multiplies the square or its argument; this is the former."""
    with torch.no_grad():
        frequency = (documents > 0).to(torch.promote_types(x.dtype, torch.float32)).mean(dim=0)
        weights = df_weights(frequency, alpha, beta).to(x.dtype)
    return (weights * x.abs().mean(dim=0).pow(2)).sum()


REGULARIZERS = {"flops": flops, "l1": l1}  # df_flops takes the documents and (α, β) too: see training/step.py


def lambda_at(step: int, weight: float, warmup_steps: int) -> float:
    """Quadratic warm-up of a regularization weight: ``λ_t = λ·min(1, t/T)²`` (SPLADE v2, §3).

    ``step`` t counts optimizer steps from 1; T = 0 means no warm-up.
    """
    if warmup_steps <= 0:
        return weight
    return weight * min(1.0, step / warmup_steps) ** 2
