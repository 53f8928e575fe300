"""PISA: top-k equal to brute force over the quantized impacts (ties by row), streamed block builds, the index
folder, parameters, and the CLI (clean --json stdout despite PISA's native logging)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.common.atomic import OUTPUT_MARK
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.sparse import impact_scale, quantize
from spladekit.index import PisaSearcher, load_index, pisa
from spladekit.index.pisa import ALGORITHMS, _Postings
from spladekit.vectors.artifact import Vectors
from synthetic_sparse import assert_equals_brute_force, brute_force, coarse, zipf_matrix

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def tied():
    """400 documents and 30 queries over 120 terms with 3 and 2 weight levels: most top-10s end in a tie."""
    return coarse(zipf_matrix(400, 120, 12, seed=31), 3), coarse(zipf_matrix(30, 120, 5, seed=32), 2)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_top_k_equals_brute_force_over_quantized_impacts(algorithm, tied):
    documents, queries = tied
    searcher = PisaSearcher.build(documents, block_size=8)
    for k in (1, 10, 57):
        assert_equals_brute_force(searcher, documents, queries, k, algorithm=algorithm)


def test_scores_are_the_quantized_dot_product_over_scale_squared():
    documents = sp.csr_matrix(np.array([[0.304, 1.0, 0], [0, 0.5, 2.0]], dtype=np.float32))
    queries = sp.csr_matrix(np.array([[1.0, 0.25, 0.1]], dtype=np.float32))
    result = PisaSearcher.build(documents, scale=10).search(queries, k=2)
    # doc 0: 10·3 + 2·10 = 50; doc 1: 2·5 + 1·20 = 30 (round(2.5) = 2: round half to even)
    assert result.doc_indices.tolist() == [[0, 1]]
    np.testing.assert_allclose(result.scores, [[0.50, 0.30]])


def test_a_tie_at_the_kth_score_keeps_the_lowest_rows():
    """PISA's heap keeps an arbitrary subset of the documents tied at the k-th score (the raw top-10 below
    differs from brute force on most queries); spladekit asks again with more hits and orders by row."""
    documents = sp.random(2000, 50, density=0.05, format="csr", dtype=np.float32, random_state=3)
    queries = sp.random(30, 50, density=0.1, format="csr", dtype=np.float32, random_state=4)
    documents.data[:], queries.data[:] = 0.01, 0.01
    searcher = PisaSearcher.build(documents, scale=100)
    expected = brute_force(documents, queries, 100.0, 10)
    raw = searcher._retrieve(quantize(queries, 100.0), 10, "maxscore", 1)
    assert sum(sorted(rows.tolist()) != sorted(want) for (rows, _), (want, _) in zip(raw, expected)) >= 5
    assert_equals_brute_force(searcher, documents, queries, 10)
    flat = sp.csr_matrix(np.ones((300, 3), dtype=np.float32))
    only = PisaSearcher.build(flat).search(sp.csr_matrix(np.array([[1.0, 0, 0]], dtype=np.float32)), k=10)
    assert only.doc_indices.tolist() == [list(range(10))]


def test_build_from_blocks_streams_without_stacking(tied, monkeypatch):
    """Row blocks of uneven sizes (new terms appearing in later blocks), as a generator, merged 50 postings
    at a time: the index is the one-matrix index, and no whole-corpus matrix is stacked in Python."""
    documents, queries = tied
    whole = PisaSearcher.build(documents)
    monkeypatch.setattr(_Postings, "CHUNK", 50)

    def refuse(*args, **kwargs):
        raise AssertionError("stacked the blocks")

    monkeypatch.setattr(sp, "vstack", refuse)
    cuts = [0, 1, 57, 58, 200, 400]
    blocks = (documents[low:high] for low, high in zip(cuts, cuts[1:]))
    with pytest.raises(TypeError, match="reads the blocks twice"):  # a generator and no scale: cannot derive it
        PisaSearcher.build_from_blocks(iter([documents]))
    streamed = PisaSearcher.build_from_blocks(blocks, block_size=16, scale=whole.params["scale"])
    assert streamed.n_docs == 400 and streamed.vocab_size == 120
    np.testing.assert_array_equal(streamed.search(queries, k=20).doc_indices, whole.search(queries, k=20).doc_indices)
    assert_equals_brute_force(streamed, documents, queries, 20)
    monkeypatch.setattr(pisa, "BUILD_ROWS", 33)  # build() slices one matrix the same way
    np.testing.assert_array_equal(
        PisaSearcher.build(documents).search(queries, k=20).doc_indices, whole.search(queries, k=20).doc_indices
    )


def test_blocks_from_two_vocabularies_are_refused():
    with pytest.raises(SpladekitError, match="differ in vocabulary: 7 columns after 5"):
        PisaSearcher.build_from_blocks([zipf_matrix(4, 5, 2, seed=1), zipf_matrix(4, 7, 2, seed=2)])


def test_a_larger_scale_tracks_the_float_scores_closer():
    documents, queries = zipf_matrix(300, 200, 20, seed=41), zipf_matrix(10, 200, 6, seed=42)
    exact = (queries @ documents.T).toarray()

    def error(scale: float) -> float:
        result = PisaSearcher.build(documents, scale=scale).search(queries, k=5)
        return float(np.abs(result.scores - np.take_along_axis(exact, result.doc_indices, axis=1)).max())

    assert error(1000) < error(100) / 3 < error(10) / 9


def test_threads_and_encodings_do_not_change_the_result(tied):
    documents, queries = tied
    reference = PisaSearcher.build(documents).search(queries, k=10)
    for searcher, params in (
        (PisaSearcher.build(documents, encoding="ef"), {}),
        (PisaSearcher.build(documents, encoding="block_streamvbyte"), {"threads": 2}),
        (PisaSearcher.build(documents), {"threads": 0, "algorithm": "block_max_wand"}),
    ):
        result = searcher.search(queries, k=10, **params)
        np.testing.assert_array_equal(result.doc_indices, reference.doc_indices)
        np.testing.assert_array_equal(result.scores, reference.scores)


def test_documents_too_light_for_the_scale_are_refused_and_the_default_scale_fits_them():
    light = sp.csr_matrix(np.full((3, 4), 0.004, dtype=np.float32))
    with pytest.raises(
        SpladekitError, match=r"pisa index: 100\.0% of the 12 non-zero weights round to 0 at quantization scale 100 "
    ):
        PisaSearcher.build(light, scale=100)
    assert PisaSearcher.build(light, scale=1000).search(light[:1], k=3).doc_indices.tolist() == [[0, 1, 2]]
    derived = PisaSearcher.build(light)  # the default scale comes from the weights: 2048 / 0.004
    assert derived.params["scale"] == impact_scale(float(light.data.max())) == 511_000
    assert derived.search(light[:1], k=3).doc_indices.tolist() == [[0, 1, 2]]


@pytest.mark.parametrize(
    "rows, message, fitting",
    [
        # round(5e5 x 1e4) = 5e9 is past PISA's uint32 (refused before too, naming neither the document nor a scale)
        ([[1.0, 0, 0], [0, 5e5, 0]], r"^a pisa index: document row 1 has an impact of 5,000,000,000 ", 8580),
        # three impacts of 2e9 fit; their sum, PISA's document length, does not
        ([[1.0, 0, 0], [2e5, 2e5, 2e5]], r"^a pisa index: document row 1 has a length of 6,000,000,000 at scale", 7150),
    ],
    ids=["impact", "length"],
)
def test_impacts_pisa_cannot_hold_are_refused_naming_the_document_and_a_scale_that_fits(rows, message, fitting):
    documents = sp.csr_matrix(np.array(rows, dtype=np.float32))
    blocks = [documents[:1], documents[1:]]  # the document is named by its row across blocks
    with pytest.raises(SpladekitError, match=message) as error:
        PisaSearcher.build_from_blocks(blocks, scale=10_000)
    assert "over 4,294,967,295, the " in str(error.value)
    assert str(error.value).endswith(f"lower --param scale to {fitting} or less")
    with PisaSearcher.build_from_blocks(blocks, scale=fitting) as fits:
        query = sp.csr_matrix(np.array([[0.001, 0.001, 0]], dtype=np.float32))
        assert fits.search(query, k=2).doc_indices.tolist() == [[1, 0]]


def test_bad_parameters_are_refused_before_any_work(tied):
    for params in ({"scale": 0}, {"block_size": 0}, {"encoding": "zip"}, {"algorithm": "ranked_and"}):
        with pytest.raises(SpladekitError, match=f"^pisa parameter {next(iter(params))}="):
            PisaSearcher.build(None, **params)
    searcher = PisaSearcher.build(tied[0])
    with pytest.raises(SpladekitError, match="pisa parameter algorithm=bmw: must be one of 'maxscore', "):
        searcher.search(tied[1], algorithm="bmw")
    with pytest.raises(SpladekitError, match="pisa does not take scale at search time"):
        searcher.search(tied[1], scale=10)
    with pytest.raises(SpladekitError, match="vocabulary mismatch"):
        searcher.search(zipf_matrix(2, 99, 3, seed=5))
    with pytest.raises(SpladekitError, match="query weight x scale is over 65,536"):
        searcher.search(sp.csr_matrix(np.full((1, 120), 1000.0, dtype=np.float32)))


def test_index_folder_round_trip_lists_every_file(tied, tmp_path):
    documents, queries = tied
    searcher = PisaSearcher.build(
        documents, scale=200, block_size=32, encoding="block_optpfor", algorithm="block_max_wand"
    )
    searcher.save(tmp_path / "index")
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert manifest["params"]["scale"] == 200 and manifest["params"]["algorithm"] == "block_max_wand"
    assert set(manifest["files"]) == {
        "fwd.termlex",
        "fwd.doclex",
        "quantized.q0.bmw.32",
        "quantized.q0.bmw.32.block_optpfor",
    }
    assert sorted(os.listdir(tmp_path / "index")) == sorted([*manifest["files"], "manifest.json", OUTPUT_MARK])
    loaded = load_index(tmp_path / "index")
    assert type(loaded) is PisaSearcher and loaded.params == searcher.params
    for k in (3, 10):
        expected = searcher.search(queries, k=k)
        result = loaded.search(queries, k=k)
        np.testing.assert_array_equal(result.doc_indices, expected.doc_indices)
        np.testing.assert_array_equal(result.scores, expected.scores)
    assert_equals_brute_force(loaded, documents, queries, 10)
    loaded.save(tmp_path / "again")  # a loaded index saves its files again
    assert_equals_brute_force(load_index(tmp_path / "again"), documents, queries, 10)
    target = tmp_path / "index" / "quantized.q0.bmw.32.block_optpfor"
    target.write_bytes(target.read_bytes()[:-8])
    with pytest.raises(InputError, match=r"block_optpfor: corrupt index file"):
        load_index(tmp_path / "index")


def test_cli_index_and_search(tied, tmp_path, cli):
    documents, queries = tied
    Vectors(documents, [f"d{i}" for i in range(400)]).save(tmp_path / "vectors")
    Vectors(queries, [f"q{i}" for i in range(30)]).save(tmp_path / "queries")
    result = cli(
        "index", tmp_path / "vectors", "-o", tmp_path / "index", "--backend", "pisa", "--param", "scale=100", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["params"]["scale"] == 100
    result = cli(
        "search",
        tmp_path / "index",
        "--query-vectors",
        tmp_path / "queries",
        "--hits",
        "10",
        "--param",
        "algorithm=block_max_maxscore",
        "--output",
        tmp_path / "run.trec",
    )
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in (tmp_path / "run.trec").read_text().splitlines()]
    expected = brute_force(documents, queries, 100.0, 10)
    for i, (rows, values) in enumerate(expected):
        mine = [line for line in lines if line[0] == f"q{i}"]
        assert [line[2] for line in mine] == [f"d{row}" for row in rows]
        np.testing.assert_allclose([float(line[4]) for line in mine], values / 100.0**2, rtol=1e-6)


def test_native_logging_stays_off_stdout_and_stderr(tmp_path, capfd, caplog):
    """PISA's C++ code writes [info] lines and progress bars to file descriptors 1 and 2 (what ``capfd``
    sees): building, saving, loading and searching leave both empty and log the lines at debug level."""
    documents = zipf_matrix(50, 80, 8, seed=51)
    with caplog.at_level("DEBUG", logger="spladekit"):
        PisaSearcher.build(documents).save(tmp_path / "index")
        load_index(tmp_path / "index").search(documents[:3], k=5)
    assert capfd.readouterr() == ("", "")
    assert any("pisa: " in record.getMessage() for record in caplog.records)


def test_index_json_stdout_is_clean_in_a_separate_process(tmp_path):
    Vectors(zipf_matrix(50, 80, 8, seed=51), [f"d{i}" for i in range(50)]).save(tmp_path / "vectors")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "index",
            str(tmp_path / "vectors"),
            "-o",
            str(tmp_path / "index"),
            "--backend",
            "pisa",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["backend"] == "pisa"
    assert "[info]" not in done.stdout + done.stderr
