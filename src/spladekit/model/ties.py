"""Ties in the fused head's backward: the gradient of a max shared as autograd's ``amax`` shares it, among tokens
that tie on every term (an all-zero vocabulary row; bitwise identical token rows of one text)."""

from __future__ import annotations

import torch


def mean_rows(flat: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Per text, the mean of its real tokens' rows: what dW_v accumulates for an all-zero W_v (e.g. the
    zero padding row of BERT-style tied embeddings), whose logit b_v every real token ties at, sharing
    the gradient evenly as autograd's ``amax`` does."""
    keep = attention_mask.reshape(*attention_mask.shape, 1).to(flat.dtype)
    real = flat.view(*attention_mask.shape, -1) * keep
    return real.sum(1) / keep.sum(1).clamp(min=1)


def share_among_identical_rows(grad: torch.Tensor, flat: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``grad`` (B·L × H, each pair's gradient at its winning row) shared evenly among bitwise identical
    token rows of one text.

    Autograd's ``amax`` splits a max's gradient evenly between tied maxima. Tokens with bitwise
    identical hidden rows in one text tie on every term, so each receives its group's share; this
    makes the fused gradient equal the naive one on repeated tokens (e.g. without position signal).
    A group is keyed by (text, row id) in int64: a text index stored in a bf16 row would merge texts
    past 256 (and fp16 past 2,048).
    """
    total, width = flat.shape
    length = attention_mask.shape[1]
    real = torch.nonzero(attention_mask.reshape(total).bool(), as_tuple=True)[0]
    _, row_id = torch.unique(flat[real] + 0.0, dim=0, return_inverse=True)  # +0.0: -0 == 0
    key = (real // length) * real.shape[0] + row_id
    groups, group_of, group_size = torch.unique(key, return_inverse=True, return_counts=True)
    if groups.shape[0] == real.shape[0]:  # no repeated rows: every gradient stays at its winner
        return grad
    shares = torch.zeros(groups.shape[0], width, dtype=grad.dtype, device=grad.device)
    shares.index_add_(0, group_of, grad[real])
    shared = torch.zeros_like(grad)
    shared[real] = shares[group_of] / group_size[group_of].unsqueeze(1).to(grad.dtype)
    return shared
