"""Milvus backend (embedded Milvus Lite): top-k equals the exact backend (ties by lower row); a server URI
that cannot be reached is one error line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import shared_path
from spladekit.common.errors import SpladekitError
from spladekit.index import ExactSearcher, load_index
from spladekit.index.store import read_manifest
from synthetic_sparse import zipf_matrix

pytest.importorskip("pymilvus", reason="pymilvus is not installed (pip install 'spladekit[milvus]')")
pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (pip install 'spladekit[milvus]')")
from spladekit.index.milvus import MilvusSearcher

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there, the connection is refused at once


def dyadic(rows: int, cols: int, density: float, seed: int) -> sp.csr_matrix:
    """Random sparse weights in multiples of 1/4: sums are exact, so equal scores are real ties."""
    matrix = sp.random(rows, cols, density=density, format="csr", random_state=seed, dtype=np.float32)
    matrix.data = np.ceil(matrix.data * 4) / 4
    return matrix


def test_top10_equals_exact_with_ties_broken_by_row():
    documents, queries = dyadic(400, 60, 0.08, seed=1), dyadic(40, 60, 0.08, seed=2)
    queries = sp.vstack([queries, sp.csr_matrix((1, 60), dtype=np.float32)]).tocsr()  # an empty query too
    searcher = MilvusSearcher.build(documents, show_progress=False, batch_size=150)  # 3 insert requests
    result = searcher.search(queries, k=10)
    expected = ExactSearcher.build(documents).search(queries, k=10)
    scores = expected.scores[expected.doc_indices >= 0]
    assert sum(len(set(row[row > 0])) < (row > 0).sum() for row in expected.scores) > 10  # ties at the cut
    assert len(scores) > 300
    np.testing.assert_array_equal(result.doc_indices, expected.doc_indices)
    np.testing.assert_allclose(result.scores, expected.scores, rtol=1e-6)
    assert (result.doc_indices[-1] == -1).all()
    searcher.close()
    assert searcher.folder is None  # Milvus Lite's scratch folder removed (kill -9: tests/common/test_scratch.py)


def test_zipf_collection_scores_allclose_and_rankings_equal_up_to_float_ties():
    """Gamma weights: Milvus Lite accumulates in float64, the exact backend in float32, so two documents
    whose scores differ by a rounding error may swap; everything else is identical."""
    documents, queries = zipf_matrix(600, 500, 40, seed=3), zipf_matrix(30, 500, 12, seed=4)
    searcher = MilvusSearcher.build(documents, show_progress=False)
    result = searcher.search(queries, k=20)
    expected = ExactSearcher.build(documents).search(queries, k=20)
    np.testing.assert_allclose(result.scores, expected.scores, rtol=1e-5)
    dense = (queries.astype(np.float64) @ documents.T.astype(np.float64)).toarray()
    swapped = result.doc_indices != expected.doc_indices
    for i, j in zip(*np.nonzero(swapped)):  # a different document only where the two scores are a float tie
        np.testing.assert_allclose(dense[i, result.doc_indices[i, j]], dense[i, expected.doc_indices[i, j]], rtol=1e-5)
    assert swapped.sum() < swapped.size / 100
    searcher.close()


def test_save_and_load_rebuilds_the_collection(tmp_path):
    documents, queries = dyadic(120, 40, 0.1, seed=5), dyadic(10, 40, 0.1, seed=6)
    ids = [f"doc{i}" for i in range(120)]
    searcher = MilvusSearcher.build(documents, doc_ids=ids, collection="c1", vector_field="v", show_progress=False)
    record = searcher.client.get(searcher.collection, ids=[3], output_fields=["doc_id"])[0]
    assert record["doc_id"] == "doc3"
    before = searcher.search(queries, k=5)
    searcher.save(tmp_path / "index")
    searcher.close()
    manifest = read_manifest(tmp_path / "index")
    assert manifest["backend"] == "milvus" and manifest["params"]["collection"] == "c1"
    assert sorted(manifest["files"]) == ["documents.npz", "ids.json"]  # no Milvus Lite database folder
    loaded = load_index(tmp_path / "index")
    assert loaded.doc_ids == ids
    np.testing.assert_array_equal(loaded.search(queries, k=5).doc_indices, before.doc_indices)
    loaded.close()


def test_refusals_are_one_line():
    searcher = MilvusSearcher.build(dyadic(10, 20, 0.3, seed=7), show_progress=False)
    with pytest.raises(SpladekitError, match="vocabulary mismatch"):
        searcher.search(dyadic(2, 21, 0.3, seed=8))
    with pytest.raises(SpladekitError, match="does not take drop_ratio_search at search time"):
        searcher.search(dyadic(2, 20, 0.3, seed=8), drop_ratio_search=0.2)
    with pytest.raises(SpladekitError, match="already exists"):
        searcher._create_collection(recreate=False, with_ids=False)
    searcher.close()
    with pytest.raises(SpladekitError, match="must be a Milvus server URL"):
        MilvusSearcher.build(dyadic(10, 20, 0.3, seed=7), uri="./local.db")


def test_unreachable_server_is_one_error_line(cli, tmp_path):
    from spladekit.vectors.artifact import Vectors

    Vectors(dyadic(20, 30, 0.2, seed=9), [f"d{i}" for i in range(20)], {"model": "x"}).save(tmp_path / "vectors")
    for backend, param in (("milvus", f"uri={UNREACHABLE}"), ("qdrant", f"url={UNREACHABLE}")):
        result = cli(
            "index",
            str(tmp_path / "vectors"),
            "--output",
            str(tmp_path / backend),
            "--backend",
            backend,
            "--param",
            param,
        )
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and UNREACHABLE in lines[0], result.stderr
        assert not (tmp_path / backend).exists()


def test_server_index_records_the_uri_but_never_the_token(tmp_path, monkeypatch):
    """Saved server index: params only (no documents file, no token), and loading it connects to the uri."""

    monkeypatch.setenv("MILVUS_TOKEN", "secret-token")
    searcher = MilvusSearcher.build(dyadic(10, 20, 0.3, seed=10), show_progress=False)
    searcher.params = searcher.params | {"uri": UNREACHABLE}  # as if built against that server
    searcher.documents = None
    searcher.save(tmp_path / "index")
    searcher.close()
    text = (tmp_path / "index" / "manifest.json").read_text()
    assert "secret-token" not in text and json.loads(text)["files"] == {}
    with pytest.raises(SpladekitError, match=f"Milvus at {UNREACHABLE}"):
        load_index(tmp_path / "index")


@pytest.mark.slow
@pytest.mark.realdata
def test_real_collection_top10_equals_exact():
    """splade-tiny on a slice of scifact (300 documents, 64 tokens, 15 queries): Milvus top-10 = exact top-10."""
    from spladekit.data import read_corpus
    from spladekit.model.encoder import SparseEncoder

    model = shared_path("models", "splade-tiny-msmarco")
    scifact = shared_path("data", "scifact")
    corpus = read_corpus(scifact / "corpus.jsonl")
    queries = [json.loads(line)["text"] for line in (scifact / "queries.jsonl").read_text().splitlines()[:15]]
    encoder = SparseEncoder.from_pretrained(model, max_length=64)
    documents = encoder.encode(corpus.texts[:300], batch_size=32, show_progress=False)
    query_vectors = encoder.encode(queries, show_progress=False)
    searcher = MilvusSearcher.build(documents, show_progress=False)
    result = searcher.search(query_vectors, k=10)
    expected = ExactSearcher.build(documents).search(query_vectors, k=10)
    assert (expected.doc_indices >= 0).all()
    np.testing.assert_array_equal(result.doc_indices, expected.doc_indices)
    np.testing.assert_allclose(result.scores, expected.scores, rtol=1e-5)
    searcher.close()


def _lite_folders(pid: int) -> set:
    import tempfile
    from pathlib import Path

    return set(Path(tempfile.gettempdir()).glob(f"spladekit-milvus-{pid}-*"))


def test_index_and_search_leave_no_milvus_lite_folder(tmp_path):
    """Today every Milvus Lite `index`/`search` left a spladekit-milvus-* database folder in the temp directory."""
    import subprocess
    import sys

    from spladekit.vectors.artifact import Vectors

    Vectors(dyadic(20, 30, 0.2, seed=9), [f"d{i}" for i in range(20)], {"model": "x"}).save(tmp_path / "vectors")
    Vectors(dyadic(3, 30, 0.2, seed=10), ["q1", "q2", "q3"], {"model": "x"}).save(tmp_path / "queries")
    script = (
        "import os, sys\n"
        "from spladekit.cli import main\n"
        "sys.argv = ['spladekit', *sys.argv[1:]]\n"
        "print(os.getpid(), file=sys.stderr)\n"
        "main()\n"
    )
    for arguments in (
        ["index", tmp_path / "vectors", "--backend", "milvus", "--output", tmp_path / "index"],
        ["search", tmp_path / "index", "--query-vectors", tmp_path / "queries", "--output", tmp_path / "run.trec"],
    ):
        done = subprocess.run([sys.executable, "-c", script, *map(str, arguments)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert _lite_folders(int(done.stderr.split()[0])) == set(), (arguments[0], done.stderr)
    assert {line.split()[0] for line in (tmp_path / "run.trec").read_text().splitlines()} == {"q1", "q2", "q3"}
