"""pooling.py: the fused SPLADE head has the naive head's values and gradients, without B × L × V logits."""

from __future__ import annotations

import json
import math
from unittest.mock import patch

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_path
from spladekit import SparseEncoder
from spladekit.common.errors import SpladekitError
from spladekit.model import pooling as pooling_module
from spladekit.model.bf16_screen import ACCUMULATION_UNIT_ROUNDOFF, screen_candidates, screen_is_sound
from spladekit.model.pooling import (
    BLOCK_BYTES_PER_WIDTH,
    MIN_CHUNK_SIZE,
    _augmented,
    bf16_screen_pays,
    default_chunk_size,
    splade_max_pool,
    splade_max_pool_auto,
    splade_max_pool_fused,
)
from tiny_models import SAMPLE_TEXTS as TEXTS


def random_inputs(batch=3, length=6, width=4, vocab=23, seed=0, dtype=torch.float64, zero_row=True):
    """Inputs with left and right padding, an all-padding text, a repeated token row (a tie on every
    term) and, if ``zero_row``, an all-zero W row (every token ties on that term)."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, width, generator=generator, dtype=dtype)
    weight = torch.randn(vocab, width, generator=generator, dtype=dtype)
    bias = torch.randn(vocab, generator=generator, dtype=dtype)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, 0] = 0  # left padding
    mask[1, length // 2 :] = 0  # right padding
    mask[-1] = 0  # nothing but padding: must give the zero vector
    hidden[0, 2] = hidden[0, 4]  # two identical tokens tie on every term
    hidden[1, -1] = 1e6  # a huge padded token must never win
    if zero_row:  # like BERT's padding embedding in a tied head
        weight[0] = 0
        bias[0] = abs(bias[0]) + 0.5
    return hidden, weight, bias, mask


def naive_and_fused_grads(hidden, weight, bias, mask, chunk_size, grad_output):
    results = []
    for pool in (splade_max_pool, lambda *args: splade_max_pool_fused(*args, chunk_size=chunk_size)):
        leaves = [tensor.detach().clone().requires_grad_() for tensor in (hidden, weight, bias) if tensor is not None]
        h, w, b = leaves if bias is not None else (*leaves, None)
        out = pool(h, w, b, mask)
        results.append((out.detach(), torch.autograd.grad(out, leaves, grad_output)))
    return results


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 5, 64])
def test_gradcheck_float64_with_ties_and_padding(with_bias, chunk_size):
    # No zero W row here: perturbing it breaks its all-token tie, so finite differences see a kink.
    hidden, weight, bias, mask = random_inputs(batch=3, length=5, width=3, vocab=7, zero_row=False)
    hidden[1, -1] = 0.0  # keep gradcheck's finite differences away from the huge value
    inputs = [hidden.requires_grad_(), weight.requires_grad_()] + ([bias.requires_grad_()] if with_bias else [])

    def pool(h, w, *b):
        return splade_max_pool_fused(h, w, b[0] if b else None, mask, chunk_size=chunk_size)

    assert torch.autograd.gradcheck(pool, inputs, eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("with_bias", [True, False])
def test_values_and_gradients_equal_the_naive_path(with_bias):
    hidden, weight, bias, mask = random_inputs(batch=4, length=9, width=5, vocab=41)
    bias = bias if with_bias else None
    grad_output = torch.randn(4, 41, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (naive, naive_grads), (fused, fused_grads) = naive_and_fused_grads(hidden, weight, bias, mask, 8, grad_output)
    torch.testing.assert_close(fused, naive, rtol=0, atol=1e-12)
    assert (naive > 0).sum() > 20 and (naive[-1] == 0).all()  # the case is not trivial
    for fused_grad, naive_grad in zip(fused_grads, naive_grads):
        torch.testing.assert_close(fused_grad, naive_grad, rtol=0, atol=1e-12)
    # The repeated token shares the gradient with its twin, as autograd's amax does.
    assert fused_grads[0][0, 2].abs().sum() > 0 and torch.equal(fused_grads[0][0, 2], fused_grads[0][0, 4])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_backward_when_every_term_is_active_equals_the_naive_gradient(dtype):
    # at initialisation nearly all B × V pairs are active: the sparse products then hold a dense gradient,
    # ties, a zero W row and padding included
    hidden, weight, bias, mask = random_inputs(batch=4, length=9, width=5, vocab=41, dtype=dtype)
    bias = bias.abs() + 20  # every term of every text with a real token is active
    grad_output = torch.randn(4, 41, dtype=dtype, generator=torch.Generator().manual_seed(1))
    (naive, naive_grads), (fused, fused_grads) = naive_and_fused_grads(hidden, weight, bias, mask, 8, grad_output)
    assert (naive > 0).sum() == 3 * 41  # the fourth text is all padding
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    for fused_grad, naive_grad in zip(fused_grads, naive_grads):
        torch.testing.assert_close(fused_grad, naive_grad, rtol=tolerance, atol=tolerance)
    assert torch.equal(fused_grads[0][0, 2], fused_grads[0][0, 4])  # twins share


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 8),
    vocab=st.integers(1, 30),
    chunk_size=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_property_fused_equals_naive_on_random_shapes(batch, length, vocab, chunk_size, seed):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, 3, generator=generator, dtype=torch.float64)
    weight = torch.randn(vocab, 3, generator=generator, dtype=torch.float64)
    bias = torch.randn(vocab, generator=generator, dtype=torch.float64)
    mask = (torch.rand(batch, length, generator=generator) > 0.3).long()
    grad_output = torch.randn(batch, vocab, generator=generator, dtype=torch.float64)
    (naive, naive_grads), (fused, fused_grads) = naive_and_fused_grads(
        hidden, weight, bias, mask, chunk_size, grad_output
    )
    torch.testing.assert_close(fused, naive, rtol=0, atol=1e-12)
    for fused_grad, naive_grad in zip(fused_grads, naive_grads):
        torch.testing.assert_close(fused_grad, naive_grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shift", [20.0, -2.0, -6.0])  # every term active (3 texts of 4), 54-75 %, 0-16 % per block
@pytest.mark.parametrize("dense_backward", [0.0, 0.6, 1.0])
def test_dense_backward_blocks_give_the_naive_gradient(dense_backward, shift, dtype, monkeypatch):
    hidden, weight, bias, mask = random_inputs(batch=4, length=9, width=5, vocab=41, dtype=dtype)
    bias = bias + shift
    bias[0] = 0.5  # the zero W row stays active: every real token ties on it
    grad_output = torch.randn(4, 41, dtype=dtype, generator=torch.Generator().manual_seed(1))
    sparse_pairs = []
    real_sparse = pooling_module._sparse
    monkeypatch.setattr(
        pooling_module, "_sparse", lambda rows, *rest: sparse_pairs.append(rows.numel()) or real_sparse(rows, *rest)
    )
    results = []
    for pool in (
        splade_max_pool,
        lambda *args: splade_max_pool_fused(*args, chunk_size=8, dense_backward=dense_backward),
    ):
        leaves = [tensor.detach().clone().requires_grad_() for tensor in (hidden, weight, bias)]
        out = pool(*leaves, mask)
        results.append((out.detach(), torch.autograd.grad(out, leaves, grad_output)))
    (naive, naive_grads), (fused, fused_grads) = results
    active = int((naive > 0).sum())
    assert active > 0 and (naive[-1] == 0).all()
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    for fused_grad, naive_grad in zip(fused_grads, naive_grads):
        torch.testing.assert_close(fused_grad, naive_grad, rtol=tolerance, atol=tolerance)
    assert torch.equal(fused_grads[0][0, 2], fused_grads[0][0, 4])  # twins share
    # which path ran: density 0 sends every pair through the dense GEMMs; 1 none (the all-padding text keeps
    # every block below B × block pairs)
    if dense_backward == 0.0:
        assert sparse_pairs == [0, 0]
    elif dense_backward == 1.0:
        assert sum(sparse_pairs) == 2 * active - (naive[:, 0] > 0).sum()  # the zero row's pairs: G·W only
    if dense_backward == 0.6 and shift == -2.0:
        assert 0 < sum(sparse_pairs) < 2 * active  # both paths ran


def test_dense_backward_outside_zero_to_one_is_refused():
    hidden, weight, bias, mask = random_inputs()
    with pytest.raises(ValueError, match="dense_backward"):
        splade_max_pool_fused(hidden.requires_grad_(), weight, bias, mask, dense_backward=1.5)


def test_frozen_weight_and_constant_hidden_get_no_gradient():
    hidden, weight, bias, mask = random_inputs()
    weight.requires_grad_()
    out = splade_max_pool_fused(hidden, weight, bias, mask, chunk_size=4)  # only W trainable
    (grad_weight,) = torch.autograd.grad(out.sum(), [weight])
    expected = torch.autograd.grad(splade_max_pool(hidden, weight, bias, mask).sum(), [weight])[0]
    torch.testing.assert_close(grad_weight, expected)
    hidden.requires_grad_()
    weight.requires_grad_(False)
    (grad_hidden,) = torch.autograd.grad(splade_max_pool_fused(hidden, weight, None, mask).sum(), [hidden])
    torch.testing.assert_close(
        grad_hidden, torch.autograd.grad(splade_max_pool(hidden, weight, None, mask).sum(), [hidden])[0]
    )


def test_padding_never_changes_a_text_vector():
    hidden, weight, bias, _ = random_inputs(batch=2, length=5, vocab=50, dtype=torch.float32)
    hidden = hidden[:1]
    alone = splade_max_pool_fused(hidden, weight, bias, torch.ones(1, 5, dtype=torch.long))
    for left in (False, True):
        garbage = torch.full((1, 4, hidden.shape[2]), 1e6)  # padded states that would win every term
        padded = torch.cat([garbage, hidden] if left else [hidden, garbage], dim=1)
        mask = torch.ones(1, 9, dtype=torch.long)
        mask[0, slice(0, 4) if left else slice(5, 9)] = 0
        torch.testing.assert_close(splade_max_pool_fused(padded, weight, bias, mask, chunk_size=7), alone)


def test_bf16_screen_gives_exact_values_and_gradients():
    hidden, weight, bias, mask = random_inputs(batch=4, length=16, width=32, vocab=300, dtype=torch.float32)
    hidden[1, -1] = 0.0
    grad_output = torch.randn(4, 300, generator=torch.Generator().manual_seed(2))
    results = []
    for pool in (
        splade_max_pool,
        lambda *args: splade_max_pool_fused(*args, chunk_size=64, search_dtype=torch.bfloat16),
    ):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        out = pool(h, w, bias, mask)
        results.append((out.detach(), torch.autograd.grad(out, [h, w], grad_output)))
    (naive, naive_grads), (screened, screened_grads) = results
    assert (naive > 0).sum() > 100
    torch.testing.assert_close(screened, naive, rtol=0, atol=1e-5)
    assert torch.equal(screened > 0, naive > 0)
    for screened_grad, naive_grad in zip(screened_grads, naive_grads):
        torch.testing.assert_close(screened_grad, naive_grad, rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        torch.testing.assert_close(
            splade_max_pool_fused(hidden, weight, bias, mask, search_dtype=torch.bfloat16), naive, rtol=0, atol=1e-5
        )


def record_screens(monkeypatch) -> list:
    """The ``search_dtype`` of every call auto makes to the fused head, in order (the calls still run)."""
    screens: list = []
    fused = pooling_module.splade_max_pool_fused
    monkeypatch.setattr(
        pooling_module,
        "splade_max_pool_fused",
        lambda *args, search_dtype=None, **options: (
            screens.append(search_dtype) or fused(*args, search_dtype=search_dtype, **options)
        ),
    )
    return screens


@pytest.mark.parametrize("pays", [False, True])
def test_auto_screens_in_bf16_exactly_where_the_screen_pays(pays, monkeypatch):
    """auto is fused, screened in bf16 where bf16_screen_pays says so: the same values and gradients either way."""
    monkeypatch.setattr(pooling_module, "bf16_screen_pays", lambda device, positions: pays)
    fused = pooling_module.splade_max_pool_fused
    screens = record_screens(monkeypatch)
    hidden, weight, bias, mask = random_inputs(batch=4, length=16, width=32, vocab=300, dtype=torch.float32)
    grad_output = torch.randn(4, 300, generator=torch.Generator().manual_seed(2))
    results = []
    for pool in (fused, splade_max_pool_auto):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        out = pool(h, w, bias, mask)
        results.append((out.detach(), torch.autograd.grad(out, [h, w], grad_output)))
    assert screens == [torch.bfloat16 if pays else None]
    (reference, reference_grads), (auto, auto_grads) = results
    assert (reference > 0).sum() > 100 and torch.equal(auto > 0, reference > 0)
    torch.testing.assert_close(auto, reference, rtol=0, atol=1e-5)
    for auto_grad, reference_grad in zip(auto_grads, reference_grads):
        torch.testing.assert_close(auto_grad, reference_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("device", "avx512_bf16", "amx", "pays"),
    [
        ("cpu", False, False, False),  # AVX2 or AVX-512 without bf16: the screen measured 0.26x there
        ("cpu", True, False, True),
        ("cpu", False, True, True),
        ("cuda", True, True, False),  # measured 0.95-0.96x on an H200
    ],
)
def test_the_bf16_screen_pays_on_cpus_with_native_bf16_only(device, avx512_bf16, amx, pays, monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert bf16_screen_pays(torch.device(device)) is pays


def test_the_bf16_screen_is_skipped_for_a_few_token_positions(monkeypatch):
    """A single short query (fewer positions than SCREEN_MIN_POSITIONS) runs the fp32 head even on a native-bf16
    CPU: the screen's fixed cost is larger than what it saves there."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    limit = pooling_module.SCREEN_MIN_POSITIONS
    assert not bf16_screen_pays(torch.device("cpu"), limit - 1)
    assert bf16_screen_pays(torch.device("cpu"), limit)
    screens = record_screens(monkeypatch)
    for batch, length in ((2, limit // 2 - 1), (2, limit // 2)):
        hidden, weight, bias, mask = random_inputs(batch=batch, length=length, width=32, vocab=300, dtype=torch.float32)
        splade_max_pool_auto(hidden, weight, bias, mask)
    assert screens == [None, torch.bfloat16]


def fp32_naive_reference(hidden, weight, bias, mask, grad_output):
    """Values and gradients (hidden, weight) of the naive path in float32 on the same (rounded) inputs."""
    h, w = hidden.float().requires_grad_(), weight.float().requires_grad_()
    out = splade_max_pool(h, w, bias.float(), mask)
    return out.detach(), torch.autograd.grad(out, [h, w], grad_output.float())


def clear_winner_inputs(batch=4, length=9, width=8, vocab=60, seed=0):
    """Inputs whose winners lead by > 1 logit, so half-precision rounding cannot change them: token j < width
    of a text points along axis perm[j], term v along axis v mod width, and only aligned pairs get positive
    logits. Left and right padding, an all-padding text and a huge padded token, as in random_inputs."""
    generator = torch.Generator().manual_seed(seed)
    axes = torch.eye(width)
    hidden = 0.05 * torch.randn(batch, length, width, generator=generator)
    for text in range(batch):
        hidden[text, :width] += 2 * axes[torch.randperm(width, generator=generator)]
    weight = (1 + torch.rand(vocab, 1, generator=generator)) * axes[torch.arange(vocab) % width]
    weight += 0.05 * torch.randn(vocab, width, generator=generator)
    bias = -torch.ones(vocab)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, 0] = 0
    mask[1, length // 2 :] = 0
    mask[-1] = 0
    hidden[1, -1] = 30.0  # padded, would win every term, still finite in fp16
    return hidden, weight, bias, mask


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("search_dtype", [None, torch.bfloat16])
def test_half_precision_inputs_match_the_fp32_reference_without_nan(dtype, search_dtype):
    """The padding sentinel must be finite in the matmul's dtype: fp16 tops out at 65,504."""
    hidden, weight, bias, mask = (
        tensor.to(dtype) if tensor.is_floating_point() else tensor for tensor in clear_winner_inputs()
    )
    grad_output = torch.randn(4, 60, generator=torch.Generator().manual_seed(3)).to(dtype)
    reference, reference_grads = fp32_naive_reference(hidden, weight, bias, mask, grad_output)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    fused = splade_max_pool_fused(h, w, bias, mask, chunk_size=16, search_dtype=search_dtype)
    grads = torch.autograd.grad(fused, [h, w], grad_output)
    assert fused.dtype == dtype and (reference > 0).sum() > 100 and (fused[-1] == 0).all()
    torch.testing.assert_close(fused.float(), reference, rtol=1e-2, atol=1e-2)
    for grad, reference_grad in zip(grads, reference_grads):
        assert torch.isfinite(grad).all()
        torch.testing.assert_close(grad.float(), reference_grad, rtol=1e-2, atol=1e-2)


def test_bf16_winner_routing_beyond_256_texts_and_tokens():
    """bf16 counts integers exactly only up to 256, so text and token indices must stay integers. Each
    text's winner of every term sits past token 256; texts 256 and 257 (257 rounds to 256 in bf16) share
    that winning row but get different output gradients, which must not mix."""
    batch, length, width, vocab = 260, 300, 6, 12
    generator = torch.Generator().manual_seed(4)
    direction = torch.ones(width)
    hidden = 0.1 * torch.randn(batch, length, width, generator=generator)
    weight = torch.randn(vocab, width, generator=generator) / 4 + direction
    position = 257 + torch.arange(batch) % 40
    hidden[torch.arange(batch), position] = 2 * direction + torch.randn(batch, width, generator=generator) / 4
    hidden[257, position[257]] = hidden[256, position[256]]
    hidden, weight = hidden.to(torch.bfloat16), weight.to(torch.bfloat16)
    bias = torch.zeros(vocab, dtype=torch.bfloat16)
    mask = torch.ones(batch, length, dtype=torch.long)
    grad_output = torch.randn(batch, vocab, generator=generator).to(torch.bfloat16)
    winners = (hidden.float() @ weight.float().T).argmax(dim=1)
    assert torch.equal(winners, position.unsqueeze(1).expand(batch, vocab))
    reference, (reference_grad_hidden, reference_grad_weight) = fp32_naive_reference(
        hidden, weight, bias, mask, grad_output
    )
    for search_dtype in (None, torch.bfloat16):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        fused = splade_max_pool_fused(h, w, bias, mask, chunk_size=5, search_dtype=search_dtype)
        grad_hidden, grad_weight = torch.autograd.grad(fused, [h, w], grad_output)
        torch.testing.assert_close(fused.float(), reference, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(grad_hidden.float(), reference_grad_hidden, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(grad_weight.float(), reference_grad_weight, rtol=1e-2, atol=1e-1)


def test_the_triton_head_where_it_cannot_run_is_refused_at_load_in_one_line(tiny_model_dirs, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # this CPU, without Triton's interpreter
    with pytest.raises(SpladekitError, match=r"^pooling 'triton' needs a CUDA device[^\n]*got cpu[^\n]*$"):
        SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling="triton", device="cpu")


def test_unknown_pooling_and_bad_chunk_size_are_refused(tiny_model_dirs):
    with pytest.raises(SpladekitError, match="unknown pooling"):
        SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling="mean")
    hidden, weight, bias, mask = random_inputs()
    with pytest.raises(ValueError, match="chunk_size"):
        splade_max_pool_fused(hidden, weight, bias, mask, chunk_size=0)


@pytest.mark.parametrize(
    ("width", "tokens", "expected"),
    [
        (128, 8 * 256, 2048),
        (128, 32 * 256, 512),
        (768, 8 * 256, 8192),
        (768, 32 * 256, 2048),
        (128, 128 * 512, 512),
        (32, 1, 2**20),
    ],
)
def test_default_chunk_size_examples(width, tokens, expected):
    assert default_chunk_size(width, tokens) == expected


@given(width=st.integers(1, 4096), tokens=st.integers(1, 2**20), itemsize=st.sampled_from([2, 4, 8]))
def test_default_chunk_size_is_the_largest_power_of_two_block_within_the_budget(width, tokens, itemsize):
    chunk = default_chunk_size(width, tokens, itemsize)
    budget = width * BLOCK_BYTES_PER_WIDTH
    assert chunk & (chunk - 1) == 0 and chunk >= MIN_CHUNK_SIZE
    assert chunk == MIN_CHUNK_SIZE or chunk * tokens * itemsize <= budget
    assert 2 * chunk * tokens * itemsize > budget


def test_default_chunk_gives_the_vectors_and_gradients_of_chunk_512():
    hidden, weight, bias, mask = random_inputs(batch=3, length=6, width=32, vocab=2000, dtype=torch.float32)
    assert default_chunk_size(32, 3 * 6) > 2000  # the default runs one block where 512 runs four
    grad_output = torch.rand(3, 2000, generator=torch.Generator().manual_seed(1))
    results = []
    for chunk_size in (None, 512):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        out = splade_max_pool_fused(h, w, bias, mask, chunk_size=chunk_size)
        results.append((out, *torch.autograd.grad(out, [h, w], grad_output)))
    for default, fixed in zip(*results, strict=True):
        torch.testing.assert_close(default, fixed, rtol=0, atol=1e-6)
    assert (results[0][0] > 0).equal(results[1][0] > 0)


def test_the_default_chunk_comes_from_default_chunk_size(monkeypatch):
    seen = []
    monkeypatch.setattr(pooling_module, "default_chunk_size", lambda *shape: seen.append(shape) or 0)
    hidden, weight, bias, mask = random_inputs(dtype=torch.float32)
    with pytest.raises(ValueError, match="chunk_size"):
        splade_max_pool_fused(hidden, weight, bias, mask)
    assert seen == [(4, 3 * 6, 4)]
    splade_max_pool_fused(hidden, weight, bias, mask, chunk_size=7)  # an explicit chunk overrides the rule
    assert len(seen) == 1


def training_step(model_dir, pooling, lr=1e-3):
    """One AdamW step (InfoNCE + FLOPS) in float64, dropout off; returns the updated parameters."""
    torch.manual_seed(0)
    encoder = SparseEncoder.from_pretrained(model_dir, pooling=pooling)
    encoder.model.double().eval()
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=lr)
    queries, docs = encoder(encoder.tokenize(TEXTS[:3])), encoder(encoder.tokenize(TEXTS[2:]))
    scores = queries @ docs.T
    loss = torch.nn.functional.cross_entropy(scores, torch.arange(3)) + 1e-3 * (docs.abs().mean(0) ** 2).sum()
    loss.backward()
    optimizer.step()
    return {name: parameter.detach().clone() for name, parameter in encoder.named_parameters()}


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_one_adamw_step_gives_the_same_parameters(arch, tiny_model_dirs):
    reference = SparseEncoder.from_pretrained(tiny_model_dirs[arch])
    initial = {name: p.detach().double() for name, p in reference.named_parameters()}
    embeddings = reference.model.get_input_embeddings().weight
    tied_name = next(name for name, p in reference.named_parameters() if p is embeddings)
    naive = training_step(tiny_model_dirs[arch], "naive")
    fused = training_step(tiny_model_dirs[arch], "fused")
    assert naive.keys() == fused.keys()
    moved = max((naive[name] - initial[name]).abs().max().item() for name in naive)
    assert moved > 1e-4  # the step did something, so agreement within 1e-5 means something
    for name in naive:
        torch.testing.assert_close(fused[name], naive[name], rtol=0, atol=1e-5, msg=name)
    # The tied matrix moved in rows no text contains: only the head's gradient reaches those.
    assert reference.model.get_output_embeddings().weight is embeddings
    untouched_by_lookup = (fused[tied_name] != initial[tied_name]).any(dim=1).sum()
    assert untouched_by_lookup > len(set(reference.tokenize(TEXTS)["input_ids"].flatten().tolist()))


@pytest.mark.parametrize("pooling", ["fused", "fused-bf16"])
def test_encoded_vectors_equal_the_naive_path(pooling, tiny_model_dirs):
    naive = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling="naive").encode(
        TEXTS, batch_size=2, show_progress=False
    )
    other = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling=pooling).encode(
        TEXTS, batch_size=2, show_progress=False
    )
    assert naive.nnz > 0
    assert np.abs((other - naive).toarray()).max() <= 1e-3
    assert np.array_equal(other.toarray() > 0, naive.toarray() > 0)


@pytest.mark.realdata
def test_real_model_on_scifact_fused_and_bf16_match_naive():
    model = shared_path("models", "splade-tiny-msmarco")
    corpus = shared_path("data", "scifact", "corpus.jsonl")
    with corpus.open() as lines:
        rows = [json.loads(next(lines)) for _ in range(12)]
    docs = [f"{row['title']} {row['text']}" for row in rows]
    vectors = {
        pooling: SparseEncoder.from_pretrained(model, pooling=pooling)
        .encode(docs, batch_size=6, show_progress=False)
        .toarray()
        for pooling in ("naive", "fused", "fused-bf16", "auto")
    }
    naive = vectors["naive"]
    assert (naive > 0).sum(1).min() > 20
    for pooling in ("fused", "fused-bf16", "auto"):
        assert np.abs(vectors[pooling] - naive).max() <= 1e-3, pooling
        assert np.array_equal(vectors[pooling] > 0, naive > 0), pooling


# ----------------------------------------------------------------------------- the bounded bf16 screen
def screened_and_fp32(hidden, weight, bias, mask, grad_output, chunk_size=4, recompute_limit=1.0):
    """Values and gradients (hidden, weight, bias) of the fp32 fused path and of the bf16-screened one; by
    default the screen's candidates are recomputed however many there are (no fallback to the fp32 pass)."""
    results = []
    for search_dtype in (None, torch.bfloat16):
        leaves = [tensor.detach().clone().requires_grad_() for tensor in (hidden, weight, bias)]
        with patch.object(pooling_module, "RECOMPUTE_LIMIT", recompute_limit):
            out = splade_max_pool_fused(*leaves, mask, chunk_size=chunk_size, search_dtype=search_dtype)
        results.append((out.detach(), torch.autograd.grad(out, leaves, grad_output)))
    return results


def test_this_machines_bf16_matmul_accumulates_in_float32():
    """The screen's error model holds for torch's CPU bf16 matmul (else every screened test below would
    silently run the fp32 path): measured at the widths of splade-tiny and BERT-base heads."""
    for width in (6, 130, 770):
        assert screen_is_sound(torch.device("cpu"), torch.bfloat16, width)


def test_the_probe_rejects_a_matmul_that_accumulates_in_bf16():
    def bf16_accumulation(left, right):
        total = torch.zeros(left.shape[0], right.shape[1], dtype=torch.bfloat16)
        for k in range(left.shape[1]):
            total = (total.float() + left[:, k : k + 1].float() * right[k : k + 1].float()).bfloat16()
        return total

    assert not screen_is_sound(torch.device("cpu"), torch.bfloat16, 130, product=bf16_accumulation)
    assert screen_is_sound(
        torch.device("cpu"), torch.bfloat16, 130, product=lambda left, right: (left.float() @ right.float()).bfloat16()
    )


@settings(max_examples=30, deadline=None)
@given(scale=st.sampled_from([0.01, 1.0, 100.0, 1e4]), cancel=st.booleans(), seed=st.integers(0, 2**16))
def test_the_bound_covers_every_bf16_logit(scale, cancel, seed):
    """The proof's inequality, checked on the actual bf16 matmul: for every (token, term),
    ℓ ≤ ℓ̃ + u|ℓ̃| + bound (the per-text bound of screen_candidates), ℓ exact in float64. With ``cancel``
    each logit is a difference of two large halves, where the old fixed 1.0-logit margin fails."""
    generator = torch.Generator().manual_seed(seed)
    batch, length, width, vocab = 3, 7, 16, 40
    hidden = scale * torch.randn(batch, length, width, generator=generator)
    weight = torch.randn(vocab, width, generator=generator)
    if cancel:  # h_t · W_v = a − a' with a ≈ a' large: the bf16 rounding of the inputs dominates
        hidden[..., width // 2 :] = hidden[..., : width // 2] * (
            1 + 1e-3 * torch.randn(batch, length, width // 2, generator=generator)
        )
        weight[:, width // 2 :] = -weight[:, : width // 2]
    bias = torch.randn(vocab, generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, 3:] = 0
    exact = hidden.double() @ weight.double().T + bias.double()  # B × L × V
    tokens, terms = _augmented(hidden, weight, bias, mask, torch.bfloat16)  # the screen's own matmul
    screened = (tokens @ terms.T).float().view(batch, length, vocab)
    # The pooled screen's max over tokens, per token here: every (token, term) must pass the test alone.
    for token in range(length):
        keep = mask[:, token].bool()
        candidates = screen_candidates(screened[:, token], hidden, weight, bias, mask, torch.bfloat16)
        assert candidates[keep][exact[keep, token] > 0].all()


def test_a_positive_term_the_old_fixed_margin_dropped_is_kept():
    """ℓ = 1001·10 − 1000·10 − 5 = 5 > 0, but bf16 rounds 1001 to 1000: ℓ̃ = −5, below the old −1.0 margin."""
    hidden = torch.tensor([[[1001.0, 1000.0]]])
    weight = torch.tensor([[10.0, -10.0]])
    bias = torch.tensor([-5.0])
    mask = torch.ones(1, 1, dtype=torch.long)
    screened = splade_max_pool_fused(hidden, weight, bias, mask, search_dtype=torch.bfloat16)
    assert float((hidden.bfloat16() @ weight.bfloat16().T + bias.bfloat16()).float()) < -1
    assert torch.equal(screened, torch.log1p(torch.tensor([[5.0]])))


def exact_arithmetic_inputs(data, scale_power):
    """Inputs on which every float32 sum is exact in any order (integers × 2^e, partial sums < 2^24 units),
    so the fp32 result is the real one and must be reproduced bit for bit; their bf16 roundings are not
    exact (up to 10 significant bits). Adversarial: a head scaled by 2^scale_power, exact ties (repeated
    tokens), bias-only terms (W_v = 0) and max logits of exactly −1, 0, +1 units (text 0) against
    products of up to 2^20 units."""
    batch, length, width, vocab = (
        data.draw(st.integers(1, 3)),
        data.draw(st.integers(1, 6)),
        data.draw(st.integers(1, 6)),
        data.draw(st.integers(1, 24)),
    )
    seed = data.draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    hidden_units = torch.randint(-1023, 1024, (batch, length, width), generator=generator).double()
    weight_units = torch.randint(-1023, 1024, (vocab, width), generator=generator).double()
    bias_units = torch.randint(-(2**21), 2**21, (vocab,), generator=generator).double()
    if length > 1 and data.draw(st.booleans()):
        hidden_units[:, 1] = hidden_units[:, 0]  # exact ties on every term
    bias_only = torch.rand(vocab, generator=generator) < 0.2
    weight_units[bias_only] = 0
    bias_units[bias_only] = torch.randint(-3, 4, (int(bias_only.sum()),), generator=generator).double()
    # Text 0 has one real token; near-zero terms get exactly −1, 0 or +1 units there, which is its max.
    near_zero = (torch.rand(vocab, generator=generator) < 0.4) & ~bias_only
    target = (hidden_units[0, 0] * weight_units).sum(1)  # that token's logit without bias
    offset = torch.randint(-1, 2, (vocab,), generator=generator).double()
    bias_units = torch.where(near_zero, -target + offset, bias_units)
    unit = 2.0 ** (scale_power - 14)  # hidden in units of 2^-6, W of 2^(scale_power - 8)
    hidden = (hidden_units * 2.0**-6).float()
    weight = (weight_units * 2.0 ** (scale_power - 8)).float()
    bias = (bias_units * unit).float()
    mask = (torch.rand(batch, length, generator=generator) > 0.2).long()
    mask[0] = 0
    mask[0, 0] = 1
    grad_output = torch.randn(batch, vocab, generator=generator)
    return hidden, weight, bias, mask, grad_output


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    scale_power=st.sampled_from([-7, 0, 7]),
    chunk_size=st.integers(1, 8),
    recompute_limit=st.sampled_from([0.0, 1.0]),
)
def test_property_screened_equals_fp32_bitwise_on_exact_inputs(data, scale_power, chunk_size, recompute_limit):
    """Both ways out of the screen (recompute the candidates; too many candidates: the fp32 pass)."""
    hidden, weight, bias, mask, grad_output = exact_arithmetic_inputs(data, scale_power)
    (fp32, fp32_grads), (screened, screened_grads) = screened_and_fp32(
        hidden, weight, bias, mask, grad_output, chunk_size, recompute_limit
    )
    exact = torch.where(mask.bool().unsqueeze(-1), hidden.double() @ weight.double().T + bias.double(), -math.inf)
    assert torch.equal(fp32 > 0, exact.amax(1) > 0)  # the reference really is the exact result
    assert torch.equal(screened, fp32)
    for screened_grad, fp32_grad in zip(screened_grads, fp32_grads):
        assert torch.equal(screened_grad, fp32_grad)


@settings(max_examples=25, deadline=None)
@given(scale=st.sampled_from([1.0, 100.0]), seed=st.integers(0, 2**16))
def test_property_screened_matches_fp32_on_random_large_norm_heads(scale, seed):
    """Real-valued inputs (rounded differently by the two paths' matmuls): the non-zero sets agree except
    where the fp32 value itself is within float32's rounding error of 0, values within 1e-6 relative to
    the logits' size, gradients likewise. ×100 heads make the bound keep most terms (the fp32 fallback)."""
    generator = torch.Generator().manual_seed(seed)
    batch, length, width, vocab = 3, 12, 16, 200
    hidden = torch.nn.functional.layer_norm(torch.randn(batch, length, width, generator=generator), (width,))
    weight = scale * torch.randn(vocab, width, generator=generator) / 4
    bias = scale * torch.randn(vocab, generator=generator) - 2 * scale
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 0] = 0
    grad_output = torch.randn(batch, vocab, generator=generator)
    (fp32, fp32_grads), (screened, screened_grads) = screened_and_fp32(hidden, weight, bias, mask, grad_output, 64)
    size = hidden.norm(dim=2).amax(1, keepdim=True) * weight.norm(dim=1) + bias.abs()
    fp32_noise = 2 * (width + 2) * ACCUMULATION_UNIT_ROUNDOFF * size  # ≥ γ_n·s of both fp32 matmuls
    sure = torch.expm1(fp32).abs() > fp32_noise  # fp32 max logit clear of 0 by more than its error
    assert (fp32 > 0).sum() > 10
    assert torch.equal((screened > 0)[sure], (fp32 > 0)[sure])
    assert ((screened - fp32).abs() <= 1e-6 * (1 + size)).all()
    for screened_grad, fp32_grad in zip(screened_grads, fp32_grads):
        torch.testing.assert_close(screened_grad, fp32_grad, rtol=1e-5, atol=1e-5 * scale)


def test_nan_hidden_states_stay_nan_through_the_screen():
    hidden, weight, bias, mask = random_inputs(vocab=30, dtype=torch.float32)
    hidden[1, -1] = 0.0
    hidden[0, 1, 0] = float("nan")
    with torch.inference_mode():
        screened = splade_max_pool_fused(hidden, weight, bias, mask, search_dtype=torch.bfloat16)
        fp32 = splade_max_pool_fused(hidden, weight, bias, mask)
    assert torch.equal(screened.isnan(), fp32.isnan()) and screened[0].isnan().any()


def test_unsupported_screen_dtype_is_refused():
    hidden, weight, bias, mask = random_inputs(dtype=torch.float32)
    with pytest.raises(ValueError, match="search_dtype"):
        splade_max_pool_fused(hidden, weight, bias, mask, search_dtype=torch.float16)


@pytest.mark.parametrize("search_dtype", [None, torch.bfloat16])
def test_under_bf16_autocast_the_head_runs_in_bf16_and_stays_finite(search_dtype):
    # Autocast used to round the padding column (float32's lowest value) to -inf, and 0 · -inf made every
    # logit NaN: encoding under bf16 autocast on an H200 failed with "NaN/inf weights".
    hidden, weight, bias, mask = random_inputs(batch=4, length=7, width=16, vocab=300, dtype=torch.float32)
    hidden.requires_grad_()
    weight.requires_grad_()
    expected = splade_max_pool(hidden, weight, bias, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert pooling_module.compute_dtype(hidden) == torch.bfloat16
        got = splade_max_pool_fused(hidden, weight, bias, mask, search_dtype=search_dtype)
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    assert (expected > 0).sum() > 100
    torch.testing.assert_close(got.float(), expected, rtol=0.02, atol=0.05)  # bf16 logits: 8 mantissa bits
    # bf16 rounding may move a max to another near-tied token, so the gradient is not fp32's token by
    # token; it must be finite, in the weights' dtype, and reach real tokens only
    (got_grad,) = torch.autograd.grad(got.float().sum(), [hidden])
    assert got_grad.dtype == torch.float32 and torch.isfinite(got_grad).all()
    assert got_grad[mask == 1].abs().sum() > 0 and not got_grad[mask == 0].any()
    assert pooling_module.compute_dtype(hidden) == torch.float32  # autocast off again


def test_the_kept_projection_follows_in_place_changes_and_new_tensors():
    """Under reusing_projection, without grad, the head keeps its [W, b, pad] matrix between calls; an in-place change
    of the bias and a new weight of the same shape (possibly at a freed tensor's address) must each give the vectors of
    the weights as they are now (the naive head's); outside the block nothing is kept."""
    hidden, weight, bias, mask = random_inputs(batch=3, length=8, width=16, vocab=200, dtype=torch.float32)
    with torch.inference_mode():
        splade_max_pool_fused(hidden, weight, bias, mask)
    assert not pooling_module._TERMS_CACHE  # outside reusing_projection: built, not kept
    with pooling_module.reusing_projection():
        check_kept_projection(hidden, weight, bias, mask)
    assert not pooling_module._TERMS_CACHE  # the block's end drops it


def check_kept_projection(hidden, weight, bias, mask):
    with torch.inference_mode():
        first = splade_max_pool_fused(hidden, weight, bias, mask)
        torch.testing.assert_close(first, splade_max_pool(hidden, weight, bias, mask), rtol=0, atol=1e-5)
    with torch.no_grad():
        bias -= 1.5  # in place: the same tensor, a new version
    with torch.inference_mode():
        shifted = splade_max_pool_fused(hidden, weight, bias, mask)
    torch.testing.assert_close(shifted, splade_max_pool(hidden, weight, bias, mask), rtol=0, atol=1e-5)
    assert not torch.equal(shifted, first)
    for seed in range(3):  # fresh weights of the same shape, the old ones freed
        del weight
        weight = torch.randn(200, 16, generator=torch.Generator().manual_seed(seed + 10))
        with torch.inference_mode():
            fresh = splade_max_pool_fused(hidden, weight, bias, mask)
        torch.testing.assert_close(fresh, splade_max_pool(hidden, weight, bias, mask), rtol=0, atol=1e-5)
    assert pooling_module._TERMS_CACHE  # kept inside the block
