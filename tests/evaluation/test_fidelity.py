"""fidelity: each engine's storage of the weights, checked against the engine (Qdrant Edge's uint8 scores, the
values of OpenSearch's own ByteQuantizer test, Lucene's FeatureField bits), and the report and CLI built on them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from collection_files import write_beir
from spladekit import SparseEncoder
from spladekit.common.errors import SpladekitError
from spladekit.data import load_collection
from spladekit.evaluation import fidelity as fidelity_module
from spladekit.evaluation.fidelity import (
    TARGETS,
    FidelityReport,
    fidelity,
    lucene_9bit,
    opensearch_byte,
    qdrant_uint8,
)
from spladekit.index import ExactSearcher, QdrantSearcher
from tiny_models import build_tiny_model


def row_matrix(values) -> sp.csr_matrix:
    return sp.csr_matrix(np.array([values], dtype=np.float32))


def test_opensearch_byte_matches_the_values_of_neural_searchs_own_test():
    """neural-search's ByteQuantizerTests, ceiling 3: 0 -> 0, 3 -> 255, 1.5 -> 128, 4 -> 255 (clipped)."""
    held = opensearch_byte(row_matrix([0.0, 3.0, 1.5, 4.0, 0.001]), 3.0)
    assert held.toarray().tolist() == [[0, 255, 128, 255, 0]]
    assert held.nnz == 3  # a byte of 0 is no posting


def test_lucene_keeps_nine_significant_bits_by_truncation():
    # 1.1f is 0x3F8CCCCD; FeatureField stores 0x3F8CCCCD >>> 15 and reads it back as 0x3F8C8000 = 1.09765625
    assert lucene_9bit(row_matrix([1.1])).data.tolist() == [1.09765625]
    weights = np.random.default_rng(0).uniform(0.01, 5, 10_000).astype(np.float32)
    held = lucene_9bit(row_matrix(weights)).data
    assert (held.view(np.uint32) & 0x7FFF == 0).all() and (held <= weights).all()
    assert ((weights - held) / weights).max() < 2**-8


def test_qdrant_uint8_is_what_qdrant_edge_scores_with():
    """Exact search over qdrant_uint8(D) gives Qdrant Edge's own uint8 run: the same rows and the same scores."""
    documents = sp.random(300, 80, density=0.1, format="csr", random_state=11, dtype=np.float32)
    documents.data *= 3
    queries = sp.random(30, 80, density=0.1, format="csr", random_state=12, dtype=np.float32)
    with QdrantSearcher.build(documents, datatype="uint8") as engine:
        found = engine.search(queries, k=10)
    expected = ExactSearcher.build(qdrant_uint8(documents)).search(queries, k=10)
    np.testing.assert_array_equal(found.doc_indices, expected.doc_indices)
    np.testing.assert_allclose(found.scores, expected.scores, rtol=1e-5)
    float32 = ExactSearcher.build(documents).search(queries, k=10)
    assert not np.allclose(float32.scores, expected.scores, rtol=1e-5)  # the quantization is visible


def test_the_maps_leave_their_input_untouched():
    documents = sp.random(50, 40, density=0.2, format="csr", random_state=3, dtype=np.float32)
    documents.data[::7] = 0.0001  # rounds to 0 in most maps: zeros are removed from the copies
    before = documents.copy()
    for target in TARGETS.values():
        target.documents(documents, target.default or 1.0)
        target.queries(documents, target.default or 1.0)
        assert (documents != before).nnz == 0 and (documents.indptr == before.indptr).all(), target.name


def test_sweep_summary_lists_settings_within_tolerance_and_where_every_larger_one_is():
    report = FidelityReport("c", ("nDCG@10",), {"nDCG@10": 0.5})
    for value, drift in ((5, 0.004), (10, 0.0008), (20, -0.0011), (50, 0.0001), (100, 0.0)):
        report.rows.append({"target": "impacts", "setting": "scale", "value": value, "drift": {"nDCG@10": drift}})
    report.rows.append({"target": "qdrant-float16", "setting": None, "value": None, "drift": {"nDCG@10": 0.0}})
    assert report.sweeps() == {"impacts": {"within_tolerance": [10, 50, 100], "stable_from": 50}}


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return SparseEncoder.from_pretrained(build_tiny_model("bert", tmp_path_factory.mktemp("models") / "bert"))


def test_report_rows_drift_from_the_float32_search_of_the_same_vectors(encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    collection = load_collection(write_beir(tmp_path / "mini"))
    report = fidelity(encoder, collection, targets=["impacts", "qdrant-float16"], max_length=64, show_progress=False)
    impact_rows = [row for row in report.rows if row["target"] == "impacts"]
    derived = next(row["value"] for row in impact_rows if row["default"])  # spladekit's default: from the documents
    assert derived not in TARGETS["impacts"].sweep and derived > 500
    assert [(row["target"], row["value"]) for row in report.rows] == [
        *(("impacts", value) for value in sorted({*TARGETS["impacts"].sweep, derived})),
        ("qdrant-float16", None),
    ]
    for row in report.rows:
        assert row["drift"] == {name: row["metrics"][name] - report.reference[name] for name in report.reference}
        # the mini collection's documents all fit in a top 10, so every target keeps the whole reference top 10
        assert row["top10_kept"] == 1.0 and row["queries"] == 4
    assert [row["default"] for row in report.rows].count(True) == 1  # the derived scale
    with pytest.raises(SpladekitError, match="unknown fidelity target int4; choose from lucene-9bit"):
        fidelity(encoder, collection, targets=["int4"])


def test_cli_prints_the_table_and_writes_the_json(encoder, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    encoder.save(model)
    data = write_beir(tmp_path / "mini")
    arguments = ["fidelity", model, "--data", data, "--doc-max-length", "64", "--target", "lucene-9bit"]
    shown = cli(*arguments, "--target", "bmp", "--json-out", tmp_path / "report.json")
    assert shown.returncode == 0, shown.stderr
    assert "lucene-9bit" in shown.stdout and "bmp" in shown.stdout and "drift from exact float32" in shown.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert [row["target"] for row in report["rows"]] == ["lucene-9bit", "bmp"]
    for bad, message in (
        (["--target", "int4"], "unknown fidelity target int4"),
        (["--tolerance", "nan"], "tolerance must be a finite"),
    ):
        failed = cli("fidelity", model, "--data", data, *bad)
        assert failed.returncode == 2 and message in failed.stderr
    suite = cli("fidelity", model, "--data", "beir13")
    assert suite.returncode == 2 and "is a suite" in suite.stderr


def test_every_target_is_documented_in_the_module():
    for name in TARGETS:
        assert f"``{name}``" in (fidelity_module.__doc__ or "")


def test_onnx_int8_re_encodes_through_the_quantized_graph_only_when_named(encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    collection = load_collection(write_beir(tmp_path / "mini"))
    assert "onnx-int8" not in [target.name for target in fidelity_module.check_targets(None)]
    report = fidelity(encoder, collection, targets=["onnx-int8"], max_length=64, show_progress=False)
    (row,) = report.rows
    assert row["target"] == "onnx-int8" and row["queries"] == 4 and set(row["drift"]) == set(report.reference)
    assert all(abs(drift) < 0.5 for drift in row["drift"].values())  # the same model, 8-bit weights
