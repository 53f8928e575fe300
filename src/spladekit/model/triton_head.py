"""SPLADE max pooling in Triton kernels: the values and gradients of ``splade_max_pool_fused``.

For every text b and vocabulary term v (Formal et al., "SPLADE v2", arXiv:2109.10086):

    w[b, v] = log1p(ReLU(max_t (h[b, t] · W[v] + bias[v])))      over the tokens t with attention_mask[b, t] != 0

Forward (after Sparton, arXiv 2603.25011): one program per (vocabulary tile, text) loops over token tiles,
accumulates each logits tile ``tl.dot(h, Wᵀ)`` over hidden tiles in float32, adds the bias, sets padding to
-inf and keeps a running max and argmax per term (the first maximal token wins, as in torch's ``max``; a NaN
logit makes the max NaN). The B × L × V logits are never written: only B × V max logits and winners.

Backward: with ``g = grad / (1 + max)`` where ``max > 0`` (else 0), each active pair (b, v) sends ``g · W[v]`` to
its winning token row and ``g · h[winner]`` to ``W[v]``. Both are segmented sums over pairs sorted by
destination (by token row for dH, stable; by term for dW), one program per (destination, hidden tile), summed
in float32 in a fixed order. No atomics: atomic float adds make gradients differ between identical runs
(Sparton's fork with atomics showed a 16-38 % loss spread); these are bitwise reproducible. Ties (identical
token rows, all-zero W rows) are resolved by pooling.py's ``share_among_identical_rows`` and ``mean_rows``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, fields
from typing import Any

import torch

from spladekit.model.pooling import compute_dtype, logit_gradient, needs_grad
from spladekit.model.ties import mean_rows, share_among_identical_rows

with contextlib.suppress(ImportError):  # without triton the module still imports: triton_unusable says why
    import triton.language as tl

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class BlockSizes:
    """Tile sizes: tokens and terms per forward tile, hidden units per tile, pairs per backward chunk.
    Powers of two >= 16 (``tl.dot`` needs 16)."""

    tokens: int = 64
    terms: int = 128
    hidden: int = 64
    pairs: int = 32

    def __post_init__(self) -> None:
        for field in fields(self):
            size = getattr(self, field.name)
            if size < 16 or size & (size - 1):
                raise ValueError(f"block size {field.name} must be a power of two >= 16, got {size}")


def _kernel(fn: Any) -> Any:
    """``triton.jit(fn)``, or ``fn`` itself where triton is missing (then never launched: see triton_unusable)."""
    try:
        import triton
    except ImportError:
        return fn
    return triton.jit(fn)


@_kernel
def _max_kernel(
    hidden,
    weight,
    bias,
    mask,
    max_out,
    winner_out,
    length,
    width,
    vocab,
    stride_hb,
    stride_hl,
    stride_hh,
    stride_wv,
    stride_wh,
    HAS_BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Per (text, term of this vocabulary tile): the max logit over real tokens (float32) and its first token."""
    text = tl.program_id(1).to(tl.int64)
    terms = tl.program_id(0) * BLOCK_V + tl.arange(0, BLOCK_V)
    term_ok = terms < vocab
    best = tl.full([BLOCK_V], float("-inf"), tl.float32)
    winner = tl.zeros([BLOCK_V], tl.int32)
    saw_nan = tl.zeros([BLOCK_V], tl.int32)
    if HAS_BIAS:
        term_bias = tl.load(bias + terms, mask=term_ok, other=0.0).to(tl.float32)
    for first in range(0, length, BLOCK_T):
        tokens = first + tl.arange(0, BLOCK_T)
        token_ok = tokens < length
        logits = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
        for start in range(0, width, BLOCK_K):
            units = start + tl.arange(0, BLOCK_K)
            unit_ok = units < width
            h = tl.load(
                hidden + text * stride_hb + tokens[:, None] * stride_hl + units[None, :] * stride_hh,
                mask=token_ok[:, None] & unit_ok[None, :],
                other=0.0,
            )
            w = tl.load(  # Wᵀ tile (K × V), read by strides
                weight + terms[None, :] * stride_wv + units[:, None] * stride_wh,
                mask=unit_ok[:, None] & term_ok[None, :],
                other=0.0,
            )
            if UPCAST:  # exact: a product of two bf16 numbers fits float32's 24 bits
                logits = tl.dot(h.to(tl.float32), w.to(tl.float32), logits, input_precision="ieee")
            elif IEEE:  # float32: no TF32 rounding
                logits = tl.dot(h, w, logits, input_precision="ieee")
            else:
                logits = tl.dot(h, w, logits)
        if HAS_BIAS:
            logits += term_bias[None, :]
        real = (tl.load(mask + text * length + tokens, mask=token_ok, other=0) != 0)[:, None]
        is_nan = logits != logits
        saw_nan = tl.maximum(saw_nan, tl.max((is_nan & real).to(tl.int32), axis=0))
        # NaN is tracked apart (GPU max reductions drop NaN); padding can never win
        logits = tl.where(real, tl.where(is_nan, float("inf"), logits), float("-inf"))
        tile_best = tl.max(logits, axis=0)
        tile_winner = tl.min(tl.where(logits == tile_best[None, :], tokens[:, None], length), axis=0)
        better = tile_best > best  # strict: an earlier tile keeps its tie
        best = tl.where(better, tile_best, best)
        winner = tl.where(better, tile_winner, winner)
    best = tl.where(saw_nan > 0, float("nan"), best)
    tl.store(max_out + text * vocab + terms, best, mask=term_ok)
    tl.store(winner_out + text * vocab + terms, winner, mask=term_ok)


@_kernel
def _segment_sum_kernel(
    bounds,
    destinations,
    index,
    grad,
    source,
    out,
    width,
    stride_source,
    stride_out,
    BLOCK_P: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Program (s, j): hidden tile j of ``out[destinations[s]] = Σ_p grad[p] · source[index[p]]`` over segment s's
    pairs ``bounds[s] <= p < bounds[s + 1]``, in chunks of BLOCK_P pairs, summed in float32 in a fixed order."""
    segment = tl.program_id(0)
    units = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    unit_ok = units < width
    start = tl.load(bounds + segment)
    end = tl.load(bounds + segment + 1)
    total = tl.zeros([BLOCK_K], tl.float32)
    for first in range(start, end, BLOCK_P):
        pairs = first + tl.arange(0, BLOCK_P)
        pair_ok = pairs < end
        rows = tl.load(index + pairs, mask=pair_ok, other=0)
        g = tl.load(grad + pairs, mask=pair_ok, other=0.0)
        gathered = tl.load(
            source + rows[:, None] * stride_source + units[None, :],
            mask=pair_ok[:, None] & unit_ok[None, :],
            other=0.0,
        )
        total += tl.sum(gathered.to(tl.float32) * g[:, None], axis=0)
    row = tl.load(destinations + segment)
    tl.store(out + row * stride_out + units, total, mask=unit_ok)


def _interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter, whose ``tl.dot`` multiplies bf16 tiles as their raw
    uint16 bits (triton 3.9): bf16 tiles are then widened to float32 first, which gives the same products."""
    return type(_max_kernel).__name__ == "InterpretedFunction"


def triton_unusable(device: torch.device) -> str | None:
    """None when the kernels can run on ``device``, else a one-line reason a user can act on."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return f"pooling 'triton' needs the triton package (pip install triton) and a CUDA device; got {device}"
    if device.type == "cuda":
        return None if torch.cuda.is_available() else "pooling 'triton' needs CUDA, which torch cannot use here"
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        if not _interpreted():
            return "pooling 'triton' on CPU: set TRITON_INTERPRET=1 before spladekit.model.triton_head is imported"
        return None
    return (
        f"pooling 'triton' needs a CUDA device and the triton package (pip install triton); got {device} "
        "(on CPU only Triton's interpreter runs it, TRITON_INTERPRET=1, for tests)"
    )


def splade_max_pool_triton(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    block_sizes: BlockSizes | None = None,
) -> torch.Tensor:
    """SPLADE max pooling ``w = log1p(ReLU(max_t (h_t · W_v + b_v)))`` by Triton kernels: the values and gradients
    of :func:`~spladekit.model.pooling.splade_max_pool_fused`, in its dtype (:func:`compute_dtype`).

    hidden: B × L × H; weight: V × H; bias: V or None; attention_mask: B × L (0 = padding). float32, bfloat16 or
    float16 (float64 is refused: Triton's dot has no fast float64). Returns B × V; differentiable in hidden,
    weight and bias. ``block_sizes`` picks the tiles (for tests and benchmarks; the result does not depend on it
    beyond float32 summation order)."""
    for tensor in (hidden, weight, bias):
        if tensor is not None and tensor.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"pooling 'triton' supports float32, bfloat16 and float16 inputs, got {tensor.dtype}")
    blocks = block_sizes or BlockSizes()
    dtype = compute_dtype(hidden)
    if needs_grad(hidden, weight, bias):
        return _TritonSpladeMaxPool.apply(hidden, weight, bias, attention_mask, dtype, blocks)
    max_logits, _ = _max_logits(*_cast(hidden, weight, bias, dtype), attention_mask, blocks)
    return torch.log1p(torch.relu(max_logits))


class _TritonSpladeMaxPool(torch.autograd.Function):
    """Autograd function behind :func:`splade_max_pool_triton` (saves the inputs in the compute dtype, the B × V
    max logits and the winners)."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        attention_mask: torch.Tensor,
        dtype: torch.dtype,
        blocks: BlockSizes,
    ) -> torch.Tensor:
        hidden_c, weight_c, bias_c = _cast(hidden, weight, bias, dtype)
        max_logits, winners = _max_logits(hidden_c, weight_c, bias_c, attention_mask, blocks)
        ctx.save_for_backward(hidden_c, weight_c, attention_mask, max_logits, winners)
        ctx.dtypes = hidden.dtype, weight.dtype, None if bias is None else bias.dtype
        ctx.blocks = blocks
        return torch.log1p(torch.relu(max_logits))

    @staticmethod
    def backward(
        ctx: Any, grad_output: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None, None]:
        hidden_c, weight_c, attention_mask, max_logits, winners = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        hidden_dtype, weight_dtype, bias_dtype = ctx.dtypes
        batch, length, width = hidden_c.shape
        grad = logit_gradient(grad_output.float(), max_logits.float(), torch.float32)
        flat = hidden_c.reshape(batch * length, width)
        grad_hidden = grad_weight = grad_bias = None
        if need_hidden:
            raw = _hidden_grad(grad, winners, weight_c, length, ctx.blocks)
            grad_hidden = share_among_identical_rows(raw, flat, attention_mask).to(hidden_dtype).view(hidden_c.shape)
        if need_weight:
            grad_weight = _weight_grad(grad, winners, weight_c, flat, attention_mask, ctx.blocks).to(weight_dtype)
        if need_bias and bias_dtype is not None:
            grad_bias = grad.sum(0).to(bias_dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None


def _cast(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The inputs, detached, in the compute dtype (under autocast: its dtype, as the logits' ``Linear`` would)."""
    return (
        hidden.detach().to(dtype),
        weight.detach().to(dtype),
        None if bias is None else bias.detach().to(dtype),
    )


def _on(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Launch on ``device`` (Triton launches on the current CUDA device)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _max_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    blocks: BlockSizes,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per (text, term): the max logit over real tokens, rounded to the inputs' dtype (-inf for a text without a
    real token), and its first winning token (int32)."""
    batch, length, width = hidden.shape
    vocab = weight.shape[0]
    max_logits = torch.empty(batch, vocab, dtype=torch.float32, device=hidden.device)
    winners = torch.zeros(batch, vocab, dtype=torch.int32, device=hidden.device)
    if batch and vocab:
        mask = attention_mask.ne(0).to(device=hidden.device, dtype=torch.int32).contiguous()
        grid = (-(-vocab // blocks.terms), batch)
        with _on(hidden.device):
            _max_kernel[grid](
                hidden,
                weight,
                max_logits if bias is None else bias.contiguous(),
                mask,
                max_logits,
                winners,
                length,
                width,
                vocab,
                *hidden.stride(),
                *weight.stride(),
                HAS_BIAS=bias is not None,
                IEEE=hidden.dtype == torch.float32,
                UPCAST=hidden.dtype == torch.bfloat16 and _interpreted(),
                BLOCK_T=blocks.tokens,
                BLOCK_V=blocks.terms,
                BLOCK_K=blocks.hidden,
            )
    return max_logits.to(hidden.dtype), winners


def _hidden_grad(
    grad: torch.Tensor, winners: torch.Tensor, weight: torch.Tensor, length: int, blocks: BlockSizes
) -> torch.Tensor:
    """dH before tie sharing (B·L × H, float32): each active pair's ``g · W[v]`` summed at its winning token row,
    pairs stably sorted by row (CSR)."""
    text, term = torch.nonzero(grad, as_tuple=True)
    rows = text * length + winners[text, term]
    order = torch.argsort(rows, stable=True)
    out = grad.new_zeros(grad.shape[0] * length, weight.shape[1])
    _segment_sum(rows[order], term[order], grad[text, term][order], weight, out, blocks)
    return out


def _weight_grad(
    grad: torch.Tensor,
    winners: torch.Tensor,
    weight: torch.Tensor,
    flat: torch.Tensor,
    attention_mask: torch.Tensor,
    blocks: BlockSizes,
) -> torch.Tensor:
    """dW (V × H, float32): each active pair's ``g · h[winner]`` summed at its term (CSC: term-major pairs, texts
    ascending). An all-zero W row ties at b_v on every real token: its pairs gather the text's mean real row."""
    length = attention_mask.shape[1]
    term, text = torch.nonzero(grad.T, as_tuple=True)
    values = grad[text, term]
    tied = ~weight.any(dim=1)[term]
    out = grad.new_zeros(weight.shape)
    rows = text * length + winners[text, term]
    _segment_sum(term[~tied], rows[~tied], values[~tied], flat, out, blocks)
    if tied.any():
        means = mean_rows(flat.float(), attention_mask)
        _segment_sum(term[tied], text[tied], values[tied], means, out, blocks)
    return out


def _segment_sum(
    keys: torch.Tensor,
    index: torch.Tensor,
    grad: torch.Tensor,
    source: torch.Tensor,
    out: torch.Tensor,
    blocks: BlockSizes,
) -> None:
    """``out[k] = Σ grad[p] · source[index[p]]`` over the pairs p with ``keys[p] = k``; ``keys`` sorted (grouped)."""
    width = source.shape[1]
    if keys.numel() == 0 or width == 0:
        return
    destinations, counts = torch.unique_consecutive(keys, return_counts=True)
    bounds = torch.zeros(destinations.shape[0] + 1, dtype=torch.int64, device=keys.device)
    bounds[1:] = counts.cumsum(0)
    source = source.contiguous()
    grid = (destinations.shape[0], -(-width // blocks.hidden))
    with _on(source.device):
        _segment_sum_kernel[grid](
            bounds,
            destinations,
            index.contiguous(),
            grad.contiguous(),
            source,
            out,
            width,
            source.stride(0),
            out.stride(0),
            BLOCK_P=blocks.pairs,
            BLOCK_K=blocks.hidden,
        )
