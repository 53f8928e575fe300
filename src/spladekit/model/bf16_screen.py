"""The bf16 screen of the fused SPLADE head: which (text, term) pairs a bf16 matmul proves can have no positive
logit, under a rounding-error bound (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.), and a probe
that the device's bf16 matmul meets that bound's error model. :func:`spladekit.model.pooling.splade_max_pool_fused`
recomputes the surviving pairs in full precision, so the result never depends on bf16."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

# The screen's error model (screen_candidates): bf16 inputs, products accumulated with the unit roundoff of
# float32, one final rounding to bf16. Measured, not assumed: screen_is_sound probes each device once.
SCREEN_DTYPES = (torch.bfloat16,)
ACCUMULATION_UNIT_ROUNDOFF = 2.0**-24
# Relative margin on the whole bound: covers the float32 rounding of computing the bound itself (norms of
# up to 8,192 entries, a few products: < 2^-12 relative), so the computed bound is never below the proven one.
BOUND_SAFETY = 1 + 2.0**-10
# Smallest normal float32 (= bf16) number: flush-to-zero of subnormal inputs, products or sums (AVX512-BF16's
# VDPBF16PS flushes them) costs at most this much per operation.
SMALLEST_NORMAL = 2.0**-126


def gamma(n: int, unit_roundoff: float) -> float:
    """Higham's γ_n = n·u / (1 − n·u) (Lemma 3.1): the relative error of n rounded operations."""
    if n * unit_roundoff >= 1:
        return math.inf
    return n * unit_roundoff / (1 - n * unit_roundoff)


def screen_candidates(
    screen: torch.Tensor,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    search_dtype: torch.dtype,
) -> torch.Tensor:
    """B × V booleans: the (text, term) pairs whose max logit may be positive, given ``screen``, the max
    over tokens of the logits computed in ``search_dtype``. Every pair that the ``hidden.dtype`` path
    finds positive is kept (proof below); NaN screens are kept, so a broken model's NaN still shows.

    Error model (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., §2.2 and §3.1). A
    logit is ℓ = Σ_i x_i y_i over n = H + 2 entries, x = [h_t, 1, 0], y = [W_v, b_v, pad] (see
    ``_augmented``), with s = Σ_i |x_i y_i| ≤ ‖h_t‖·‖W_v‖ + |b_v| (Cauchy–Schwarz). The screen computes
    ℓ̃ = rd_s(fl_acc(Σ_i x̂_i ŷ_i)) where x̂ = rd_s(x), ŷ = rd_s(y) are rounded to ``search_dtype``
    (unit roundoff u_s = 2^-8 for bf16), fl_acc accumulates with unit roundoff u_a = 2^-24 (float32,
    the products of bf16 numbers are exact in it; any summation order) and rd_s rounds the result:

    * inputs: x̂_i ŷ_i = x_i y_i (1 + δ), |δ| ≤ 2u_s + u_s²;
    * accumulation (Higham eq. 3.5): |fl_acc(Σ x̂ŷ) − Σ x̂ŷ| ≤ γ_n(u_a) Σ|x̂_i ŷ_i| ≤ γ_n(u_a)(1 + u_s)² s;
    * output (Higham eq. 2.5): rd_s(z) = z / (1 + δ), |δ| ≤ u_s, so |ℓ̃ − z| ≤ u_s |ℓ̃|.

    Hence ℓ ≤ ℓ̃ + u_s|ℓ̃| + (2u_s + u_s² + γ_n(u_a)(1 + u_s)²)·s + μ, where μ = 2^-126·(√n·(‖x‖ + ‖y‖)
    + n + 2) bounds flushing subnormal inputs, products and sums to zero (‖x‖_1 ≤ √n‖x‖). The
    full-precision path rounds its own sum: its logit ℓ̂ ≤ ℓ + γ_n(u_r)·s (u_r: unit roundoff of
    ``hidden.dtype``), so ℓ̂ > 0 implies ℓ̃ + u_s|ℓ̃| + c·s + μ > 0 with c = 2u_s + u_s² +
    γ_n(u_a)(1 + u_s)² + γ_n(u_r). The test is applied per text with N = max_t ‖h_t‖ over its real
    tokens (s ≤ N·‖W_v‖ + |b_v| for every token; z ↦ z + u_s|z| is increasing, so the max over tokens
    of the screened logits suffices), times ``BOUND_SAFETY`` for the rounding of the bound itself.
    For splade-tiny (H = 128) c ≈ 0.0078: a term is screened out when its bf16 max is below about
    −0.8 % of N·‖W_v‖ + |b_v|.
    """
    n = hidden.shape[2] + 2
    u_s = torch.finfo(search_dtype).eps / 2
    c = (
        2 * u_s
        + u_s**2
        + gamma(n, ACCUMULATION_UNIT_ROUNDOFF) * (1 + u_s) ** 2
        + gamma(n, torch.finfo(hidden.dtype).eps / 2)
    )
    token_norms = torch.linalg.vector_norm(hidden.detach().float(), dim=2).masked_fill(attention_mask == 0, 0)
    text_norm = token_norms.amax(dim=1, keepdim=True)  # B × 1
    weight_norm = torch.linalg.vector_norm(weight.detach().float(), dim=1)  # V
    bias_size = bias.detach().float().abs() if bias is not None else torch.zeros_like(weight_norm)
    size = text_norm * weight_norm + bias_size
    flushed = SMALLEST_NORMAL * (math.sqrt(n) * (text_norm + 1 + weight_norm + bias_size) + n + 2)
    bound = BOUND_SAFETY * (c * size + flushed)
    screened = screen.float()
    # ℓ̃ + u_s|ℓ̃| + bound > 0, as comparisons of non-negative numbers (a sum could round across zero).
    return (screened >= 0) | (bound > screened.abs() * (1 - u_s)) | screened.isnan()


# A probe's verdict per (device type, device index, search dtype, width): the probe runs once.
_SOUND_SCREENS: dict[tuple[str, int | None, torch.dtype, int], bool] = {}


def screen_is_sound(
    device: torch.device,
    search_dtype: torch.dtype,
    width: int,
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = torch.matmul,
) -> bool:
    """Whether ``search_dtype`` matmuls of ``width`` entries on ``device`` meet :func:`screen_candidates`'
    error model: on a random 256 × 64 product of inputs already in ``search_dtype`` (so only accumulation
    and output rounding remain), every entry within u_s|ℓ̃| + γ_n(2^-24)·s of the exact (float64) value.
    A bf16 accumulator misses this by orders of magnitude on the entries with cancellation. Measured here
    on torch 2.13's CPU (oneDNN) matmul: float32 accumulation, error ≤ 0.2 % of the allowance beyond the
    output rounding. Cached per device; ``product`` is for tests."""
    key = (device.type, device.index, search_dtype, width)
    if product is torch.matmul and key in _SOUND_SCREENS:
        return _SOUND_SCREENS[key]
    generator = torch.Generator().manual_seed(0)
    left = torch.randn(256, width, generator=generator).to(search_dtype)
    right = torch.randn(64, width, generator=generator).to(search_dtype)
    with full_precision_reduction(device):
        screened = product(left.to(device), right.to(device).T).cpu().double()
    exact = left.double() @ right.double().T
    size = left.double().abs() @ right.double().abs().T
    u_s = torch.finfo(search_dtype).eps / 2
    allowed = u_s * screened.abs() + (gamma(width, ACCUMULATION_UNIT_ROUNDOFF) + gamma(width, 2.0**-53)) * size
    sound = bool(((screened - exact).abs() <= BOUND_SAFETY * allowed + SMALLEST_NORMAL * (width + 2)).all())
    if product is torch.matmul:
        _SOUND_SCREENS[key] = sound
    return sound


@contextmanager
def full_precision_reduction(device: torch.device) -> Iterator[None]:
    """On CUDA, forbid cuBLAS's reduced-precision (bf16/fp16) split-K reductions while screening: the
    bound assumes float32 accumulation (torch allows them by default for bf16 and fp16 GEMMs)."""
    if device.type != "cuda":
        yield
        return
    flags = torch.backends.cuda.matmul
    saved = flags.allow_bf16_reduced_precision_reduction, flags.allow_fp16_reduced_precision_reduction
    flags.allow_bf16_reduced_precision_reduction = flags.allow_fp16_reduced_precision_reduction = False
    try:
        yield
    finally:
        flags.allow_bf16_reduced_precision_reduction, flags.allow_fp16_reduced_precision_reduction = saved
