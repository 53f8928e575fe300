"""SPLADE pooling over the vocabulary projection.

For every vocabulary term v (Formal et al., "SPLADE v2", arXiv:2109.10086, eq. 2 with max pooling):

    w_v = max_t  log(1 + ReLU(h_t · W_v + b_v))      over the non-padding tokens t

where h_t is the input of the vocabulary projection (the MLM transform output) for token t and
(W, b) the projection. Because log1p(ReLU(.)) >= 0, zeroing padded positions before the max gives
exactly the vector of the unpadded text.

Two implementations with the same value and gradient:

* :func:`splade_max_pool` (naive) materializes the B × L × V logits and lets autograd differentiate.
* :func:`splade_max_pool_fused` never materializes them. log1p∘ReLU is non-decreasing, so
  ``w_v = log1p(ReLU(max_t ℓ_tv))``: the forward keeps only the per-(text, term) maximum logit and
  its token, one vocabulary block at a time. The gradient of a max reaches only the winning token and
  only where ``max_t ℓ_tv > 0``, so the backward costs O(nnz · H) instead of O(L · V · H).
"""

from __future__ import annotations

from typing import Any

import torch

# Vocabulary rows per block, chosen by measurement on a 2-core AVX-512 CPU (docs/benchmarks.md): within
# ~13 % of the best chunk both on an idle and on an oversubscribed machine (smaller chunks win when idle,
# lose badly under load); the block is 16 MB for 32 × 256 tokens.
DEFAULT_CHUNK_SIZE = 512
# A low-precision screen keeps, per text, the terms whose screened max exceeds −SCREEN_SLACK and
# recomputes those exactly. bf16 logits are off by ~2^-8 of the terms' magnitudes (≲ 0.05 for logits
# of ±10); a term is lost only if the error exceeds the slack, and the band costs little to recompute.
SCREEN_SLACK = 1.0


def splade_max_pool(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Reference (naive) SPLADE pooling: materializes the B × L × V logits. Returns B × V."""
    logits = hidden @ weight.to(hidden.dtype).T
    if bias is not None:
        logits = logits + bias.to(hidden.dtype)
    activations = torch.log1p(torch.relu(logits)) * attention_mask.unsqueeze(-1).to(logits.dtype)
    return activations.amax(dim=1)


def splade_max_pool_fused(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    search_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """SPLADE max pooling ``w_v = log1p(ReLU(max_t (h_t · W_v + b_v)))`` without the B × L × V logits.

    hidden: B × L × H projection inputs; weight: V × H; bias: V or None; attention_mask: B × L
    (0 = padding). Peak extra memory is one ``chunk_size × B·L`` logits block. Returns B × V in
    ``hidden.dtype``; differentiable in hidden, weight and bias (SPLADE v2, arXiv:2109.10086).

    ``search_dtype=torch.bfloat16`` screens every (text, term) pair with a bf16 matmul (≈ 4× the fp32
    GEMM rate on CPUs with AVX512-BF16) and recomputes in ``hidden.dtype``, text by text, only the
    terms whose screened max exceeds ``-SCREEN_SLACK``. Kept terms get their exact max over all tokens
    (and exact winners for the backward); a term is dropped only if its bf16 max is off by more than
    the slack, so it may differ from the fp32 path by dropped terms only (measured in docs/benchmarks.md).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    needs_grad = torch.is_grad_enabled() and any(
        tensor is not None and tensor.requires_grad for tensor in (hidden, weight, bias)
    )
    if needs_grad:
        return _FusedSpladeMaxPool.apply(hidden, weight, bias, attention_mask, chunk_size, search_dtype)
    max_logits, _ = _max_logits(hidden, weight, bias, attention_mask, chunk_size, search_dtype, with_index=False)
    return torch.log1p(torch.relu(max_logits))


class _FusedSpladeMaxPool(torch.autograd.Function):
    """Autograd function behind :func:`splade_max_pool_fused` (saves B × V max logits and winners)."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                attention_mask: torch.Tensor, chunk_size: int, search_dtype: torch.dtype | None) -> torch.Tensor:
        max_logits, winners = _max_logits(hidden, weight, bias, attention_mask, chunk_size, search_dtype, with_index=True)
        ctx.save_for_backward(hidden, weight, attention_mask, max_logits, winners)
        ctx.has_bias = bias is not None
        return torch.log1p(torch.relu(max_logits))

    @staticmethod
    def backward(
        ctx: Any, grad_output: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None, None]:
        hidden, weight, attention_mask, max_logits, winners = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        batch, length, width = hidden.shape
        # d log1p(relu(x))/dx = 1 / (1 + x) for x > 0, else 0 (torch's relu'(0) = 0).
        active = max_logits > 0
        grad_logits = torch.where(active, grad_output / (1 + max_logits.clamp(min=0)), 0).to(hidden.dtype)
        text, term = torch.nonzero(active & (grad_logits != 0), as_tuple=True)
        grad = grad_logits[text, term].unsqueeze(1)
        rows = text * length + winners[text, term]
        flat = hidden.reshape(batch * length, width)
        grad_hidden = grad_weight = grad_bias = None
        if need_hidden:
            grad_hidden = _scatter_to_winners(flat, attention_mask, rows, grad * weight[term].to(hidden.dtype))
            grad_hidden = grad_hidden.view(batch, length, width)
        if need_weight:
            sources = _winner_rows_or_mean(flat, attention_mask, weight, text, term, rows)
            grad_weight = torch.zeros_like(weight).index_add_(0, term, (grad * sources).to(weight.dtype))
        if need_bias and ctx.has_bias:
            grad_bias = grad_logits.sum(0)
        return grad_hidden, grad_weight, grad_bias, None, None, None


def _augmented(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, attention_mask: torch.Tensor,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold bias and padding into one matmul: rows ``[h, 1, 0]`` (token) or ``[0, 0, 1]`` (padding)
    against ``[W, b, pad]``, so a padded token's logit is exactly ``pad``.

    ``pad`` is the lowest finite value of ``dtype``: finite because BLAS computes ``0 · pad`` for every
    real token (0 · inf is NaN), and per dtype because no constant is both below any real logit and
    representable in float16 (max 65,504). Padding thus never wins a max over a text with a real token."""
    batch, length, width = hidden.shape
    keep = attention_mask.reshape(batch * length, 1).bool()
    flat = hidden.reshape(batch * length, width).to(dtype).masked_fill(~keep, 0)
    tokens = torch.cat([flat, keep.to(dtype), (~keep).to(dtype)], dim=1)
    bias_column = (bias.to(dtype) if bias is not None else weight.new_zeros(weight.shape[0], dtype=dtype)).unsqueeze(1)
    pad_column = torch.full_like(bias_column, torch.finfo(dtype).min)
    terms = torch.cat([weight.detach().to(dtype), bias_column.detach(), pad_column], dim=1)
    return tokens, terms


def _block_max(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, attention_mask: torch.Tensor,
               chunk_size: int, dtype: torch.dtype, with_index: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per (text, term): the maximum logit over tokens (B × V, in ``dtype``) and, if asked, its token.

    The vocabulary is processed ``chunk_size`` rows at a time as a (chunk, B, L) block so the max runs
    along the contiguous token axis (torch's max-with-index is ~3× faster there than across strides).
    """
    batch, length, _ = hidden.shape
    tokens, terms = _augmented(hidden.detach(), weight, bias, attention_mask, dtype)
    vocab = terms.shape[0]
    max_logits = torch.empty(batch, vocab, dtype=dtype, device=hidden.device)
    winners = torch.empty(batch, vocab, dtype=torch.long, device=hidden.device) if with_index else None
    for start in range(0, vocab, chunk_size):
        block = (terms[start : start + chunk_size] @ tokens.T).view(-1, batch, length)
        if winners is not None:  # with_index
            values, index = block.max(dim=2)
            winners[:, start : start + chunk_size] = index.T
        else:
            values = block.amax(dim=2)
        max_logits[:, start : start + chunk_size] = values.T
    return max_logits, winners


def _max_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, attention_mask: torch.Tensor,
                chunk_size: int, search_dtype: torch.dtype | None,
                with_index: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per (text, term) max logit (and winner) in ``hidden.dtype``, optionally screened in ``search_dtype``."""
    if search_dtype is None or search_dtype == hidden.dtype:
        return _block_max(hidden, weight, bias, attention_mask, chunk_size, hidden.dtype, with_index)
    screen, _ = _block_max(hidden, weight, bias, attention_mask, chunk_size, search_dtype, with_index=False)
    return _recompute_candidates(hidden, weight, bias, attention_mask, screen > -SCREEN_SLACK, with_index)


def _recompute_candidates(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          attention_mask: torch.Tensor, candidates: torch.Tensor,
                          with_index: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Exact max (and winner) over all tokens for each text's candidate terms; ``-inf`` elsewhere."""
    batch, length, _ = hidden.shape
    tokens, terms = _augmented(hidden.detach(), weight, bias, attention_mask, hidden.dtype)
    max_logits = torch.full(candidates.shape, float("-inf"), dtype=hidden.dtype, device=hidden.device)
    winners = torch.zeros(candidates.shape, dtype=torch.long, device=hidden.device) if with_index else None
    for text in range(batch):
        term = torch.nonzero(candidates[text], as_tuple=True)[0]
        logits = terms[term] @ tokens[text * length : (text + 1) * length].T
        if winners is not None:  # with_index
            max_logits[text, term], winners[text, term] = logits.max(dim=1)
        else:
            max_logits[text, term] = logits.amax(dim=1)
    return max_logits, winners


def _winner_rows_or_mean(flat: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor, text: torch.Tensor,
                         term: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Per active pair, the h that dW_v accumulates: the winner's row, or for an all-zero W_v (e.g. the
    zero padding row of BERT-style tied embeddings) the mean over the text's real tokens, which all
    tie at logit b_v and share the gradient evenly as in autograd's ``amax``."""
    sources = flat[rows]
    zero_terms = ~weight.detach().any(dim=1)
    tied_everywhere = zero_terms[term]
    if tied_everywhere.any():
        keep = attention_mask.reshape(*attention_mask.shape, 1).to(flat.dtype)
        real = flat.view(*attention_mask.shape, -1) * keep
        mean = real.sum(1) / keep.sum(1).clamp(min=1)
        sources = torch.where(tied_everywhere.unsqueeze(1), mean[text], sources)
    return sources


def _scatter_to_winners(flat: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                        contributions: torch.Tensor) -> torch.Tensor:
    """Sum per-pair gradients into their winning rows, shared evenly among identical token rows.

    Autograd's ``amax`` splits a max's gradient evenly between tied maxima. Tokens with bitwise
    identical hidden rows in one text tie on every term, so each receives its group's share; this
    makes the fused gradient equal the naive one on repeated tokens (e.g. without position signal).
    A group is keyed by (text, row id) in int64: a text index stored in a bf16 row would merge texts
    past 256 (and fp16 past 2,048).
    """
    total, width = flat.shape
    keep = attention_mask.reshape(total).bool()
    grad = torch.zeros(total, width, dtype=flat.dtype, device=flat.device)
    if contributions.shape[0] == 0:
        return grad
    length = attention_mask.shape[1]
    real = torch.nonzero(keep, as_tuple=True)[0]
    _, row_id = torch.unique(flat[real].detach() + 0.0, dim=0, return_inverse=True)  # +0.0: -0 == 0
    key = (real // length) * real.shape[0] + row_id
    groups, group_of, group_size = torch.unique(key, return_inverse=True, return_counts=True)
    if groups.shape[0] == real.shape[0]:  # no repeated rows: every gradient goes to its winner
        return grad.index_add_(0, rows, contributions)
    group_of_row = torch.full((total,), -1, dtype=torch.long, device=flat.device)
    group_of_row[real] = group_of
    pair_group = group_of_row[rows]
    shares = torch.zeros(groups.shape[0], width, dtype=flat.dtype, device=flat.device)
    shares.index_add_(0, pair_group, contributions / group_size[pair_group].unsqueeze(1).to(flat.dtype))
    grad[real] = shares[group_of]
    return grad
