"""packing.py: texts packed end to end into rows give every architecture's padded vectors and gradients (positions,
RoBERTa's offset, the block-diagonal mask, ModernBERT's sliding window, eager attention); the row layout; the
fallbacks to one padded batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spladekit import SparseEncoder
from spladekit.common.errors import SpladekitError
from spladekit.model import encoder as encoder_module
from spladekit.model.packing import first_fit_decreasing, pack, packable, position_offset
from tiny_models import ARCHITECTURES
from tiny_models import SAMPLE_TEXTS as TEXTS


def load(directory, arch):
    return SparseEncoder.from_pretrained(directory, trust_remote_code=arch == "gte")


def vectors_and_gradients(encoder, texts, packing):
    encoder.zero_grad()
    vectors, tokens = encoder.forward_texts(texts, 32, packing=packing)
    (vectors * torch.linspace(0.5, 1.5, vectors.shape[1])).sum().backward()
    return vectors.detach(), tokens, [p.grad.clone() for p in encoder.parameters() if p.grad is not None]


def assert_same(packed, padded):
    vectors, tokens, grads = packed
    assert tokens == padded[1]
    torch.testing.assert_close(vectors, padded[0], atol=1e-5, rtol=1e-5)
    assert len(grads) == len(padded[2])
    for grad, expected in zip(grads, padded[2]):
        torch.testing.assert_close(grad, expected, atol=1e-4, rtol=1e-4)


def rows_of(encoder, texts):
    encodings = encoder.tokenizer(texts, truncation=True, max_length=32)
    features = {name: encodings[name] for name in ("input_ids", "token_type_ids") if name in encodings}
    return pack(features, encoder.tokenizer.pad_token_id, position_offset(encoder.model), encoder.device).shape[0]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_packed_rows_give_the_padded_batchs_vectors_and_gradients(arch, tiny_model_dirs):
    """15 texts of 2 to 21 tokens in a few rows: the vectors, gradients and real tokens of one padded batch. GTE
    (remote code, not in PACKABLE) runs its padded batch."""
    encoder = load(tiny_model_dirs[arch], arch)
    texts = TEXTS * 3
    assert packable(encoder.model) == (arch != "gte")
    assert rows_of(encoder, texts) == 9  # the packed path runs: 15 texts share 9 rows
    assert_same(vectors_and_gradients(encoder, texts, True), vectors_and_gradients(encoder, texts, False))


@pytest.mark.parametrize("config_class", ["ElectraConfig", "XLMRobertaConfig", "CamembertConfig"])
def test_the_other_packable_architectures_give_the_padded_vectors(config_class, tmp_path):
    """PACKABLE's members beyond the seed architectures, each a tiny random model: ELECTRA (BERT-like) and the
    RoBERTa family's XLM-R and CamemBERT (positions from padding_idx + 1)."""
    import transformers as T

    from tiny_models import MAX_POSITIONS, VOCAB, tiny_tokenizer

    torch.manual_seed(0)
    config = getattr(T, config_class)(
        vocab_size=len(VOCAB),
        pad_token_id=0,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_POSITIONS + 2,
        **({"embedding_size": 16} if config_class == "ElectraConfig" else {}),
    )
    T.AutoModelForMaskedLM.from_config(config).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    encoder = SparseEncoder.from_pretrained(tmp_path)
    texts = TEXTS * 3
    assert packable(encoder.model) and rows_of(encoder, texts) == 9
    assert position_offset(encoder.model) == (0 if config_class == "ElectraConfig" else 1)
    assert_same(vectors_and_gradients(encoder, texts, True), vectors_and_gradients(encoder, texts, False))


def test_packing_builds_the_mask_eager_attention_reads(tiny_model_dirs):
    """Eager attention adds a float mask (sdpa takes booleans): transformers' mask functions give each its form."""
    encoder = load(tiny_model_dirs["bert"], "bert")
    encoder.model.set_attn_implementation("eager")
    assert packable(encoder.model)
    texts = TEXTS * 3
    assert_same(vectors_and_gradients(encoder, texts, True), vectors_and_gradients(encoder, texts, False))


def test_each_text_restarts_its_positions_at_the_architectures_offset(tiny_model_dirs):
    """RoBERTa numbers positions from padding_idx + 1 (sentence-transformers #3879 packed it from 0), BERT from 0."""
    for arch, offset in (("bert", 0), ("roberta", 1)):
        encoder = load(tiny_model_dirs[arch], arch)
        assert position_offset(encoder.model) == offset
        packed = pack({"input_ids": [[5] * 4, [6] * 3, [7] * 1]}, 0, offset, torch.device("cpu"))
        assert packed.shape == (2, 4) and packed.rows.tolist() == [0, 1, 1]  # the last two texts share a row
        for text, length in enumerate((4, 3, 1)):
            row, start = int(packed.rows[text]), int(packed.starts[text])
            assert packed.inputs["position_ids"][row, start : start + length].tolist() == list(
                range(offset, offset + length)
            )
            assert packed.inputs["input_ids"][row, start : start + length].tolist() == [5 + text] * length


def test_first_fit_decreasing_fills_rows_in_order():
    """Every text in one row, no row over capacity, and no text fits a row before its own (first fit)."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        lengths = rng.integers(1, 40, size=int(rng.integers(1, 60))).tolist()
        capacity = max(lengths)
        rows = first_fit_decreasing(lengths, capacity)
        assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
        room = [capacity - sum(lengths[i] for i in row) for row in rows]
        assert min(room) >= 0
        for later, row in enumerate(rows):
            assert all(lengths[i] > room[earlier] for i in row for earlier in range(later))
    with pytest.raises(ValueError, match="does not fit a row of 3"):
        first_fit_decreasing([2, 4], 3)


def test_packing_that_saves_no_row_runs_one_padded_batch(tiny_model_dirs, monkeypatch):
    """Texts of one length leave a row each: the padded batch runs, no mask is built."""
    encoder = load(tiny_model_dirs["bert"], "bert")
    texts = ["the cat sat on the mat", "the dog sat on the mat", "a fox sat on the mat"]
    expected, _ = encoder.forward_texts(texts, 32)

    def no_mask(*_):
        raise AssertionError("a mask was built")

    monkeypatch.setattr(encoder_module, "block_diagonal_mask", no_mask)
    vectors, _ = encoder.forward_texts(texts, 32, packing=True)
    torch.testing.assert_close(vectors, expected)


def test_packing_and_length_groups_exclude_each_other(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    with pytest.raises(SpladekitError, match="packing and length groups"):
        encoder.forward_texts(TEXTS, 32, groups=2, packing=True)
