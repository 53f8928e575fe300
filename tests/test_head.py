"""head.py: rescaling in both modes (exact norms, ties, untouched inputs, once only), diagnosis, auto-k."""

from __future__ import annotations

import math

import pytest
import torch

from spladekit import SparseEncoder
from spladekit.backbone import is_tied, vocab_projection
from spladekit.errors import SpladekitError
from spladekit.head import (AUTO_K_CANDIDATES, diagnose, head_norms, recommend_k, recommend_mode, rescale, rescale_record,
                            word_position_ratio)
from tiny_models import ARCHITECTURES, build_tiny_model

TEXTS = ["what is the capital of france", "paris is the capital city of france on the river seine", "a cat"]
DIAGNOSE_KEYS = {"architecture", "vocab_size", "hidden_size", "head_param", "tied", "frobenius_norm",
                 "mean_row_norm", "max_row_norm", "bias_mean", "recommended_k"}


def load(directory, arch, **kwargs):
    return SparseEncoder.from_pretrained(directory, trust_remote_code=arch == "gte", **kwargs)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("mode", ["tied", "untie"])
def test_rescale_divides_norm_by_exactly_k(arch, mode, tiny_model_dirs):
    encoder = load(tiny_model_dirs[arch], arch)
    model = encoder.model
    weight_before = vocab_projection(model).weight.detach().clone()
    inputs_before = model.get_input_embeddings().weight.detach().clone()
    bias_before = vocab_projection(model).bias.detach().clone()
    rescale(model, 4.0, mode=mode)
    projection = vocab_projection(model)
    assert torch.equal(projection.weight, weight_before / 4.0)
    assert head_norms(model)["frobenius_norm"] == pytest.approx(float(weight_before.norm()) / 4.0, rel=1e-6)
    assert torch.equal(projection.bias, bias_before)  # rescale_bias defaults to False
    if mode == "tied":
        assert is_tied(model)
        assert torch.equal(model.get_input_embeddings().weight, weight_before / 4.0)
    else:
        assert not is_tied(model)
        assert torch.equal(model.get_input_embeddings().weight, inputs_before)
    assert rescale_record(model) == {"k": 4.0, "mode": mode, "rescale_bias": False}


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("mode", ["tied", "untie"])
def test_save_reload_gives_identical_vectors_and_never_rescales_twice(arch, mode, tiny_model_dirs, tmp_path):
    encoder = load(tiny_model_dirs[arch], arch, rescale_k=2.0, rescale_mode=mode)
    vectors = encoder.encode(TEXTS, show_progress=False)
    encoder.save(tmp_path / "saved")

    reloaded = load(tmp_path / "saved", arch)
    assert rescale_record(reloaded.model) == {"k": 2.0, "mode": mode, "rescale_bias": False}
    assert is_tied(reloaded.model) == (mode == "tied")
    again = reloaded.encode(TEXTS, show_progress=False)
    assert (again != vectors).nnz == 0

    # Asking for the same rescaling on an already-rescaled folder is a no-op, not a second division.
    same = load(tmp_path / "saved", arch, rescale_k=2.0, rescale_mode=mode)
    assert torch.equal(vocab_projection(same.model).weight, vocab_projection(reloaded.model).weight)
    with pytest.raises(SpladekitError, match="already rescaled"):
        load(tmp_path / "saved", arch, rescale_k=4.0, rescale_mode=mode)


def test_rescale_bias_and_vectors_follow_the_formula(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    weight = vocab_projection(encoder.model).weight.detach().clone()
    bias = vocab_projection(encoder.model).bias.detach().clone()
    rescale(encoder.model, 8.0, mode="untie", rescale_bias=True)
    assert torch.equal(vocab_projection(encoder.model).bias, bias / 8.0)
    batch = encoder.tokenize(TEXTS[:1])
    with torch.no_grad():
        hidden, _ = encoder.head_inputs(batch)
        expected = torch.log1p(torch.relu(hidden[0] @ (weight / 8.0).T + bias / 8.0)).amax(dim=0)
    assert torch.allclose(torch.from_numpy(encoder.encode(TEXTS[:1], show_progress=False).toarray()[0]), expected, atol=1e-6)


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, "abc", None])
def test_bad_k_is_a_clear_error(bad, tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    with pytest.raises(SpladekitError, match="positive finite"):
        rescale(encoder.model, bad)
    assert rescale_record(encoder.model) is None


def test_bad_mode_and_double_rescale(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    with pytest.raises(SpladekitError, match="mode"):
        rescale(encoder.model, 2.0, mode="sideways")
    rescale(encoder.model, 2.0)
    with pytest.raises(SpladekitError, match="already rescaled"):
        rescale(encoder.model, 2.0)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_diagnose_reports_contract_keys(arch, tiny_model_dirs):
    report = diagnose(load(tiny_model_dirs[arch], arch)).to_dict()
    assert DIAGNOSE_KEYS <= report.keys()
    assert report["tied"] is True
    assert report["recommended_k"] in AUTO_K_CANDIDATES
    weight = vocab_projection(load(tiny_model_dirs[arch], arch).model).weight.detach()
    assert report["frobenius_norm"] == pytest.approx(float(weight.norm()), rel=1e-5)
    assert report["max_row_norm"] == pytest.approx(float(weight.norm(dim=1).max()), rel=1e-5)
    assert report["avg_q_nnz"] > 0 and report["avg_d_nnz"] >= report["avg_q_nnz"]


def test_inflated_head_raises_recommended_k(tmp_path):
    base = diagnose(SparseEncoder.from_pretrained(build_tiny_model("bert", tmp_path / "base")))
    inflated = diagnose(SparseEncoder.from_pretrained(build_tiny_model("bert", tmp_path / "big", head_scale=32.0)))
    assert inflated.frobenius_norm == pytest.approx(32 * base.frobenius_norm, rel=1e-4)
    assert inflated.median_pair_score > 10 * base.median_pair_score
    assert inflated.recommended_k > base.recommended_k


@pytest.mark.parametrize(
    "scores, expected",
    [
        ({1: 500.0, 2: 200.0, 4: 30.0, 8: 5.0}, 4.0),  # first k under 2 × 16
        ({1: 15.0, 2: 7.0, 4: 40.0}, 1.0),  # already healthy
        ({1: 900.0, 2: 800.0}, 2.0),  # nothing low enough: the largest candidate
        ({1: 0.0, 2: 0.0}, 1.0),  # dead head: do not shrink it further
    ],
)
def test_recommend_k_rule(scores, expected):
    assert recommend_k(scores) == expected


@pytest.mark.parametrize("mode", ["tied", "untie"])
def test_simulated_inflation_is_undone_by_rescaling_with_the_same_k(mode, tiny_model_dirs):
    from spladekit.head import divide_head

    encoder = load(tiny_model_dirs["bert"], "bert")
    original = vocab_projection(encoder.model).weight.detach().clone()
    divide_head(encoder.model, 1 / 8, mode=mode)  # head × 8, not recorded: still rescalable
    assert rescale_record(encoder.model) is None
    assert torch.equal(vocab_projection(encoder.model).weight, original * 8)
    rescale(encoder.model, 8, mode=mode)
    assert torch.equal(vocab_projection(encoder.model).weight, original)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("mode", ["tied", "untie"])
def test_word_position_ratio_follows_the_rescaling_mode(arch, mode, tiny_model_dirs, caplog):
    model = load(tiny_model_dirs[arch], arch).model
    before = word_position_ratio(model)
    if arch in ("modernbert", "ettin"):  # rotary positions: no table, nothing to damage
        assert before is None and recommend_mode(model, 64) == "tied"
        return
    k = 4 * max(before, 1.0)  # large enough to push the ratio below 1 in tied mode
    assert recommend_mode(model, 1) == "tied" and recommend_mode(model, k) == "untie"
    with caplog.at_level("WARNING", logger="spladekit"):
        rescale(model, k, mode=mode)
    after = word_position_ratio(model)
    if mode == "tied":  # the input word embeddings are the head: divided by k with it
        assert after == pytest.approx(before / k, rel=1e-5)
        assert "positions will dominate" in caplog.text
    else:
        assert after == before and "positions will dominate" not in caplog.text
        assert recommend_mode(model, k) == "tied"  # untied now: rescaling the head cannot touch the inputs
