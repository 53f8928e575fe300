"""Core behaviour on the real offline checkpoints in ../shared/models (skipped when absent)."""

from __future__ import annotations

import pytest

from conftest import shared_path
from spladekit import SparseEncoder
from spladekit.model.diagnosis import diagnose

pytestmark = pytest.mark.realdata


def test_splade_tiny_is_tied_bert_and_gives_a_small_sensible_query_vector():
    encoder = SparseEncoder.from_pretrained(shared_path("models", "splade-tiny-msmarco"))
    report = diagnose(encoder)
    assert report.tied is True and report.vocab_size == 30522
    assert report.recommended_k == 1  # the reference model itself is healthy
    vector = encoder.encode(["the capital of france"], show_progress=False)
    terms = encoder.decode(vector[0])
    assert 3 <= len(terms) <= 60
    assert {"capital", "france"} <= set(list(terms)[:10])


def test_minilm_without_mlm_head_reports_fresh_head_and_large_k():
    encoder = SparseEncoder.from_pretrained(shared_path("models", "all-MiniLM-L6-v2"))
    assert "cls.predictions.transform.dense.weight" in encoder.fresh_keys
    report = diagnose(encoder)
    assert report.avg_d_nnz > 0.5 * report.vocab_size  # the fresh head activates (almost) everything
    assert report.recommended_k >= 16
