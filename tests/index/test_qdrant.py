"""Qdrant backend (embedded: Qdrant Edge, Qdrant's Rust engine in-process): top-k equals brute force Q @ D.T (ties by
lower row); uint8 storage and the IDF modifier change the scores as Qdrant documents."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import shared_path
from spladekit.common.errors import SpladekitError
from spladekit.evaluation.run import Run
from spladekit.index.store import read_manifest

pytest.importorskip("qdrant_edge")
from spladekit.index.qdrant import QdrantSearcher


def brute_force(queries: sp.csr_matrix, documents: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k: float64 dot products, score descending then lower row; only scores > 0; -1 padding."""
    scores = (queries.astype(np.float64) @ documents.astype(np.float64).T).toarray()
    indices = np.full((queries.shape[0], k), -1, dtype=np.int64)
    values = np.zeros((queries.shape[0], k))
    rows = np.arange(documents.shape[0])
    for i, row in enumerate(scores):
        order = [d for d in np.lexsort((rows, -row)) if row[d] > 0][:k]
        indices[i, : len(order)] = order
        values[i, : len(order)] = row[order]
    return indices, values


def dyadic(rows: int, cols: int, density: float, seed: int) -> sp.csr_matrix:
    """Random sparse weights in multiples of 1/4: sums are exact, so equal scores are real ties."""
    matrix = sp.random(rows, cols, density=density, format="csr", random_state=seed, dtype=np.float32)
    matrix.data = np.ceil(matrix.data * 4) / 4
    return matrix


def test_embedded_top10_equals_brute_force_with_ties():
    documents, queries = dyadic(400, 60, 0.08, seed=1), dyadic(40, 60, 0.08, seed=2)
    queries = sp.vstack([queries, sp.csr_matrix((1, 60), dtype=np.float32)]).tocsr()  # an empty query too
    searcher = QdrantSearcher.build(documents)
    result = searcher.search(queries, k=10)
    expected, scores = brute_force(queries, documents, 10)
    ties = sum(len(set(row[row > 0])) < (row > 0).sum() for row in scores)
    assert ties > 10  # the data really exercises tie-breaking at the cut
    np.testing.assert_array_equal(result.doc_indices, expected)
    np.testing.assert_allclose(result.scores, scores, rtol=1e-6)
    assert (result.doc_indices[-1] == -1).all()
    searcher.close()


def test_save_and_load_keeps_ids_and_results(tmp_path):
    documents, queries = dyadic(120, 40, 0.1, seed=3), dyadic(10, 40, 0.1, seed=4)
    ids = [f"doc{i}" for i in range(120)]
    searcher = QdrantSearcher.build(documents, doc_ids=ids, collection="c1", vector_name="v")
    before = searcher.search(queries, k=5)
    searcher.save(tmp_path / "index", meta={"note": "test"})
    searcher.close()
    manifest = read_manifest(tmp_path / "index")  # checksums verified; no pickle, no qdrant storage files
    assert manifest["backend"] == "qdrant" and manifest["params"]["collection"] == "c1"
    assert sorted(manifest["files"]) == ["documents.npz", "ids.json"]
    loaded = QdrantSearcher.read_files(tmp_path / "index", manifest)
    after = loaded.search(queries, k=5)
    np.testing.assert_array_equal(after.doc_indices, before.doc_indices)
    run = Run.from_hits([f"q{i}" for i in range(10)], ids, after.doc_indices, after.scores)
    assert all(doc.startswith("doc") for hits in run.scores.values() for doc in hits)
    loaded.close()


def test_payload_holds_doc_ids_and_a_shard_is_not_silently_replaced(tmp_path):
    documents = dyadic(10, 20, 0.3, seed=5)
    searcher = QdrantSearcher.build(documents, doc_ids=[f"d{i}" for i in range(10)], path=tmp_path / "qdrant")
    assert searcher.engine.payload(3) == {"doc_id": "d3"} and searcher.count() == 10
    searcher.close()
    with pytest.raises(SpladekitError, match="already exists .* recreate=True"):
        QdrantSearcher.build(documents, path=tmp_path / "qdrant")
    replaced = QdrantSearcher.build(documents[:4], path=tmp_path / "qdrant", recreate=True)
    assert replaced.count() == 4 and replaced.engine.folder == tmp_path / "qdrant"  # searched where it was put
    replaced.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["qdrant"]  # no staging, lock or old shard left


def test_the_scratch_shard_is_removed_on_close():
    """(What a killed build leaves is swept by the next: tests/common/test_scratch.py, for every engine.)"""
    import os

    searcher = QdrantSearcher.build(dyadic(10, 20, 0.3, seed=9))
    folder = searcher.folder.path
    assert folder.name.startswith(f"spladekit-qdrant-{os.getpid()}-") and (folder / "shard").is_dir()
    searcher.close()
    assert not folder.exists()


def test_uint8_storage_quantizes_the_document_weights():
    """Qdrant's uint8 sparse storage rounds each stored weight to one of 256 levels: the top-10 stays close to exact
    (weights spread over (0, 1]), the scores are no longer the float32 ones."""
    documents = sp.random(300, 80, density=0.1, format="csr", random_state=11, dtype=np.float32)
    queries = sp.random(30, 80, density=0.1, format="csr", random_state=12, dtype=np.float32)
    searcher = QdrantSearcher.build(documents, datatype="uint8")
    result = searcher.search(queries, k=10)
    searcher.close()
    expected, scores = brute_force(queries, documents, 10)
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(result.doc_indices, expected)])
    assert overlap > 0.8 and not np.allclose(result.scores, scores, rtol=1e-6)
    np.testing.assert_allclose(result.scores, scores, rtol=0.05)


def test_the_idf_modifier_weights_each_query_term_by_qdrants_idf():
    """modifier=idf: score = Σ_v q_v · idf(v) · d_v with idf(v) = ln(1 + (N − n_v + 0.5) / (n_v + 0.5)) (Qdrant's
    formula: n_v documents hold v, N documents hold any term; an empty document is not counted)."""
    documents, queries = dyadic(200, 50, 0.1, seed=13), dyadic(20, 50, 0.1, seed=14)
    searcher = QdrantSearcher.build(documents, modifier="idf")
    result = searcher.search(queries, k=10)
    searcher.close()
    n = np.diff(documents.tocsc().indptr)
    stored = np.count_nonzero(np.diff(documents.indptr))
    assert stored < documents.shape[0]  # the data has empty documents: N is not the row count
    idf = np.log(1 + (stored - n + 0.5) / (n + 0.5))
    expected, scores = brute_force(sp.csr_matrix(queries.multiply(idf[None, :])), documents, 10)
    np.testing.assert_allclose(result.scores, scores, rtol=1e-5)
    assert (result.doc_indices[:, :3] == expected[:, :3]).mean() > 0.9  # ties below may order differently


def test_vocabulary_mismatch_is_refused():
    searcher = QdrantSearcher.build(dyadic(10, 20, 0.3, seed=6))
    with pytest.raises(SpladekitError, match="vocabulary mismatch"):
        searcher.search(dyadic(2, 21, 0.3, seed=7))
    searcher.close()


def test_export_qdrant_writes_an_edge_shard(tmp_path):
    """export_qdrant(qdrant_path=…): a Qdrant Edge shard a Qdrant Edge user opens (the CLI's `export qdrant` became
    `index --backend qdrant`, whose folder holds the documents, not a shard)."""
    from spladekit.export import export_qdrant

    payload = export_qdrant(
        dyadic(50, 30, 0.2, seed=8), [f"d{i}" for i in range(50)], qdrant_path=tmp_path / "qdrant", collection="docs"
    )
    assert payload["points"] == 50 and payload["qdrant_path"] == str(tmp_path / "qdrant")
    from qdrant_edge import EdgeShard

    shard = EdgeShard.load(str(tmp_path / "qdrant"))  # what a Qdrant Edge user opens
    assert shard.info().points_count == 50
    shard.close()


def test_cli_export_qdrant_edge_writes_a_shard_and_refuses_to_replace_another(tmp_path):
    """`spladekit export qdrant-edge VECTORS -o SHARD`: the shard folder (what `--qdrant-path` wrote), refused over an
    existing folder without --overwrite, and over the user's own files even with it."""
    from qdrant_edge import EdgeShard
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.vectors.artifact import Vectors

    Vectors(dyadic(40, 30, 0.2, seed=3), [f"d{i}" for i in range(40)]).save(tmp_path / "vectors")
    runner = CliRunner()
    command = ["export", "qdrant-edge", str(tmp_path / "vectors"), "-o", str(tmp_path / "shard")]
    assert runner.invoke(app, command).exit_code == 0
    shard = EdgeShard.load(str(tmp_path / "shard"))
    assert shard.info().points_count == 40
    shard.close()
    again = runner.invoke(app, command)
    assert again.exit_code != 0 and "--overwrite" in str(again.exception)
    assert runner.invoke(app, [*command, "--overwrite"]).exit_code == 0  # spladekit wrote it: replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    refused = runner.invoke(app, [*command[:-1], str(tmp_path / "mine"), "--overwrite"])
    assert refused.exit_code != 0 and (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.slow
@pytest.mark.realdata
def test_real_collection_top10_equals_brute_force():
    """splade-tiny on a slice of scifact (300 documents, 64 tokens, 15 queries): Qdrant top-10 = exact top-10."""
    from spladekit.data import read_corpus
    from spladekit.model.encoder import SparseEncoder

    model = shared_path("models", "splade-tiny-msmarco")
    scifact = shared_path("data", "scifact")
    corpus = read_corpus(scifact / "corpus.jsonl")
    queries = [json.loads(line)["text"] for line in (scifact / "queries.jsonl").read_text().splitlines()[:15]]
    encoder = SparseEncoder.from_pretrained(model, max_length=64)
    documents = encoder.encode(corpus.texts[:300], batch_size=32, show_progress=False)
    query_vectors = encoder.encode(queries, show_progress=False)
    searcher = QdrantSearcher.build(documents)
    result = searcher.search(query_vectors, k=10)
    expected, scores = brute_force(query_vectors, documents, 10)
    assert (expected >= 0).all()
    np.testing.assert_array_equal(result.doc_indices, expected)
    np.testing.assert_allclose(result.scores, scores, rtol=1e-5)
    searcher.close()


# ------------------------------------------------------------------------------------------ qdrant_path
def export_shard(shard, recreate: bool = False) -> dict:
    from spladekit.export import export_qdrant

    return export_qdrant(
        dyadic(20, 30, 0.2, seed=8), [f"d{i}" for i in range(20)], qdrant_path=shard, recreate=recreate
    )


def user_folder(folder):
    """A folder of the user's: their notes, and (as an earlier spladekit wrote it there) a Qdrant Edge shard."""
    from qdrant_edge import EdgeConfig, EdgeShard, EdgeSparseVectorParams

    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    EdgeShard.create(str(folder), EdgeConfig(sparse_vectors={"splade": EdgeSparseVectorParams()})).close()
    return sorted(path.name for path in folder.iterdir())


@pytest.mark.parametrize("recreate", [False, True])
def test_a_qdrant_path_holding_the_users_files_is_refused_and_kept(tmp_path, recreate):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(SpladekitError, match="not a folder spladekit wrote" if recreate else "exists"):
        export_shard(mine, recreate)
    assert [path.name for path in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "mine"
    listed = user_folder(tmp_path / "shard-among-files")
    with pytest.raises(SpladekitError, match="spladekit wrote"):
        export_shard(tmp_path / "shard-among-files", recreate=True)
    assert sorted(path.name for path in (tmp_path / "shard-among-files").iterdir()) == listed
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine", "shard-among-files"]


@pytest.mark.parametrize("recreate", [False, True])
def test_the_working_folder_as_qdrant_path_is_refused(tmp_path, monkeypatch, recreate):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(SpladekitError, match="working folder"):
        export_shard(".", recreate)
    (work / "inner").mkdir()
    monkeypatch.chdir(work / "inner")
    with pytest.raises(SpladekitError, match="working folder"):
        export_shard("..", recreate)
    assert [path.name for path in work.iterdir()] == ["inner"] and list((work / "inner").iterdir()) == []


KILLED_BEFORE_THE_UPLOAD = """
import os, signal, sys
import numpy as np
import scipy.sparse as sp
from spladekit.export import export_qdrant
from spladekit.index import qdrant
qdrant._Edge.upsert = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
vectors = sp.random(20, 30, density=0.2, format="csr", random_state=8, dtype=np.float32)
export_qdrant(vectors, [f"d{i}" for i in range(20)], qdrant_path=sys.argv[1])
"""


def test_kill_9_before_the_upload_leaves_no_shard_and_the_rerun_works(tmp_path):
    import signal
    import subprocess
    import sys

    shard = tmp_path / "shard"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_BEFORE_THE_UPLOAD, str(shard)], capture_output=True, text=True
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not shard.exists()  # no empty shard that loads as if it were the export
    assert export_shard(shard)["points"] == 20
    assert sorted(path.name for path in tmp_path.iterdir()) == ["shard"]  # nothing beside it
