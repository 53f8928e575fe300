"""Ranking losses over SPLADE vectors. Scores are plain dot products ``s(q, d) = q · d``.

Shapes: ``q`` B × V queries, ``p`` B × V their positives, ``n`` B × K × V their K hard negatives,
``teacher`` B × (1 + K) teacher scores for (positive, negatives…) in the same order. Every loss is a
mean over the batch, so gathering the batch of several processes gives the loss of the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def _own_scores(q: torch.Tensor, p: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """B × (1 + K): the score of each query with its positive, then with its K negatives."""
    positive = (q * p).sum(dim=-1, keepdim=True)
    negatives = torch.einsum("bv,bkv->bk", q, n)
    return torch.cat([positive, negatives], dim=1)


def in_batch_nll(
    q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, teacher: torch.Tensor | None = None
) -> torch.Tensor:
    """InfoNCE over in-batch positives + own hard negatives (SPLADE's ``InBatchPairwiseNLL``).

    For query i with positive p_i, the B positives of the batch and its own K negatives n_ik:

        L = -1/B Σ_i log( exp(q_i·p_i) / (Σ_j exp(q_i·p_j) + Σ_k exp(q_i·n_ik)) )

    Formal et al., "SPLADE v2", arXiv:2109.10086, §3 (in-batch negatives + BM25 hard negatives).
    """
    logits = torch.cat([q @ p.T, torch.einsum("bv,bkv->bk", q, n)], dim=1)
    return F.cross_entropy(logits, torch.arange(q.shape[0], device=q.device))


def margin_mse(q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """MarginMSE distillation: match the teacher's positive–negative margins.

        L = 1/(B·K) Σ_i Σ_k ((s(q_i,p_i) − s(q_i,n_ik)) − (t_i,pos − t_i,k))²

    Hofstätter et al., "Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge
    Distillation", arXiv:2010.02666; used for SPLADE in SPLADE v2 (arXiv:2109.10086, §4.2).
    """
    student = _own_scores(q, p, n)
    return F.mse_loss(student[:, :1] - student[:, 1:], teacher[:, :1] - teacher[:, 1:])


def kl_distillation(q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL distillation over each query's candidates (positive + K negatives):

        L = 1/B Σ_i KL( softmax(t_i) ‖ softmax(s_i) )

    Formal et al., "From Distillation to Hard Negative Sampling: Making Sparse Neural IR Models More
    Effective" (SPLADE++), arXiv:2205.04733.
    """
    student = F.log_softmax(_own_scores(q, p, n), dim=1)
    target = F.log_softmax(teacher.to(student.dtype), dim=1)
    return F.kl_div(student, target, reduction="batchmean", log_target=True)


# (q, p, n, teacher) -> loss; teacher is None only for infonce (the distillation losses need it)
LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "infonce": in_batch_nll,
    "margin_mse": margin_mse,
    "kl": kl_distillation,
}
