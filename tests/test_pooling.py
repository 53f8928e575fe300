"""pooling.py: the fused SPLADE head has the naive head's values and gradients, without B × L × V logits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_path
from spladekit import SparseEncoder
from spladekit.errors import SpladekitError
from spladekit.pooling import splade_max_pool, splade_max_pool_fused
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
    (naive, naive_grads), (fused, fused_grads) = naive_and_fused_grads(hidden, weight, bias, mask, chunk_size, grad_output)
    torch.testing.assert_close(fused, naive, rtol=0, atol=1e-12)
    for fused_grad, naive_grad in zip(fused_grads, naive_grads):
        torch.testing.assert_close(fused_grad, naive_grad, rtol=0, atol=1e-12)


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
    torch.testing.assert_close(grad_hidden, torch.autograd.grad(splade_max_pool(hidden, weight, None, mask).sum(), [hidden])[0])


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
    for pool in (splade_max_pool, lambda *args: splade_max_pool_fused(*args, chunk_size=64, search_dtype=torch.bfloat16)):
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
        torch.testing.assert_close(splade_max_pool_fused(hidden, weight, bias, mask, search_dtype=torch.bfloat16), naive,
                                   rtol=0, atol=1e-5)


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
    hidden, weight, bias, mask = (tensor.to(dtype) if tensor.is_floating_point() else tensor
                                  for tensor in clear_winner_inputs())
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
    reference, (reference_grad_hidden, reference_grad_weight) = fp32_naive_reference(hidden, weight, bias, mask, grad_output)
    for search_dtype in (None, torch.bfloat16):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        fused = splade_max_pool_fused(h, w, bias, mask, chunk_size=5, search_dtype=search_dtype)
        grad_hidden, grad_weight = torch.autograd.grad(fused, [h, w], grad_output)
        torch.testing.assert_close(fused.float(), reference, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(grad_hidden.float(), reference_grad_hidden, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(grad_weight.float(), reference_grad_weight, rtol=1e-2, atol=1e-1)


def test_unknown_pooling_and_bad_chunk_size_are_refused(tiny_model_dirs):
    with pytest.raises(SpladekitError, match="unknown pooling"):
        SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling="mean")
    hidden, weight, bias, mask = random_inputs()
    with pytest.raises(ValueError, match="chunk_size"):
        splade_max_pool_fused(hidden, weight, bias, mask, chunk_size=0)


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
    naive = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling="naive").encode(TEXTS, batch_size=2, show_progress=False)
    other = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling=pooling).encode(TEXTS, batch_size=2, show_progress=False)
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
        pooling: SparseEncoder.from_pretrained(model, pooling=pooling).encode(docs, batch_size=6, show_progress=False).toarray()
        for pooling in ("naive", "fused", "fused-bf16")
    }
    naive = vectors["naive"]
    assert (naive > 0).sum(1).min() > 20
    for pooling in ("fused", "fused-bf16"):
        assert np.abs(vectors[pooling] - naive).max() <= 1e-3, pooling
        assert np.array_equal(vectors[pooling] > 0, naive > 0), pooling
