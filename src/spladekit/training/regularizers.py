"""Sparsity regularizers over a batch of SPLADE vectors ``X`` (N × V), and their λ warm-up.

SPLADE's objective (Formal et al., "SPLADE v2", arXiv:2109.10086, eq. 4):
``L = L_rank + λ_q·R(Q) + λ_d·R(D)``, with separate weights for queries and documents.
"""

from __future__ import annotations

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


REGULARIZERS = {"flops": flops, "l1": l1}


def lambda_at(step: int, weight: float, warmup_steps: int) -> float:
    """Quadratic warm-up of a regularization weight: ``λ_t = λ·min(1, t/T)²`` (SPLADE v2, §3).

    ``step`` t counts optimizer steps from 1; T = 0 means no warm-up.
    """
    if warmup_steps <= 0:
        return weight
    return weight * min(1.0, step / warmup_steps) ** 2
