"""diagnosis.py: the head report's contract keys, what it measures, and the auto-k rule."""

from __future__ import annotations

import json
import re

import pytest
import torch

from spladekit import SparseEncoder
from spladekit.common.errors import InputError
from spladekit.model.backbone import MLMHead
from spladekit.model.diagnosis import AUTO_K_CANDIDATES, HeadReport, diagnose, recommend_k
from tiny_models import ARCHITECTURES, build_tiny_model

DIAGNOSE_KEYS = {
    "architecture",
    "vocab_size",
    "hidden_size",
    "head_param",
    "tied",
    "frobenius_norm",
    "mean_row_norm",
    "max_row_norm",
    "bias_mean",
    "recommended_k",
    "recommended_mode",
}


def load(directory, arch, **kwargs):
    return SparseEncoder.from_pretrained(directory, trust_remote_code=arch == "gte", **kwargs)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_diagnose_reports_contract_keys(arch, tiny_model_dirs):
    report = diagnose(load(tiny_model_dirs[arch], arch)).to_dict()
    assert report.keys() >= DIAGNOSE_KEYS
    assert report["tied"] is True
    assert report["recommended_k"] in AUTO_K_CANDIDATES
    weight = MLMHead.of(load(tiny_model_dirs[arch], arch).model).projection.weight.detach()
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


def test_tied_candidates_are_scored_on_the_model_tied_rescaling_really_produces(tmp_path):
    from spladekit.model.head import rescale

    folder = build_tiny_model("bert", tmp_path / "big", head_scale=16.0)
    encoder = SparseEncoder.from_pretrained(folder)
    before = MLMHead.of(encoder.model).projection.weight.detach().clone()
    tied = diagnose(encoder, mode="tied")
    assert torch.equal(MLMHead.of(encoder.model).projection.weight, before)  # restored bit for bit
    head_only = diagnose(encoder, mode="untie")
    for k in (4, 16):
        really = SparseEncoder.from_pretrained(folder)
        rescale(really.model, k, mode="tied")
        assert tied.scores_by_k[str(k)] == pytest.approx(
            round(diagnose(really, mode="tied").median_pair_score, 4), abs=2e-4
        )
        # the input embeddings shrink with the head: a head-only proxy scores a different model
        assert head_only.scores_by_k[str(k)] != pytest.approx(tied.scores_by_k[str(k)], rel=1e-3)
    assert (tied.k_scored_as, head_only.k_scored_as) == ("tied", "untie")
    assert tied.scores_by_k["1"] == head_only.scores_by_k["1"]


def test_auto_mode_scores_k_under_the_mode_it_recommends(tmp_path):
    encoder = SparseEncoder.from_pretrained(build_tiny_model("bert", tmp_path / "big", head_scale=16.0))
    report = diagnose(encoder)  # mode auto
    expected = diagnose(encoder, mode=report.recommended_mode)
    assert report.k_scored_as == report.recommended_mode
    assert (report.recommended_k, report.scores_by_k) == (expected.recommended_k, expected.scores_by_k)


def test_a_head_report_round_trips_and_a_damaged_one_names_its_file(tiny_model_dirs, tmp_path):
    report = diagnose(SparseEncoder.from_pretrained(tiny_model_dirs["bert"]))
    assert HeadReport.from_dict(json.loads(json.dumps(report.to_dict())), tmp_path / "r.json") == report
    for damaged, message in [
        ({"frobenius_norm": "big"}, "'frobenius_norm' must be a number, got 'big'"),
        ({"tied": 1}, "'tied' must be true or false"),
        ({"scores_by_k": [1, 2]}, "'scores_by_k' must be a JSON object"),
        ({"surprise": 1}, "unknown key(s) surprise"),
    ]:
        with pytest.raises(InputError, match=re.escape(message)) as caught:
            HeadReport.from_dict(report.to_dict() | damaged, tmp_path / "r.json")
        assert "r.json" in str(caught.value)
    without = {key: value for key, value in report.to_dict().items() if key != "recommended_k"}
    with pytest.raises(InputError, match="no 'recommended_k'"):
        HeadReport.from_dict(without, tmp_path / "r.json")


def test_the_collapse_verdict_thresholds():
    from spladekit.model.diagnosis import DENSE_FRACTION, SAME_VECTOR_COSINE, collapse_verdict

    assert collapse_verdict(0.03, 35, 30522) is None  # splade-tiny's untrained statistics
    assert "no text activates" in collapse_verdict(0.0, 0, 30522)
    same = collapse_verdict(SAME_VECTOR_COSINE, 40, 30522)
    assert same.startswith("collapsed before training: every text gets nearly the same vector")
    assert "terms active" not in same
    assert "27435 of 30522 terms active" in collapse_verdict(0.936, 27435, 30522)
    assert collapse_verdict(0.2, DENSE_FRACTION * 30522, 30522).startswith("dense before training")
    assert collapse_verdict(SAME_VECTOR_COSINE - 1e-6, DENSE_FRACTION * 30522 - 1, 30522) is None


def test_diagnose_runs_the_collapse_check_on_the_models_own_vectors(tiny_model_dirs):
    """Identical vectors for every text (a head whose logits are its bias alone) fire the check; the head options
    are applied to what is checked (a shift beyond every logit zeroes the vectors)."""
    from spladekit.model.diagnosis import diagnose, step0_warnings
    from spladekit.model.head_options import HeadOptions

    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    healthy = diagnose(encoder, mode="untie")
    assert healthy.mean_cosine is not None and healthy.term_weight_std is not None
    with torch.no_grad():
        encoder.head.weight.zero_()  # every token's logits are the bias: every text gets the same vector
        encoder.head.bias.copy_(torch.linspace(-1, 1, encoder.head.vocab_size))
    same = diagnose(encoder, mode="untie")
    assert same.mean_cosine == pytest.approx(1.0, abs=1e-5)
    assert same.collapse.startswith("collapsed before training: every text gets nearly the same vector")
    assert any("position_top_k" in warning for warning in step0_warnings(same))
    shifted = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], head=HeadOptions(logit_shift=1e4))
    report = diagnose(shifted, mode="untie")
    assert report.avg_d_nnz == 0 and "no text activates" in report.collapse
