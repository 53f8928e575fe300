"""evaluate --dry-run: counts without reading a corpus, a short measurement, proportional extrapolation,
vector disk equal to what Vectors.save writes, and nothing written (no output, no cache)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from collection_files import DOCS, QRELS, write_beir
from spladekit.common.errors import SpladekitError
from spladekit.data.collections import load_collection
from spladekit.evaluation.cost import (
    EncodingSample,
    Workload,
    _member_row,
    estimate_evaluation,
    estimate_table,
    fit_costs,
    synthetic_corpus,
    vector_bytes,
    workloads,
)
from spladekit.model.loading import load_model
from spladekit.vectors.artifact import Vectors


def files_under(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*")} if folder.exists() else set()


def test_local_counts_are_the_collections_documents_and_judged_queries(tmp_path):
    folder = write_beir(tmp_path / "beir")
    (workload,) = workloads(str(folder))
    collection = load_collection(folder)
    assert (
        (workload.documents, workload.queries)
        == (len(DOCS), len(QRELS))
        == (len(collection.corpus), len(collection.qrels))
    )
    assert workload.corpus_file == folder / "corpus.jsonl"


def test_suite_members_come_from_data_root_and_a_missing_member_is_an_error(tmp_path):
    with pytest.raises(SpladekitError, match="needs a folder 'arguana'"):
        workloads("beir13", data_root=tmp_path)
    for member in ("msmarco-dev",):
        write_beir(tmp_path / member)
    (workload,) = workloads("msmarco-dev", data_root=tmp_path)
    assert workload.name == "msmarco-dev" and workload.documents == len(DOCS)


def test_remote_counts_come_from_ir_datasets_metadata_and_hf_ids_are_unknown():
    pytest.importorskip("ir_datasets")
    (scifact,) = workloads("beir/scifact/test")
    assert (scifact.documents, scifact.queries) == (5183, 300)  # BEIR's published SciFact test counts
    members = workloads("msmarco-dev")
    assert [(m.documents, m.queries) for m in members] == [(8841823, 6980)]
    (nano,) = workloads("zeta-alpha-ai/NanoSciFact")
    assert nano.documents is None and "unknown" in nano.counted_from


def test_vector_bytes_is_what_vectors_save_writes(tmp_path):
    matrix = sp.random(300, 1000, density=0.05, format="csr", random_state=0, dtype=np.float32)
    ids = [f"doc{row:05d}" for row in range(300)]  # 8 characters each
    Vectors(matrix, ids, {}).save(tmp_path / "v")
    written = sum(path.stat().st_size for path in (tmp_path / "v").iterdir() if path.name != "meta.json")
    estimated = vector_bytes(300, matrix.nnz / 300, id_chars=8)
    assert abs(estimated - written) / written < 0.05, (estimated, written)  # npz headers aside


def test_synthetic_corpus_is_shaped_like_the_sample():
    sample = sp.random(64, 500, density=0.1, format="csr", random_state=1, dtype=np.float32)
    corpus = synthetic_corpus(sample, 2000)
    assert corpus.shape == (2000, 500)
    mean = corpus.getnnz(axis=1).mean()
    assert 0.8 * 50 < mean <= 1.1 * 50  # ~ the sample's 50 per row, fewer where a term was drawn twice
    assert set(np.unique(corpus.data)) <= set(np.unique(sample.data))
    corpus.check_format(full_check=True)


def test_costs_are_fixed_plus_per_posting_through_the_two_builds():
    sample = EncodingSample(
        "s",
        documents_per_second=100.0,
        queries_per_second=1000.0,
        documents=sp.csr_matrix(np.ones((4, 10), dtype=np.float32)),  # 10 nnz per document
        queries=sp.csr_matrix(np.ones((2, 10), dtype=np.float32)),
    )
    small = {"postings": 1000.0, "build_seconds": 3.0, "index_bytes": 1000.0, "search_seconds_per_query": 0.01}
    large = {"postings": 4000.0, "build_seconds": 6.0, "index_bytes": 4000.0, "search_seconds_per_query": 0.04}
    fitted = fit_costs(small, large)
    assert fitted["build_seconds"] == pytest.approx((2.0, 0.001))  # a fixed part, then 1 ms per 1000 postings
    assert fitted["index_bytes"] == pytest.approx((0.0, 1.0))  # proportional: no fixed part
    row = _member_row(Workload("a", 1000, 50, "test"), sample, fitted)  # 10,000 postings
    assert row["encode_docs_seconds"] == 10.0 and row["encode_queries_seconds"] == 0.1
    assert row["index_seconds"] == pytest.approx(12.0) and row["index_bytes"] == 10_000
    assert row["search_seconds"] == pytest.approx(50 * 0.1)
    noisy = fit_costs(small, large | {"build_seconds": 2.0})  # the larger build measured faster
    assert noisy["build_seconds"] == (2.0, 0.0)
    assert not _member_row(Workload("b", None, None, "unknown"), sample, fitted)["estimated"]


def test_estimate_on_a_tiny_model_writes_nothing(tmp_path, tiny_model_dirs, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    folder = write_beir(tmp_path / "beir")
    before = files_under(tmp_path)
    scratch_before = set(Path(tempfile.gettempdir()).glob("spladekit-dry-run-*"))
    encoder = load_model(str(tiny_model_dirs["bert"]))
    estimate = estimate_evaluation(encoder, str(folder), sample=4, synthetic_docs=50, k=5)
    assert files_under(tmp_path) == before
    assert set(Path(tempfile.gettempdir()).glob("spladekit-dry-run-*")) == scratch_before
    (row,) = estimate["members"]
    assert row["estimated"] and (row["documents"], row["queries"]) == (len(DOCS), len(QRELS))
    parts = ("encode_docs_seconds", "encode_queries_seconds", "index_seconds", "search_seconds")
    assert row["total_seconds"] == pytest.approx(sum(row[key] for key in parts), abs=0.25)  # each rounded to 0.1 s
    assert row["vectors_bytes"] > 0 and row["index_bytes"] > 0
    assert estimate["total"]["documents"] == len(DOCS) and estimate["estimate_covers"] == "1/1"
    assert "first 4 documents" in row["sample"] and "beir" in estimate_table(estimate)


def test_cli_dry_run_json_and_refuses_outputs(cli, tmp_path, tiny_model_dirs, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    folder = write_beir(tmp_path / "beir")
    model = tiny_model_dirs["bert"]
    result = cli(
        "evaluate",
        model,
        "--data",
        folder,
        "--dry-run",
        "--dry-run-sample",
        "4",
        "--dry-run-index-docs",
        "50",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["members"][0]["documents"] == len(DOCS) and payload["backend"] == "exact"
    assert not (tmp_path / "cache").exists()
    refused = cli("evaluate", model, "--data", folder, "--dry-run", "--json-out", tmp_path / "out.json")
    assert refused.returncode == 2 and "--dry-run writes nothing" in refused.stderr
    assert not (tmp_path / "out.json").exists()
