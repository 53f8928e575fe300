"""Real data: splade-tiny-msmarco on SciFact (test split, 256 tokens) reproduces ../shared's sanity table.

The encoded corpus is cached in pytest's cache folder (``.pytest_cache/d/spladekit-vectors``), so only
the first run encodes the 5,183 documents (minutes on 2 CPU cores); later runs take seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import shared_path

pytestmark = pytest.mark.realdata


@pytest.fixture
def cache_env(request, monkeypatch):
    folder = request.config.cache.mkdir("spladekit-vectors")
    monkeypatch.setenv("SPLADEKIT_CACHE", str(folder))
    return {**os.environ, "SPLADEKIT_CACHE": str(folder)}


@pytest.mark.slow
def test_scifact_ndcg_matches_the_sanity_table(cache_env, tmp_path):
    model = shared_path("models", "splade-tiny-msmarco")
    data = shared_path("data", "scifact")
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "evaluate",
            str(model),
            "--data",
            str(data),
            "--split",
            "test",
            "--doc-max-length",
            "256",
            "--json-out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=cache_env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["nDCG@10"] == pytest.approx(0.644, abs=0.005)  # ../shared/data/README.md (binary qrels)
    assert (results["docs"], results["queries"], results["queries_unjudged"]) == (5183, 300, 809)
    assert 50 < results["avg_d_nnz"] < 400 and 5 < results["avg_q_nnz"] < 100


@pytest.mark.slow
def test_scifact_approximate_backends_track_exact(cache_env):
    from spladekit import SparseEncoder
    from spladekit.data import load_collection
    from spladekit.evaluation.evaluate import evaluate

    encoder = SparseEncoder.from_pretrained(shared_path("models", "splade-tiny-msmarco"))
    collection = load_collection(shared_path("data", "scifact"), "test")
    exact = evaluate(encoder, collection, max_length=256, show_progress=False)
    assert exact.provenance["corpus_cached"] or exact.timings["encode_docs_seconds"] > 0
    for backend in ("seismic", "bmp"):
        approx = evaluate(encoder, collection, backend=backend, max_length=256, show_progress=False)
        assert approx.provenance["corpus_cached"]  # encoded once, reused
        assert approx.metrics["nDCG@10"] == pytest.approx(exact.metrics["nDCG@10"], abs=0.01)


@pytest.mark.slow
def test_pisa_at_its_default_scale_is_within_0001_of_exact_on_cisi(cache_env):
    """PISA ranks rank-safely by impacts round(w x scale), the scale derived from the documents by default
    (spladekit.common.sparse.impact_scale): every measure within 0.001 of exact float32 on CISI (at the engines'
    customary scale 100, RR@10 drifts +0.0022: docs/results/impact-scale)."""
    from spladekit import SparseEncoder
    from spladekit.data import load_collection
    from spladekit.evaluation.evaluate import evaluate

    encoder = SparseEncoder.from_pretrained(shared_path("models", "splade-tiny-msmarco"))
    collection = load_collection(shared_path("data", "cisi"), "test")
    exact = evaluate(encoder, collection, max_length=256, show_progress=False)
    pisa = evaluate(encoder, collection, backend="pisa", max_length=256, show_progress=False)
    assert pisa.provenance["corpus_cached"]
    for measure in ("nDCG@10", "RR@10", "R@1000"):
        assert pisa.metrics[measure] == pytest.approx(exact.metrics[measure], abs=0.001), measure
