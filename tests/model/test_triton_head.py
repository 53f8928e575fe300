"""triton_head.py: the Triton SPLADE head has the fused head's values and gradients (on CPU through Triton's
interpreter, which conftest.py turns on where CUDA is absent)."""

from __future__ import annotations

import pytest
import torch
import triton  # noqa: F401  (a dev dependency: without it these tests must fail, not skip)

from spladekit.model import pooling
from spladekit.model.pooling import splade_max_pool_fused
from spladekit.model.triton_head import BlockSizes, _max_logits, splade_max_pool_triton, triton_unusable

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# 16-wide tiles: the shapes below are no multiples of them, so every loop runs several times and every edge
# mask is used (37 tokens: 3 token tiles; 40 hidden units: 3 hidden tiles; 70 terms: 5 vocabulary tiles)
TILES = BlockSizes(tokens=16, terms=16, hidden=16, pairs=16)
# bias shifts giving every term active, about half of them, a few per text
DENSITIES = {"all": 20.0, "half": -2.6, "few": -6.0}


def make_inputs(batch=4, length=37, width=40, vocab=70, shift=0.0, with_bias=True, seed=0):
    """float32 inputs on the test device: left and right padding, a text of nothing but padding (the last), a
    huge padded token, identical token rows in two token tiles (text 0) and within one tile (text 1), a
    dominant token winning many terms (text 2: several pair chunks at one row) and an all-zero W row (term 0)
    with a positive bias (it ties at b_0 on every real token). ``shift`` moves the bias (the density); without
    bias it is folded into the last hidden unit, so the densities stay (term 0 then has logit 0: inactive)."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, width, generator=generator) / width**0.5
    weight = torch.randn(vocab, width, generator=generator)
    bias = torch.randn(vocab, generator=generator) + shift
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, 0] = 0
    mask[1, length // 2 :] = 0
    mask[-1] = 0
    hidden[0, 2] *= 3
    hidden[0, length - 2] = hidden[0, 2]
    hidden[1, 1] *= 3
    hidden[1, 2] = hidden[1, 1]
    hidden[2, -1] *= 4
    hidden[1, -1] = 1e6
    weight[0] = 0
    bias[0] = 1.0
    if not with_bias:
        hidden[..., -1] = 1.0
        weight[1:, -1] = bias[1:]
        bias = None
    return (
        hidden.to(device),
        weight.to(device),
        None if bias is None else bias.to(device),
        mask.to(device),
    )


def values_and_grads(pool, hidden, weight, bias, mask, grad_output):
    leaves = [tensor.detach().clone().requires_grad_() for tensor in (hidden, weight, bias) if tensor is not None]
    out = pool(*leaves, mask) if bias is not None else pool(*leaves, None, mask)
    return out.detach(), torch.autograd.grad(out, leaves, grad_output)


def triton_pool(*args):
    return splade_max_pool_triton(*args, block_sizes=TILES)


def pairs_per_row_and_term(hidden, weight, bias, mask):
    """The most active (text, term) pairs won by one token row, and won at one term (over texts)."""
    logits = hidden @ weight.T + (0 if bias is None else bias)
    logits = torch.where(mask.bool().unsqueeze(-1), logits, -torch.inf)
    peak, winner = logits.max(dim=1)
    text, term = torch.nonzero(peak > 0, as_tuple=True)
    rows = text * hidden.shape[1] + winner[text, term]
    return int(torch.bincount(rows).max()), int(torch.bincount(term).max())


def logit_size(hidden, weight, bias, mask):
    """B × V: max over real tokens t of Σ_k |h_tk||W_vk| + |b_v|, the scale of a logit's rounding errors."""
    size = torch.where(mask.bool().unsqueeze(-1), hidden.abs() @ weight.abs().T, 0).amax(1)
    return size if bias is None else size + bias.abs()


def assert_same_as_fused(hidden, weight, bias, mask, seed=1):
    grad_output = torch.randn(hidden.shape[0], weight.shape[0], generator=torch.Generator().manual_seed(seed))
    grad_output = grad_output.to(device)
    fused, fused_grads = values_and_grads(splade_max_pool_fused, hidden, weight, bias, mask, grad_output)
    got, grads = values_and_grads(triton_pool, hidden, weight, bias, mask, grad_output)
    assert got.dtype == fused.dtype == torch.float32
    # float32 sums in another order: within 1e-6 relative to the logits' size (as in test_pooling)
    assert ((got - fused).abs() <= 1e-6 * (1 + logit_size(hidden, weight, bias, mask))).all()
    for grad, fused_grad, name in zip(grads, fused_grads, ("hidden", "weight", "bias")):
        torch.testing.assert_close(grad, fused_grad, rtol=1e-5, atol=1e-5, msg=name)
    return fused, grads


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("density", list(DENSITIES))
def test_values_and_gradients_equal_the_fused_path(density, with_bias):
    hidden, weight, bias, mask = make_inputs(shift=DENSITIES[density], with_bias=with_bias)
    fused, grads = assert_same_as_fused(hidden, weight, bias, mask)
    # the case is what it claims: the density, one row winning several chunks of pairs
    active = (fused[:-1] > 0).float().mean(1)
    bounds = {"all": (0.98, 1.0), "half": (0.35, 0.65), "few": (0.01, 0.12)}[density]
    assert ((active >= bounds[0]) & (active <= bounds[1])).all(), active
    if density == "all":
        assert pairs_per_row_and_term(hidden, weight, bias, mask)[0] > TILES.pairs
    # twins share their gradient, padding gets none
    assert grads[0][0, 2].abs().sum() > 0 and torch.equal(grads[0][0, 2], grads[0][0, -2])
    assert torch.equal(grads[0][1, 1], grads[0][1, 2]) and not grads[0][mask == 0].any()


def test_a_term_won_in_many_texts_sums_several_pair_chunks():
    """dW's segments hold one pair per text: more texts than a pair chunk."""
    hidden, weight, bias, mask = make_inputs(batch=40, length=6, width=20, vocab=20, shift=DENSITIES["all"])
    assert pairs_per_row_and_term(hidden, weight, bias, mask)[1] > 2 * TILES.pairs
    assert_same_as_fused(hidden, weight, bias, mask)


def test_the_first_maximal_token_wins_like_torch_max():
    """Winners and max logits equal the fused path's (torch's max: the first maximal token), ties within a token
    tile and across tiles included; padding never wins; a text without real tokens gets -inf."""
    hidden, weight, bias, mask = make_inputs(shift=DENSITIES["all"])
    length = hidden.shape[1]
    peak, winners = _max_logits(hidden, weight, bias, mask, TILES)
    expected_peak, expected_winners = pooling._max_logits(hidden, weight, bias, mask, 64, None, with_index=True)
    torch.testing.assert_close(peak[:-1], expected_peak[:-1], rtol=1e-6, atol=1e-6)
    assert torch.equal(winners[:-1].long(), expected_winners[:-1])
    assert (peak[-1] == -torch.inf).all()
    assert winners[0, 0] == 1 and winners[1, 0] == 0  # W_0 = 0 ties on every real token: the first real one
    assert (winners[0] == 2).sum() > 3 and not (winners[0] == length - 2).any()  # twins in tiles 0 and 2
    assert (winners[1] == 1).sum() > 3 and not (winners[1] == 2).any()  # twins in one tile
    assert (winners[1] < length // 2).all() and (winners[0] > 0).all()


def test_a_text_without_real_tokens_gets_zero_and_no_gradient():
    hidden, weight, bias, mask = make_inputs(shift=DENSITIES["half"])
    grad_output = torch.ones(hidden.shape[0], weight.shape[0], device=device)
    got, (grad_hidden, grad_weight, grad_bias) = values_and_grads(triton_pool, hidden, weight, bias, mask, grad_output)
    assert (got[-1] == 0).all() and (got[0] > 0).any() and not grad_hidden[-1].any()
    assert all(torch.isfinite(tensor).all() for tensor in (got, grad_hidden, grad_weight, grad_bias))
    # a batch of nothing but padding: no active pair reaches the backward kernels
    empty = torch.zeros_like(mask)
    got, grads = values_and_grads(triton_pool, hidden, weight, bias, empty, grad_output)
    assert not got.any() and not any(grad.any() for grad in grads)


def test_nan_hidden_states_give_nan_values():
    hidden, weight, bias, mask = make_inputs(shift=DENSITIES["half"])
    hidden[0, 3, 0] = torch.nan  # a real token: every term of text 0 is NaN
    hidden[1, -2] = torch.nan  # a padded token: must not leak into text 1
    with torch.no_grad():
        got = triton_pool(hidden, weight, bias, mask)
        fused = splade_max_pool_fused(hidden, weight, bias, mask)
    assert got[0].isnan().all() and not got[1:].isnan().any()
    assert torch.equal(got.isnan(), fused.isnan())
    torch.testing.assert_close(got[1:], fused[1:], rtol=0, atol=1e-6)


def test_two_backward_passes_give_bitwise_identical_gradients():
    hidden, weight, bias, mask = make_inputs(shift=DENSITIES["all"])
    grad_output = torch.randn(hidden.shape[0], weight.shape[0], generator=torch.Generator().manual_seed(2))
    first, first_grads = values_and_grads(triton_pool, hidden, weight, bias, mask, grad_output.to(device))
    second, second_grads = values_and_grads(triton_pool, hidden, weight, bias, mask, grad_output.to(device))
    assert torch.equal(first, second)
    assert all(torch.equal(a, b) for a, b in zip(first_grads, second_grads))
    with torch.no_grad():  # the max pass alone gives the same values
        assert torch.equal(triton_pool(hidden, weight, bias, mask), first)


def test_under_bf16_autocast_values_are_within_bf16_rounding_of_float32():
    """bf16 rounds each input with relative error <= u = 2^-8, so a logit moves by at most
    (2u + u²)·Σ_k|h_k||W_vk| + u|b_v|; the max over tokens by at most the largest such move; rounding the max
    logit and log1p's result to bf16 add u·ReLU(ℓ) and u·w; log1p∘ReLU is 1-Lipschitz. With (2 + u)·u·|b_v| in
    place of u·|b_v| and a 10 % margin for the float32 accumulation and log1p's own rounding."""
    hidden, weight, bias, mask = make_inputs(shift=DENSITIES["half"])
    reference = splade_max_pool_fused(hidden, weight, bias, mask)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    with torch.autocast(device.type, dtype=torch.bfloat16):
        got = triton_pool(h, w, bias, mask)
        fused = splade_max_pool_fused(hidden, weight, bias, mask)
    assert got.dtype == fused.dtype and torch.isfinite(got).all()
    # the fused path on the same bf16 inputs: their max logits differ at most by a float32 summation order,
    # then by one bf16 rounding step (2^-7 relative) of the max logit and of w
    torch.testing.assert_close(got.float(), fused.float(), rtol=2**-6, atol=1e-5)
    u = 2.0**-8
    peak = torch.where(mask.bool().unsqueeze(-1), hidden @ weight.T + bias, -torch.inf).amax(1)
    bound = 1.1 * u * ((2 + u) * logit_size(hidden, weight, bias, mask) + peak.clamp(min=0) + reference)
    assert (reference > 0).sum() > 50 and ((got.float() - reference).abs() <= bound).all()
    assert ((got.float() - reference).abs() > 1e-4).any()  # it did run in bf16
    grad_hidden, grad_weight = torch.autograd.grad(got.float().sum(), [h, w])
    assert grad_hidden.dtype == grad_weight.dtype == torch.float32
    assert torch.isfinite(grad_hidden).all() and torch.isfinite(grad_weight).all()
    assert grad_hidden[mask == 1].abs().sum() > 0 and not grad_hidden[mask == 0].any()


def test_triton_unusable_gives_a_one_line_reason(monkeypatch):
    assert triton_unusable(device) is None
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    reason = triton_unusable(torch.device("cpu"))
    assert reason is not None and "\n" not in reason
    assert "CUDA" in reason and "pip install triton" in reason and "cpu" in reason


def test_float64_and_bad_block_sizes_are_refused():
    hidden, weight, bias, mask = make_inputs(batch=4, length=5, width=4, vocab=8)
    with pytest.raises(ValueError, match="float64"):
        splade_max_pool_triton(hidden.double(), weight, bias, mask)
    with pytest.raises(ValueError, match="float64"):
        splade_max_pool_triton(hidden, weight.double(), None, mask)
    for size in (8, 48):
        with pytest.raises(ValueError, match="power of two >= 16"):
            BlockSizes(hidden=size)
