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

``splade_max_pool_fused(..., search_dtype=torch.bfloat16)`` screens the terms with a bf16 matmul and
recomputes the survivors in ``hidden.dtype``. A term survives unless a rounding-error bound
(:func:`screen_candidates`) proves that no token's logit can be positive, so the result has the
non-zero set of the full-precision path: only the screen's speed depends on bf16, never the result.
:func:`splade_max_pool_auto` screens where that is the faster path (:func:`bf16_screen_pays`).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from spladekit.model.bf16_screen import SCREEN_DTYPES, full_precision_reduction, screen_candidates, screen_is_sound
from spladekit.model.ties import mean_rows, share_among_identical_rows

# Vocabulary rows per block (default_chunk_size), chosen by measurement (docs/benchmarks.md, "The head's
# chunk"): a block may hold BLOCK_BYTES_PER_WIDTH bytes of logits per hidden unit. The max pass reads the block
# once while the GEMM spends 2·H FLOP per entry, so a wider H tolerates a larger block (fewer, larger GEMMs
# win at H = 768) while at H = 128 blocks beyond ~16 MB (half this CPU's L3) lose. MIN_CHUNK_SIZE is the
# earlier fixed default: smaller chunks were up to 2.7x slower on an oversubscribed machine.
BLOCK_BYTES_PER_WIDTH = 128 * 1024
MIN_CHUNK_SIZE = 512


def default_chunk_size(hidden_width: int, tokens: int, itemsize: int = 4) -> int:
    """Vocabulary rows per block for H = ``hidden_width`` and B·L = ``tokens`` logits of ``itemsize`` bytes:

        chunk = max(MIN_CHUNK_SIZE, 2^floor(log2(H · BLOCK_BYTES_PER_WIDTH / (B·L · itemsize))))

    i.e. the largest power of two whose chunk × B·L block stays within H × 128 KiB, never below 512.
    fp32 examples: H = 128 with 8 × 256 tokens → 2048 rows (16 MiB), with 32 × 256 → 512;
    H = 768 with 8 × 256 → 8192 rows (64 MiB), with 32 × 256 → 2048 (64 MiB)."""
    rows = hidden_width * BLOCK_BYTES_PER_WIDTH // max(1, tokens * itemsize)
    return max(MIN_CHUNK_SIZE, 1 << max(0, rows.bit_length() - 1))


# pooling "fused-adaptive": a vocabulary block whose active pairs fill at least this fraction of its B × block cells
# runs its backward as two dense GEMMs (splade_max_pool_fused's dense_backward). An estimate, not a measurement:
# on the H200 under bf16 autocast the sparse backward of 128 texts took 37.8 ms with every pair active, and the two
# dense bf16 GEMMs over B·L rows (3 TFLOP) should take ~8 ms at ~400 TFLOP/s, so the dense pass wins above ~1/4
# (benchmarks/head_split_bench.py --heads ...,fused-dense measures it on a GPU). On this CPU dense never wins (3.6-15x
# slower backward, docs/benchmarks.md).
DENSE_BACKWARD_DENSITY = 0.25

# When a text keeps more than this fraction of the vocabulary, recomputing its candidates costs about as
# much as the full-precision block pass, which then runs instead (same result, the slow path).
RECOMPUTE_LIMIT = 0.25


def splade_max_pool(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    position_top_k: int | None = None,
) -> torch.Tensor:
    """Reference (naive) SPLADE pooling: materializes the B × L × V logits. Returns B × V. ``position_top_k``: each
    token keeps only its K largest logits (:func:`keep_position_top_k`) before the max over tokens."""
    logits = hidden @ weight.to(hidden.dtype).T
    if bias is not None:
        logits = logits + bias.to(hidden.dtype)
    if position_top_k is not None:
        logits = keep_position_top_k(logits, position_top_k)
    activations = torch.log1p(torch.relu(logits)) * attention_mask.unsqueeze(-1).to(logits.dtype)
    return activations.amax(dim=1)


def keep_position_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """``logits`` (… × V) with all but each position's ``k`` largest set to 0 (so ``log1p(ReLU(.))`` makes them 0):
    the dense reference of ``position_top_k``. Ties at the k-th place go to the lower vocabulary id (a stable sort);
    the gradient reaches only the kept logits."""
    check_position_top_k(k, logits.shape[-1])
    order = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices[..., :k]
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order, True)
    return logits.masked_fill(~keep, 0)


def check_position_top_k(k: int | None, vocab_size: int) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= vocab_size):
        raise ValueError(f"position_top_k must be an integer in [1, {vocab_size}] or None, got {k!r}")


def splade_max_pool_fused(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    chunk_size: int | None = None,
    search_dtype: torch.dtype | None = None,
    dense_backward: float | None = None,
    position_top_k: int | None = None,
) -> torch.Tensor:
    """SPLADE max pooling ``w_v = log1p(ReLU(max_t (h_t · W_v + b_v)))`` without the B × L × V logits.

    hidden: B × L × H projection inputs; weight: V × H; bias: V or None; attention_mask: B × L
    (0 = padding). Peak extra memory is one ``chunk_size × B·L`` logits block; ``chunk_size=None`` takes
    :func:`default_chunk_size` for the shape (an int overrides it; the result does not depend on it). Returns B × V in
    ``hidden.dtype``; differentiable in hidden, weight and bias (SPLADE v2, arXiv:2109.10086).

    ``search_dtype=torch.bfloat16`` screens every (text, term) pair with a bf16 matmul (≈ 4× the fp32
    GEMM rate on CPUs with AVX512-BF16 and on GPUs; far slower than fp32 on CPUs without it) and
    recomputes in ``hidden.dtype``, over all tokens, the terms :func:`screen_candidates` cannot rule out:
    their max and winners are those of the full-precision path, and every term that path finds non-zero
    is among them. Where the device's bf16 matmul does not meet the bound's error model
    (:func:`screen_is_sound`), the full-precision pass runs instead.

    ``dense_backward``: the backward follows the sparsity per vocabulary block of ``chunk_size`` terms. A block
    whose active (text, term) pairs fill at least this fraction of its B × chunk cells (early training) runs as two
    dense GEMMs in the forward's matmul dtype (bf16 under autocast: tensor cores); sparser blocks run as the sparse
    products (:func:`_logit_products`). ``None`` (default): sparse products everywhere, the choice measured on
    CPUs, where the dense GEMMs' L-fold FLOPs cost more than they save (docs/benchmarks.md). Same gradients either
    way, up to the GEMM dtype's rounding.

    ``position_top_k`` K: each token keeps only its K largest logits before the max over tokens (ties at the K-th
    place to the lower id, as :func:`keep_position_top_k`). Each vocabulary block's per-token top K (K + 1, to see
    a tie at the boundary) is merged into a running top K per token: B·L × K values and ids, never B × L × V; the
    max over tokens and its winner are read from those lists, so the backward is the one above. The screen
    (``search_dtype``) is not used with it (ranking a token's logits needs them exact): the full-precision pass runs.
    """
    check_position_top_k(position_top_k, weight.shape[0])
    if chunk_size is None:
        chunk_size = default_chunk_size(hidden.shape[2], hidden.shape[0] * hidden.shape[1], hidden.element_size())
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if search_dtype is not None and search_dtype != hidden.dtype and search_dtype not in SCREEN_DTYPES:
        raise ValueError(f"search_dtype must be None or one of {SCREEN_DTYPES}, got {search_dtype}")
    if dense_backward is not None and not 0 <= dense_backward <= 1:
        raise ValueError(f"dense_backward must be None or a fraction in [0, 1], got {dense_backward}")
    if needs_grad(hidden, weight, bias):
        dense = None if dense_backward is None else (dense_backward, chunk_size, compute_dtype(hidden))
        return _FusedSpladeMaxPool.apply(
            hidden, weight, bias, attention_mask, chunk_size, search_dtype, dense, position_top_k
        )
    if position_top_k is not None:
        max_logits, _, _ = _top_k_max_logits(hidden, weight, bias, attention_mask, chunk_size, position_top_k)
    else:
        max_logits, _ = _max_logits(hidden, weight, bias, attention_mask, chunk_size, search_dtype, with_index=False)
    return torch.log1p(torch.relu(max_logits))


def splade_max_pool_auto(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    position_top_k: int | None = None,
) -> torch.Tensor:
    """:func:`splade_max_pool_fused`, screened in bf16 (``search_dtype=torch.bfloat16``) where the screen pays
    (:func:`bf16_screen_pays`), else in full precision: the same vectors and gradients either way."""
    positions = hidden.shape[0] * hidden.shape[1]
    search_dtype = torch.bfloat16 if bf16_screen_pays(hidden.device, positions) else None
    return splade_max_pool_fused(
        hidden, weight, bias, attention_mask, search_dtype=search_dtype, position_top_k=position_top_k
    )


SCREEN_MIN_POSITIONS = 64  # below this many (padded) token positions the screen costs more than it saves


def bf16_screen_pays(device: torch.device, positions: int | None = None) -> bool:
    """Whether the bf16 screen is the faster head on ``device`` for a batch of ``positions`` (padded) token positions:
    a CPU with native bf16 matmuls (AVX512-BF16 or AMX), and at least :data:`SCREEN_MIN_POSITIONS` positions (a
    single short query runs faster without it).

    The measurements behind the rule (native bf16 CPUs faster, AVX2-only CPUs and the H200 not; the size threshold)
    are in docs/benchmarks.md, "On a CPU with native bf16"."""
    from spladekit.common.devices import native_bf16  # the one probe of native bf16 (AVX512-BF16, AMX)

    large_enough = positions is None or positions >= SCREEN_MIN_POSITIONS
    return device.type == "cpu" and large_enough and native_bf16(device)


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd will ask for a gradient of any of ``tensors``."""
    return torch.is_grad_enabled() and any(tensor is not None and tensor.requires_grad for tensor in tensors)


def logit_gradient(grad_output: torch.Tensor, max_logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The gradient reaching each (text, term)'s max logit, in ``dtype``: ``grad / (1 + max)`` where ``max > 0``, else
    0 (d log1p(relu(x))/dx; torch's relu'(0) = 0; a NaN max gets 0)."""
    return torch.where(max_logits > 0, grad_output / (1 + max_logits.clamp(min=0)), 0).to(dtype)


class _FusedSpladeMaxPool(torch.autograd.Function):
    """Autograd function behind :func:`splade_max_pool_fused` (saves B × V max logits and winners)."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        attention_mask: torch.Tensor,
        chunk_size: int,
        search_dtype: torch.dtype | None,
        dense_backward: tuple[float, int, torch.dtype] | None,
        position_top_k: int | None = None,
    ) -> torch.Tensor:
        kept_terms = None
        if position_top_k is not None:
            max_logits, winners, kept_terms = _top_k_max_logits(
                hidden, weight, bias, attention_mask, chunk_size, position_top_k
            )
        else:
            found, index = _max_logits(hidden, weight, bias, attention_mask, chunk_size, search_dtype, with_index=True)
            assert index is not None  # for mypy: with_index
            max_logits, winners = found, index
        ctx.save_for_backward(hidden, weight, attention_mask, max_logits, winners)
        ctx.kept_terms = kept_terms
        ctx.has_bias = bias is not None
        ctx.dense_backward = dense_backward
        return torch.log1p(torch.relu(max_logits))

    @staticmethod
    def backward(
        ctx: Any, grad_output: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None, None, None, None, None]:
        hidden, weight, attention_mask, max_logits, winners = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        batch, length, width = hidden.shape
        grad_logits = logit_gradient(grad_output, max_logits, hidden.dtype)
        text, term = torch.nonzero(grad_logits != 0, as_tuple=True)
        grad = grad_logits[text, term]
        rows = text * length + winners[text, term]
        flat = hidden.detach().reshape(batch * length, width)
        grad_hidden = grad_weight = grad_bias = None
        # The gradient of the logits is one value per active pair at (winning token row, term): a sparse
        # B·L × V matrix G, so dH = G·W and dW = Gᵀ·H are two sparse-dense products (no pairs × H
        # temporaries: at initialisation nearly all B × V pairs are active).
        # Sums run in float32 at least: a bf16 accumulator over many texts' pairs loses the gradient's digits.
        wide = torch.promote_types(hidden.dtype, torch.float32)
        grad = grad.to(wide)
        zero_terms = ~weight.detach().any(dim=1)
        tied_everywhere = zero_terms[term]  # W_v = 0: every real token ties at b_v (see mean_rows)
        raw_hidden, raw_weight = _logit_products(
            rows,
            term,
            grad,
            tied_everywhere,
            flat,
            weight.detach(),
            batch,
            ctx.dense_backward,
            (need_hidden, need_weight),
        )
        if raw_hidden is not None:
            grad_hidden = (
                share_among_identical_rows(raw_hidden, flat, attention_mask).to(hidden.dtype).view(batch, length, width)
            )
        if raw_weight is not None:
            grad_weight = raw_weight.to(weight.dtype)
            if tied_everywhere.any() and ctx.kept_terms is not None:
                _add_kept_zero_rows(grad_weight, ctx.kept_terms, zero_terms, grad_logits, flat, attention_mask)
            elif tied_everywhere.any():
                means = mean_rows(flat.to(wide), attention_mask)[text[tied_everywhere]]
                grad_weight.index_add_(
                    0, term[tied_everywhere], (grad[tied_everywhere].unsqueeze(1) * means).to(weight.dtype)
                )
        if need_bias and ctx.has_bias:
            grad_bias = grad_logits.sum(0)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None


def _logit_products(
    rows: torch.Tensor,
    term: torch.Tensor,
    grad: torch.Tensor,
    excluded: torch.Tensor,
    flat: torch.Tensor,
    weight: torch.Tensor,
    texts: int,
    dense: tuple[float, int, torch.dtype] | None,
    needs: tuple[bool, bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``G·W`` (B·L × H) and ``Gᵀ·H`` (V × H), as asked by ``needs``, for the gradient G of the logits: ``grad``
    (float32 at least) at (``rows``, ``term``), one entry per active pair at its winning token row; the pairs in
    ``excluded`` (terms whose W row is zero, see :func:`mean_rows`) are left out of ``Gᵀ·H``.

    With ``dense = (density, block, dtype)``, a vocabulary block of ``block`` terms holding at least
    ``density`` × ``texts`` × block pairs is scattered into a dense B·L × block G and multiplied in ``dtype`` (two
    GEMMs over every token row); the other pairs are two sparse-dense products (COO, coalesced)."""
    need_hidden, need_weight = needs
    wide, total, vocab = grad.dtype, flat.shape[0], weight.shape[0]
    blocks = list(_dense_blocks(term, texts, vocab, dense))
    dense_hidden = None  # the dense blocks' G·W, summed
    dense_weight = []  # each dense block's rows of Gᵀ·H
    if blocks:
        assert dense is not None  # for mypy: blocks come only with dense
        dtype = dense[2]
        flat_c, sparse = flat.to(dtype), torch.ones_like(term, dtype=torch.bool)
        for start, stop, pick in blocks:
            sparse[pick] = False
            g = flat.new_zeros(total, stop - start, dtype=dtype)
            g[rows[pick], term[pick] - start] = grad[pick].to(dtype)
            if need_hidden:
                part = (g @ weight[start:stop].to(dtype)).to(wide)
                dense_hidden = part if dense_hidden is None else dense_hidden.add_(part)
            if need_weight:
                tied = pick[excluded[pick]]
                g[rows[tied], term[tied] - start] = 0
                dense_weight.append((start, (g.T @ flat_c).to(wide)))
        rows, term, grad, excluded = rows[sparse], term[sparse], grad[sparse], excluded[sparse]
    raw_hidden = raw_weight = None
    if need_hidden:
        raw_hidden = torch.sparse.mm(_sparse(rows, term, grad, (total, vocab)), weight.to(wide))
        if dense_hidden is not None:
            raw_hidden += dense_hidden
    if need_weight:
        keep = ~excluded
        raw_weight = torch.sparse.mm(_sparse(term[keep], rows[keep], grad[keep], (vocab, total)), flat.to(wide))
        for start, part in dense_weight:  # those rows hold no sparse pair: set, not added
            raw_weight[start : start + part.shape[0]] = part
    return raw_hidden, raw_weight


def _dense_blocks(
    term: torch.Tensor, texts: int, vocab: int, dense: tuple[float, int, torch.dtype] | None
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """(first term, end, pair indices) of each vocabulary block of ``block`` terms whose pairs fill at least
    ``density`` of its ``texts`` × block cells, for ``dense = (density, block, dtype)``; none when ``dense`` is None."""
    if dense is None or not term.numel():
        return
    density, block, _ = dense
    block_of = term // block
    counts = torch.bincount(block_of, minlength=-(-vocab // block))
    sizes = torch.full_like(counts, block)
    sizes[-1] = vocab - block * (counts.shape[0] - 1)
    for index in torch.nonzero((counts >= density * sizes * texts) & (counts > 0), as_tuple=True)[0].tolist():
        yield index * block, min(vocab, (index + 1) * block), torch.nonzero(block_of == index, as_tuple=True)[0]


def _augmented(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold bias and padding into one matmul: rows ``[h, 1, 0]`` (token) or ``[0, 0, 1]`` (padding)
    against ``[W, b, pad]``, so a padded token's logit is exactly ``pad``.

    ``pad`` is the lowest finite value of ``dtype``: finite because BLAS computes ``0 · pad`` for every
    real token (0 · inf is NaN), and per dtype because no constant is both below any real logit and
    representable in float16 (max 65,504). Padding thus never wins a max over a text with a real token."""
    batch, length, width = hidden.shape
    keep = attention_mask.reshape(batch * length, 1).bool()
    flat = hidden.reshape(batch * length, width).to(dtype).masked_fill(~keep, 0)
    tokens = torch.cat([flat, keep.to(dtype), (~keep).to(dtype)], dim=1)
    return tokens, _terms(weight, bias, dtype)


_TERMS_CACHE: list[tuple[tuple, torch.Tensor]] = []  # at most one entry: the last [W, b, pad] built under reuse
_REUSE = threading.local()  # .on: this thread may reuse it (reusing_projection, keep_reusing_projection)


@contextlib.contextmanager
def reusing_projection() -> Iterator[None]:
    """Within the block, in this thread and without grad, the head keeps its ``[W, b, pad]`` matrix between forward
    passes (:func:`_terms`) instead of copying the vocabulary projection again (94 MB at BERT-base size, more than a
    single query's head matmul costs). The caller promises the weights do not change inside the block: the kept
    matrix is checked against the tensors' identity and version, but a write through ``.data`` bumps no version."""
    previous = getattr(_REUSE, "on", False)
    _REUSE.on = True
    try:
        yield
    finally:
        _REUSE.on = previous
        if not previous:
            _TERMS_CACHE.clear()


def keep_reusing_projection() -> None:
    """:func:`reusing_projection` for the rest of this thread's life: for a thread that only serves a model whose
    weights never change (``spladekit serve``'s encoding thread)."""
    _REUSE.on = True


def _terms(weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """``[W, b, pad]`` (V × (H + 2)) in ``dtype``; under :func:`reusing_projection` without grad, the last one while
    the weight and bias are the same tensors at the same versions."""
    key: tuple | None = None
    tracked = not weight.is_inference() and (bias is None or not bias.is_inference())  # inference tensors: no version
    if tracked and getattr(_REUSE, "on", False) and not torch.is_grad_enabled():  # identity (weak refs) + version
        key = (weakref.ref(weight), weight.data_ptr(), weight._version, dtype)
        key += (None,) if bias is None else (weakref.ref(bias), bias.data_ptr(), bias._version)
        if _TERMS_CACHE and _same(_TERMS_CACHE[0][0], key):
            return _TERMS_CACHE[0][1]
    bias_column = (bias.to(dtype) if bias is not None else weight.new_zeros(weight.shape[0], dtype=dtype)).unsqueeze(1)
    pad_column = torch.full_like(bias_column, torch.finfo(dtype).min)
    terms = torch.cat([weight.detach().to(dtype), bias_column.detach(), pad_column], dim=1)
    if key is not None:
        _TERMS_CACHE[:] = [(key, terms)]
    return terms


def _same(cached: tuple, key: tuple) -> bool:
    """Whether two cache keys name the same live tensors at the same versions (weak references compared by what they
    point to: a dead one never matches)."""
    if len(cached) != len(key):
        return False
    for old, new in zip(cached, key):
        if isinstance(old, weakref.ref):
            if old() is None or old() is not new():
                return False
        elif old != new:
            return False
    return True


def _block_max(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    chunk_size: int,
    dtype: torch.dtype,
    with_index: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
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


def _top_k_max_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    chunk_size: int,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``position_top_k``: per (text, term) the max over tokens of the logits each token kept (its ``k`` largest,
    ties at the k-th place to the lower id; ``-inf`` where no token kept the term), its winning token (the first
    of equal maxima, as torch's ``max``), and each token's kept term ids (B·L × k; ``-1`` on padding)."""
    dtype = compute_dtype(hidden)
    batch, length, _ = hidden.shape
    total = batch * length
    with torch.autocast(hidden.device.type, enabled=False):
        tokens, terms = _augmented(hidden.detach(), weight, bias, attention_mask, dtype)
        vocab = terms.shape[0]
        best_values = tokens.new_empty(total, 0)
        best_ids = torch.empty(total, 0, dtype=torch.long, device=hidden.device)
        for start in range(0, vocab, chunk_size):
            block = tokens @ terms[start : start + chunk_size].T  # B·L × chunk (rows: tokens)
            take = min(k + 1, block.shape[1])
            values, ids = block.topk(take, dim=1)
            if take > k:
                # a tie at the boundary: topk's choice among equals is unspecified, a stable sort's is the lower id
                tied = torch.nonzero(values[:, k - 1] == values[:, k], as_tuple=True)[0]
                values, ids = values[:, :k].clone(), ids[:, :k].clone()
                if tied.numel():
                    exact = torch.sort(block[tied], dim=1, descending=True, stable=True)
                    values[tied], ids[tied] = exact.values[:, :k], exact.indices[:, :k]
            ids = ids + start
            # merge: order the running list (lower ids) and the block's by (value desc, id asc), keep k
            merged_values, merged_ids = torch.cat([best_values, values], 1), torch.cat([best_ids, ids], 1)
            by_id = torch.argsort(merged_ids, dim=1)
            merged_values, merged_ids = merged_values.gather(1, by_id), merged_ids.gather(1, by_id)
            by_value = torch.sort(merged_values, dim=1, descending=True, stable=True).indices[:, :k]
            best_values, best_ids = merged_values.gather(1, by_value), merged_ids.gather(1, by_value)
    real = attention_mask.reshape(total).bool()
    width = best_ids.shape[1]
    rows = torch.arange(total, device=hidden.device).repeat_interleave(width)[real.repeat_interleave(width)]
    terms_kept = best_ids[real].reshape(-1)
    values_kept = best_values[real].reshape(-1)
    cell = (rows // length) * vocab + terms_kept  # (text, term) as one index into B × V
    max_logits = torch.full((batch * vocab,), float("-inf"), dtype=dtype, device=hidden.device)
    max_logits.scatter_reduce_(0, cell, values_kept, reduce="amax")
    winning = values_kept == max_logits[cell]
    winners = torch.full((batch * vocab,), length, dtype=torch.long, device=hidden.device)
    winners.scatter_reduce_(0, cell[winning], (rows % length)[winning], reduce="amin")
    winners = winners.masked_fill_(winners == length, 0)
    kept_terms = best_ids.masked_fill(~real.unsqueeze(1), -1)
    return max_logits.view(batch, vocab), winners.view(batch, vocab), kept_terms


def _add_kept_zero_rows(
    grad_weight: torch.Tensor,
    kept_terms: torch.Tensor,
    zero_terms: torch.Tensor,
    grad_logits: torch.Tensor,
    flat: torch.Tensor,
    attention_mask: torch.Tensor,
) -> None:
    """dW_v for an all-zero W_v under ``position_top_k``: its logit b_v ties at every token that kept v, so (as
    autograd's ``amax`` shares a max among ties) each such token's row receives ``grad(b, v) / count(b, v)``."""
    total, width = kept_terms.shape
    length = attention_mask.shape[1]
    rows = torch.arange(total, device=flat.device).repeat_interleave(width)
    terms = kept_terms.reshape(-1)
    pick = terms >= 0
    pick[pick.clone()] = zero_terms[terms[pick]]
    rows, terms = rows[pick], terms[pick]
    texts = rows // length
    grad = grad_logits[texts, terms]
    active = grad != 0
    rows, terms, texts, grad = rows[active], terms[active], texts[active], grad[active]
    if not rows.numel():
        return
    vocab = grad_logits.shape[1]
    cell = texts * vocab + terms
    _, group, counts = torch.unique(cell, return_inverse=True, return_counts=True)
    share = (grad / counts[group].to(grad.dtype)).unsqueeze(1)
    wide = torch.promote_types(flat.dtype, torch.float32)
    grad_weight.index_add_(0, terms, (share.to(wide) * flat[rows].to(wide)).to(grad_weight.dtype))


def _max_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    chunk_size: int,
    search_dtype: torch.dtype | None,
    with_index: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per (text, term) max logit (and winner) in the compute dtype (:func:`compute_dtype`), optionally
    screened in ``search_dtype``."""
    dtype = compute_dtype(hidden)
    # autocast off inside: it would round the padding column's lowest finite value of ``dtype`` to -inf in
    # its own dtype, and 0 · -inf makes every real token's logit NaN
    with torch.autocast(hidden.device.type, enabled=False):
        if dtype != hidden.dtype:
            return _block_max(hidden, weight, bias, attention_mask, chunk_size, dtype, with_index)
        return _screened_max_logits(hidden, weight, bias, attention_mask, chunk_size, search_dtype, with_index)


def compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The dtype of the head's matmul: the autocast dtype where autocast is on for ``hidden``'s device (as
    the logits' ``Linear`` would run), else ``hidden.dtype``."""
    device_type = hidden.device.type
    if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return hidden.dtype


def _screened_max_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    chunk_size: int,
    search_dtype: torch.dtype | None,
    with_index: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    full_precision = (
        search_dtype is None
        or search_dtype == hidden.dtype
        or not screen_is_sound(hidden.device, search_dtype, hidden.shape[2] + 2)
    )
    if full_precision:
        return _block_max(hidden, weight, bias, attention_mask, chunk_size, hidden.dtype, with_index)
    assert search_dtype is not None  # for mypy: full_precision otherwise
    with full_precision_reduction(hidden.device):
        screen, _ = _block_max(hidden, weight, bias, attention_mask, chunk_size, search_dtype, with_index=False)
    candidates = screen_candidates(screen, hidden, weight, bias, attention_mask, search_dtype)
    if int(candidates.sum(dim=1).max()) > RECOMPUTE_LIMIT * candidates.shape[1]:
        return _block_max(hidden, weight, bias, attention_mask, chunk_size, hidden.dtype, with_index)
    return _recompute_candidates(hidden, weight, bias, attention_mask, candidates, chunk_size, with_index)


def _recompute_candidates(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    candidates: torch.Tensor,
    chunk_size: int,
    with_index: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Max (and winner) over all tokens, in ``hidden.dtype``, of each text's candidate terms; ``-inf``
    elsewhere. Texts are batched: each text's candidates come first in its row of ``order`` (padded with
    its other terms, computed and dropped), ``chunk_size`` of them per batched matmul."""
    batch, length, _ = hidden.shape
    tokens, terms = _augmented(hidden.detach(), weight, bias, attention_mask, hidden.dtype)
    tokens = tokens.view(batch, length, -1).transpose(1, 2)  # B × (H + 2) × L
    max_logits = torch.full(candidates.shape, float("-inf"), dtype=hidden.dtype, device=hidden.device)
    winners = torch.zeros(candidates.shape, dtype=torch.long, device=hidden.device) if with_index else None
    width = int(candidates.sum(dim=1).max()) if batch else 0
    order = torch.argsort(candidates.to(torch.int8), dim=1, descending=True, stable=True)[:, :width]
    texts = torch.arange(batch, device=hidden.device).unsqueeze(1)
    for start in range(0, width, chunk_size):
        term = order[:, start : start + chunk_size]
        logits = torch.bmm(terms[term], tokens)  # B × chunk × L
        keep = candidates.gather(1, term)
        text, kept = texts.expand_as(term)[keep], term[keep]
        if winners is not None:  # with_index
            values, index = logits.max(dim=2)
            winners[text, kept] = index[keep]
        else:
            values = logits.amax(dim=2)
        max_logits[text, kept] = values[keep]
    return max_logits, winners


def _sparse(rows: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """A COO matrix of distinct (row, column) entries, sorted (COO: its product runs on CPU and CUDA, in
    float32 and bf16; CSR's CPU product has no bf16)."""
    matrix = torch.sparse_coo_tensor(torch.stack([rows, columns]), values, shape, check_invariants=False)
    return matrix.coalesce()
