"""spladekit.model.rescaling: the one place "auto" k and mode are resolved (README, "Python"), and applied once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from spladekit.common.errors import SpladekitError
from spladekit.data.samples import SAMPLE_PAIRS
from spladekit.model import rescaling
from spladekit.model.backbone import MLMHead
from spladekit.model.encoder import SparseEncoder
from spladekit.model.rescaling import RescaleRecord, apply_rescale, resolve_rescale


@pytest.fixture
def encoder(tiny_model_dirs):
    return SparseEncoder.from_pretrained(str(tiny_model_dirs["bert"]))


@pytest.fixture
def no_diagnosis(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("diagnosed")

    monkeypatch.setattr(rescaling, "diagnose", refuse)


def test_no_k_is_no_rescaling_whatever_the_mode(encoder, no_diagnosis):
    assert resolve_rescale(encoder, None, mode="untie", rescale_bias=True) == RescaleRecord(None, "none", True)
    assert resolve_rescale(encoder, None).describe() == "no rescaling (k = 1)"


def test_a_number_is_taken_as_is(encoder, no_diagnosis):
    assert resolve_rescale(encoder, "16", mode="untie") == RescaleRecord(16.0, "untie", False, ())
    assert resolve_rescale(encoder, 4).describe() == "W_head / 4, mode tied"


def test_auto_k_is_diagnoses_recommended_k_on_the_given_pairs_and_mode(encoder, monkeypatch):
    calls = []

    def diagnose(model, pairs, max_length, mode):
        calls.append((model, list(pairs), max_length, mode))
        return SimpleNamespace(recommended_k=8.0)

    monkeypatch.setattr(rescaling, "diagnose", diagnose)
    pairs = [("query", "document")] * 3
    record = resolve_rescale(encoder, "auto", mode="untie", pairs=pairs, max_length=64)
    assert record == RescaleRecord(8.0, "untie", False, ("k",))
    assert calls == [(encoder, pairs, 64, "untie")]  # scored as the mode really rescales
    assert "k chosen automatically" in record.describe()


def test_auto_k_takes_a_report_already_made_without_diagnosing_again(encoder, no_diagnosis):
    record = resolve_rescale(encoder, "auto", report=SimpleNamespace(recommended_k=32.0))
    assert record == RescaleRecord(32.0, "tied", False, ("k",))


def test_auto_mode_is_recommend_mode_for_the_k_used(encoder, monkeypatch, no_diagnosis):
    seen = []
    monkeypatch.setattr(rescaling, "recommend_mode", lambda model, k: seen.append(k) or "untie")
    record = resolve_rescale(encoder, 2, mode="auto")
    assert record == RescaleRecord(2.0, "untie", False, ("mode",)) and seen == [2.0]


def test_auto_on_the_real_head_uses_the_built_in_pairs(encoder):
    record = resolve_rescale(encoder, "auto", mode="auto")
    report = rescaling.diagnose(encoder, SAMPLE_PAIRS, max_length=256, mode="tied")
    assert record.k == report.recommended_k and record.auto == ("k", "mode")
    assert record.mode == rescaling.recommend_mode(encoder.model, record.k)


@pytest.mark.parametrize(
    "k, mode, message", [(0, "tied", "k must be"), ("big", "tied", "k must be"), (2, "both", "mode")]
)
def test_bad_values_are_refused_before_any_diagnosis(encoder, no_diagnosis, k, mode, message):
    with pytest.raises(SpladekitError, match=message):
        resolve_rescale(encoder, k, mode=mode)


def test_apply_divides_the_head_once_and_a_none_record_changes_nothing(encoder):
    head = MLMHead.of(encoder.model)
    before = head.weight.detach().clone()
    apply_rescale(encoder, RescaleRecord(None, "none"))
    assert torch.equal(head.weight, before)
    apply_rescale(encoder, RescaleRecord(4.0, "tied"))
    torch.testing.assert_close(MLMHead.of(encoder.model).weight, before / 4)
