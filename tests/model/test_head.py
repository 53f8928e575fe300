"""head.py: rescaling in both modes (exact norms, ties, untouched inputs, once only), the k check, the mode rule."""

from __future__ import annotations

import math

import pytest
import torch

from spladekit import SparseEncoder
from spladekit.common.errors import SpladekitError
from spladekit.model.backbone import MLMHead
from spladekit.model.head import (
    divide_head,
    head_norms,
    parse_k,
    recommend_mode,
    rescale,
    rescale_record,
    word_position_ratio,
)
from tiny_models import ARCHITECTURES, build_tiny_model

TEXTS = ["what is the capital of france", "paris is the capital city of france on the river seine", "a cat"]


def load(directory, arch, **kwargs):
    return SparseEncoder.from_pretrained(directory, trust_remote_code=arch == "gte", **kwargs)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("mode", ["tied", "untie"])
def test_rescale_divides_norm_by_exactly_k(arch, mode, tiny_model_dirs):
    encoder = load(tiny_model_dirs[arch], arch)
    model = encoder.model
    weight_before = MLMHead.of(model).projection.weight.detach().clone()
    inputs_before = model.get_input_embeddings().weight.detach().clone()
    bias_before = MLMHead.of(model).projection.bias.detach().clone()
    rescale(model, 4.0, mode=mode)
    projection = MLMHead.of(model).projection
    assert torch.equal(projection.weight, weight_before / 4.0)
    assert head_norms(model)["frobenius_norm"] == pytest.approx(float(weight_before.norm()) / 4.0, rel=1e-6)
    assert torch.equal(projection.bias, bias_before)  # rescale_bias defaults to False
    if mode == "tied":
        assert MLMHead.of(model).tied
        assert torch.equal(model.get_input_embeddings().weight, weight_before / 4.0)
    else:
        assert not MLMHead.of(model).tied
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
    assert MLMHead.of(reloaded.model).tied == (mode == "tied")
    again = reloaded.encode(TEXTS, show_progress=False)
    assert (again != vectors).nnz == 0

    # Asking for the same rescaling on an already-rescaled folder is a no-op, not a second division.
    same = load(tmp_path / "saved", arch, rescale_k=2.0, rescale_mode=mode)
    assert torch.equal(MLMHead.of(same.model).projection.weight, MLMHead.of(reloaded.model).projection.weight)
    with pytest.raises(SpladekitError, match="already rescaled"):
        load(tmp_path / "saved", arch, rescale_k=4.0, rescale_mode=mode)


def test_rescale_bias_and_vectors_follow_the_formula(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    weight = MLMHead.of(encoder.model).projection.weight.detach().clone()
    bias = MLMHead.of(encoder.model).projection.bias.detach().clone()
    rescale(encoder.model, 8.0, mode="untie", rescale_bias=True)
    assert torch.equal(MLMHead.of(encoder.model).projection.bias, bias / 8.0)
    batch = encoder.tokenize(TEXTS[:1])
    with torch.no_grad():
        hidden, _ = encoder.head_inputs(batch)
        expected = torch.log1p(torch.relu(hidden[0] @ (weight / 8.0).T + bias / 8.0)).amax(dim=0)
    assert torch.allclose(
        torch.from_numpy(encoder.encode(TEXTS[:1], show_progress=False).toarray()[0]), expected, atol=1e-6
    )


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


@pytest.mark.parametrize("mode", ["tied", "untie"])
def test_simulated_inflation_is_undone_by_rescaling_with_the_same_k(mode, tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    original = MLMHead.of(encoder.model).projection.weight.detach().clone()
    divide_head(encoder.model, 1 / 8, mode=mode)  # head × 8, not recorded: still rescalable
    assert rescale_record(encoder.model) is None
    assert torch.equal(MLMHead.of(encoder.model).projection.weight, original * 8)
    rescale(encoder.model, 8, mode=mode)
    assert torch.equal(MLMHead.of(encoder.model).projection.weight, original)


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


@pytest.mark.parametrize("value", [0, -2, "abc", float("nan"), float("inf"), 1e-400, None, True, "auto"])
def test_parse_k_refuses_what_is_not_a_positive_finite_number(value):
    with pytest.raises(SpladekitError, match="k must be a positive finite number"):
        parse_k(value)


def test_parse_k_accepts_numbers_and_auto_where_allowed():
    assert parse_k("16") == 16.0 and parse_k(0.5) == 0.5
    assert parse_k("auto", allow_auto=True) == "auto"


@pytest.mark.parametrize("mode", ["tied", "untie"])
def test_a_rescaling_that_would_overflow_is_refused_and_leaves_the_model_unchanged(mode, tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    model = encoder.model
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(
        SpladekitError,
        match=r"dividing the head by 1e-36 would make its largest row norm .* "
        r"overflow float32 .* the model was left unchanged",
    ):
        rescale(model, 1e-36, mode=mode)
    assert rescale_record(model) is None and MLMHead.of(model).tied
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[name], after[name]) for name in before)
    rescale(model, 2.0, mode=mode)  # still rescalable: nothing was recorded
    assert rescale_record(model)["k"] == 2.0


def test_simulated_inflation_that_would_overflow_is_refused(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    original = MLMHead.of(encoder.model).projection.weight.detach().clone()
    with pytest.raises(SpladekitError, match="left unchanged"):
        divide_head(encoder.model, 1e-30)  # head × 1e30 (a sweep's `inflate: 1e30`)
    assert torch.equal(MLMHead.of(encoder.model).projection.weight, original)


def test_a_head_already_holding_nan_is_not_rescaled(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    with torch.no_grad():
        MLMHead.of(encoder.model).projection.weight[3, 1] = float("nan")
    with pytest.raises(SpladekitError, match="already holds NaN/inf"):
        rescale(encoder.model, 2.0)
    assert rescale_record(encoder.model) is None


def test_cli_rescale_with_a_k_that_overflows_exits_2_and_writes_nothing(tiny_model_dirs, tmp_path, cli):

    output = tmp_path / "rescaled"
    result = cli("rescale", tiny_model_dirs["bert"], "--k", "1e-36", "--output", output)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: dividing the head by 1e-36"), result.stderr
    assert not output.exists()


def test_transform_inflation_scales_the_head_input_and_keeps_the_tie(tmp_path):
    from spladekit import SparseEncoder
    from spladekit.experiments.inflate import inflate
    from spladekit.model.backbone import MLMHead

    folder = build_tiny_model("bert", tmp_path / "m")
    plain, inflated = SparseEncoder.from_pretrained(folder), SparseEncoder.from_pretrained(folder)
    words = inflated.model.get_input_embeddings().weight.detach().clone()
    inflate(inflated.model, 8, "transform")
    batch = plain.tokenize(["a small test sentence", "another one"])
    with torch.inference_mode():
        before, _ = plain.head_inputs(batch)
        after, _ = inflated.head_inputs(batch)
    assert torch.allclose(after, 8 * before, rtol=1e-5, atol=1e-6)
    assert MLMHead.of(inflated.model).tied and torch.equal(inflated.model.get_input_embeddings().weight, words)


def test_position_inflation_divides_the_word_position_ratio(tmp_path):
    from spladekit import SparseEncoder
    from spladekit.experiments.inflate import inflate

    encoder = SparseEncoder.from_pretrained(build_tiny_model("bert", tmp_path / "m"))
    ratio = word_position_ratio(encoder.model)
    inflate(encoder.model, 4, "positions")
    assert word_position_ratio(encoder.model) == pytest.approx(ratio / 4, rel=1e-5)
    with pytest.raises(SpladekitError, match="inflate target must be one of"):
        inflate(encoder.model, 2, "sideways")


def test_tied_rescaling_warns_that_words_already_below_positions_stay_there(tmp_path, caplog):
    from spladekit import SparseEncoder
    from spladekit.experiments.inflate import inflate

    encoder = SparseEncoder.from_pretrained(build_tiny_model("bert", tmp_path / "m"))
    inflate(encoder.model, 4 * max(word_position_ratio(encoder.model), 1.0), "positions")
    assert word_position_ratio(encoder.model) < 1
    with caplog.at_level("WARNING", logger="spladekit"):
        rescale(encoder.model, 8, mode="tied")
    assert "positions will dominate" in caplog.text and "below the positions already" in caplog.text
