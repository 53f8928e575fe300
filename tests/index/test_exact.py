"""Exact search = brute force ``Q @ D.T`` (ties by lower row), and the index folder format."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.sparse import best_first
from spladekit.index import ExactSearcher, SeismicSearcher, build_index, load_index
from synthetic_sparse import zipf_matrix


def brute_force(queries: sp.csr_matrix, documents: sp.csr_matrix, k: int):
    """Dense float64 scores; order by (-score, row); documents with score 0 excluded; -1 padded."""
    scores = queries.toarray().astype(np.float64) @ documents.toarray().astype(np.float64).T
    indices = np.full((queries.shape[0], k), -1)
    for i, row in enumerate(scores):
        ranked = [d for d in sorted(range(len(row)), key=lambda d: (-row[d], d)) if row[d] > 0][:k]
        indices[i, : len(ranked)] = ranked
    return indices, scores


@st.composite
def sparse_problem(draw):
    vocab = draw(st.integers(1, 12))
    n_docs = draw(st.integers(1, 30))
    n_queries = draw(st.integers(1, 4))
    # weights on a 1/4 grid with many zeros: float32 sums are exact, so ties are real ties
    weights = st.sampled_from([0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0])
    docs = draw(arrays(np.float32, (n_docs, vocab), elements=weights))
    queries = draw(arrays(np.float32, (n_queries, vocab), elements=weights))
    k = draw(st.integers(1, n_docs + 3))
    return sp.csr_matrix(docs), sp.csr_matrix(queries), k


@settings(max_examples=150, deadline=None)
@given(sparse_problem())
def test_exact_equals_brute_force(problem):
    documents, queries, k = problem
    searcher = ExactSearcher.build(documents, query_batch=3)
    result = searcher.search(queries, k=k, num_threads=1)
    expected, scores = brute_force(queries, documents, k)
    expected = expected[:, : min(k, documents.shape[0])]  # no query has more hits than there are documents
    np.testing.assert_array_equal(result.doc_indices, expected)
    for i in range(len(expected)):
        hits = expected[i] >= 0
        np.testing.assert_allclose(result.scores[i][hits], scores[i][expected[i][hits]], rtol=1e-6)
        assert (result.scores[i][~hits] == 0).all()
    threaded = searcher.search(queries, k=k, num_threads=3)
    np.testing.assert_array_equal(threaded.doc_indices, result.doc_indices)
    np.testing.assert_array_equal(threaded.scores, result.scores)


@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("query_batch", [1, 4, 64])
def test_scores_are_scipys_float32_sums_bit_for_bit_at_any_thread_count(threads, query_batch):
    """The accumulator adds the terms in scipy's order, so each score is exactly ``(Q @ D.T)[q, d]``; ties
    (integer weights make many) are broken by lower row whatever the threads and blocks."""
    documents = zipf_matrix(700, 200, 30, seed=20)
    documents.data = np.ceil(documents.data * 2)  # few distinct sums: ties everywhere, also at the cut
    queries = zipf_matrix(37, 200, 8, seed=21)
    queries.data = np.ceil(queries.data)
    result = ExactSearcher.build(documents, query_batch=query_batch).search(queries, k=30, num_threads=threads)
    product = (queries @ documents.T).toarray()
    for i in range(queries.shape[0]):
        positive = np.flatnonzero(product[i] > 0)
        expected = positive[np.lexsort((positive, -product[i][positive]))][:30]
        np.testing.assert_array_equal(result.doc_indices[i][: len(expected)], expected)
        assert (result.doc_indices[i][len(expected) :] == -1).all()
        np.testing.assert_array_equal(result.scores[i][: len(expected)], product[i][expected])
    assert len(np.unique(product)) < 200  # the ties were there


def test_empty_queries_and_queries_sharing_no_term_get_no_hits():
    documents = sp.csr_matrix(np.array([[1.0, 0, 0], [0, 2.0, 0], [0.5, 0.5, 0]], dtype=np.float32))
    queries = sp.csr_matrix(np.array([[0, 0, 0], [0, 0, 3.0], [0, 1.0, 0], [0, 0, 0]], dtype=np.float32))
    for threads in (1, 2):
        result = ExactSearcher.build(documents, query_batch=1).search(queries, k=5, num_threads=threads)
        assert result.doc_indices.tolist() == [[-1, -1, -1], [-1, -1, -1], [1, 2, -1], [-1, -1, -1]]
        assert result.scores.tolist() == [[0, 0, 0], [0, 0, 0], [2.0, 0.5, 0], [0, 0, 0]]
    nothing = ExactSearcher.build(documents).search(sp.csr_matrix((0, 3), dtype=np.float32), k=2)
    assert nothing.doc_indices.shape == nothing.scores.shape == (0, 2)


def test_num_threads_is_a_search_parameter_saved_with_the_index(tmp_path):
    documents, queries = zipf_matrix(60, 40, 8, seed=22), zipf_matrix(9, 40, 4, seed=23)
    searcher = build_index(documents, "exact", num_threads="2")
    assert searcher.params == {"query_batch": 16, "num_threads": 2}
    searcher.save(tmp_path / "index")
    loaded = load_index(tmp_path / "index")
    assert loaded.params["num_threads"] == 2
    np.testing.assert_array_equal(
        loaded.search(queries, k=4, num_threads=1).doc_indices, searcher.search(queries, k=4).doc_indices
    )
    with pytest.raises(SpladekitError, match=r"exact parameter num_threads=-1: must be an integer >= 0"):
        searcher.search(queries, num_threads=-1)
    with pytest.raises(SpladekitError, match="exact does not take query_batch at search time"):
        searcher.search(queries, query_batch=2)


def test_exact_matches_scipy_product_on_zipf_data():
    documents, queries = zipf_matrix(500, 300, 40, seed=1), zipf_matrix(20, 300, 10, seed=2)
    result = build_index(documents, "exact").search(queries, k=25)
    product = (queries @ documents.T).toarray()
    for i in range(queries.shape[0]):
        expected = np.lexsort((np.arange(product.shape[1]), -product[i]))[:25]
        np.testing.assert_array_equal(result.doc_indices[i], expected)


def test_best_first_breaks_ties_by_row_even_at_the_cut():
    rows, scores = np.array([9, 4, 7, 1, 3]), np.array([1.0, 2.0, 1.0, 1.0, 0.5], dtype=np.float32)
    order = best_first(rows, scores, k=3)
    assert rows[order].tolist() == [4, 1, 7] and scores[order].tolist() == [2.0, 1.0, 1.0]
    assert rows[best_first(rows, scores)].tolist() == [4, 1, 7, 9, 3]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=1, max_size=20), st.integers(1, 25))
def test_best_first_equals_a_full_sort_by_score_then_key(values, k):
    """The partition shortcut above k entries gives exactly the first k of the full (-score, key) order."""
    scores = np.array(values, dtype=np.float32)
    keys = np.random.default_rng(len(values)).permutation(len(values))
    np.testing.assert_array_equal(best_first(keys, scores, k), np.lexsort((keys, -scores))[:k])


def test_negative_weights_and_vocabulary_mismatch_are_refused():
    with pytest.raises(SpladekitError, match="non-negative"):
        ExactSearcher.build(sp.csr_matrix(np.array([[1.0, -0.5]], dtype=np.float32)))
    searcher = ExactSearcher.build(zipf_matrix(10, 50, 5, seed=0))
    with pytest.raises(SpladekitError, match="vocabulary mismatch: queries have 60 dimensions.*50"):
        searcher.search(zipf_matrix(2, 60, 5, seed=1))


def test_save_load_round_trip_with_ids(tmp_path):
    documents, queries = zipf_matrix(200, 100, 20, seed=3), zipf_matrix(5, 100, 8, seed=4)
    searcher = ExactSearcher.build(documents)
    searcher.doc_ids = [f"d{i}" for i in range(200)]
    searcher.save(tmp_path / "index", meta={"model": "m"})
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert manifest["format"] == "spladekit-index" and manifest["format_version"] == 1
    assert set(manifest["files"]) == {"postings.npz", "ids.json"}
    loaded = load_index(tmp_path / "index")
    assert isinstance(loaded, ExactSearcher) and loaded.doc_ids == searcher.doc_ids
    np.testing.assert_array_equal(loaded.search(queries, 10).doc_indices, searcher.search(queries, 10).doc_indices)
    with pytest.raises(SpladekitError, match="already exists"):
        searcher.save(tmp_path / "index")


def test_corrupt_and_foreign_index_folders_are_named(tmp_path):
    ExactSearcher.build(zipf_matrix(50, 40, 8, seed=5)).save(tmp_path / "index")
    postings = tmp_path / "index" / "postings.npz"
    data = bytearray(postings.read_bytes())
    data[len(data) // 2] ^= 0xFF
    postings.write_bytes(bytes(data))
    with pytest.raises(SpladekitError, match=r"postings\.npz: corrupt index file"):
        load_index(tmp_path / "index")

    with pytest.raises(SpladekitError, match="not a spladekit index folder"):
        load_index(tmp_path)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(SpladekitError, match=r"foreign.manifest\.json: not a spladekit index manifest"):
        load_index(tmp_path / "foreign")
    (tmp_path / "foreign" / "manifest.json").write_text('{"format": "spladekit-index", "format_version": 99}')
    with pytest.raises(SpladekitError, match="version 99 is not supported"):
        load_index(tmp_path / "foreign")
    (tmp_path / "foreign" / "manifest.json").write_bytes(b"\x80garbage")
    with pytest.raises(SpladekitError, match="unreadable manifest"):
        load_index(tmp_path / "foreign")


def test_loading_with_the_wrong_backend_class_is_refused(tmp_path):
    ExactSearcher.build(zipf_matrix(20, 30, 5, seed=6)).save(tmp_path / "index")
    with pytest.raises(SpladekitError, match="this is a 'exact' index, not 'seismic'"):
        SeismicSearcher.load(tmp_path / "index")


def test_unknown_backend_or_parameter_is_a_clear_error():
    documents = zipf_matrix(10, 20, 4, seed=7)
    with pytest.raises(
        SpladekitError, match="unknown backend .faiss.; choose one of exact, seismic, bmp, pisa, anserini, qdrant"
    ):
        build_index(documents, "faiss")
    with pytest.raises(SpladekitError, match="seismic does not take bogus; it takes: n_postings"):
        build_index(documents, "seismic", bogus=1)


def test_search_in_batches_equals_one_search():
    documents, queries = zipf_matrix(300, 80, 15, seed=8), zipf_matrix(23, 80, 6, seed=9)
    searcher = ExactSearcher.build(documents)
    whole, batched = (
        searcher.search(queries, k=7),
        searcher.search_batches(queries, k=7, batch_size=5, show_progress=False),
    )
    np.testing.assert_array_equal(batched.doc_indices, whole.doc_indices)
    np.testing.assert_array_equal(batched.scores, whole.scores)


def _edit_manifest(folder, change):
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _garble_postings_and_its_checksum(manifest, folder):
    """A tampered folder whose manifest agrees with a garbled postings file: caught when it is read."""
    import hashlib

    (folder / "postings.npz").write_bytes(b"garbage" * 10)
    manifest["files"]["postings.npz"] = {"sha256": hashlib.sha256(b"garbage" * 10).hexdigest(), "bytes": 70}


MANIFEST_DAMAGES = {
    "empty file list": (
        lambda m, f: (m.update(files={}), (f / "ids.json").unlink()),
        "the manifest does not list postings.npz",
    ),
    "empty file list, ids present": (lambda m, f: m.update(files={}), "ids.json is not listed in the manifest"),
    "backend file unlisted": (lambda m, f: m["files"].pop("postings.npz"), "the manifest does not list postings.npz"),
    "ids unlisted": (lambda m, f: m["files"].pop("ids.json"), "ids.json is not listed in the manifest"),
    "files a list": (lambda m, f: m.update(files=["postings.npz"]), "'files' must be a JSON object, got a JSON list"),
    "bytes a string": (
        lambda m, f: m["files"]["postings.npz"].update(bytes="12"),
        "bytes must be a non-negative integer",
    ),
    "sha256 missing": (lambda m, f: m["files"]["postings.npz"].pop("sha256"), "sha256 must be 64 lowercase hex digits"),
    "file outside the folder": (lambda m, f: m["files"].update({"../x": m["files"]["ids.json"]}), "is not a file name"),
    "vocab_size a string": (lambda m, f: m.update(vocab_size="40"), "'vocab_size' must be an integer, got '40'"),
    "n_docs missing": (lambda m, f: m.pop("n_docs"), "no 'n_docs' in the manifest"),
    "params a list": (lambda m, f: m.update(params=[]), "'params' must be a JSON object"),
    "param of the wrong type": (
        lambda m, f: m["params"].update(query_batch="abc"),
        "stored parameters: exact parameter query_batch=abc",
    ),
    "garbled listed file": (
        _garble_postings_and_its_checksum,
        "corrupt or unreadable exact index (not in the expected format",
    ),
}


@pytest.mark.parametrize("damage", list(MANIFEST_DAMAGES))
def test_manifest_damage_is_refused_before_any_file_is_trusted(tmp_path, damage):
    searcher = ExactSearcher.build(zipf_matrix(50, 40, 8, seed=5))
    searcher.doc_ids = [f"d{i}" for i in range(50)]
    searcher.save(tmp_path / "index")
    spoil, message = MANIFEST_DAMAGES[damage]
    _edit_manifest(tmp_path / "index", lambda manifest: spoil(manifest, tmp_path / "index"))
    with pytest.raises(InputError, match=re.escape(message)) as error:
        load_index(tmp_path / "index")
    assert str(error.value).startswith(str(tmp_path / "index"))


def test_index_ids_must_be_ids_a_run_can_carry(tmp_path):
    searcher = ExactSearcher.build(zipf_matrix(3, 40, 8, seed=5))
    searcher.doc_ids = ["d1", "d 2", "d3"]
    searcher.save(tmp_path / "index")
    with pytest.raises(
        InputError, match=re.escape(f"{tmp_path / 'index' / 'ids.json'}: id #2 'd 2' contains whitespace")
    ):
        load_index(tmp_path / "index")


def test_k_larger_than_the_corpus_is_capped_at_the_number_of_documents():
    """``search --k 10**12`` used to allocate n_queries × 10¹² hit slots (terabytes); the hits are unchanged."""
    documents, queries = zipf_matrix(40, 30, 6, seed=10), zipf_matrix(5, 30, 4, seed=11)
    searcher = ExactSearcher.build(documents)
    huge = searcher.search(queries, k=10**12)
    everything = searcher.search(queries, k=40)
    assert huge.doc_indices.shape == huge.scores.shape == (5, 40)
    np.testing.assert_array_equal(huge.doc_indices, everything.doc_indices)
    np.testing.assert_array_equal(huge.scores, everything.scores)
    batched = searcher.search_batches(queries, k=10**12, batch_size=2, show_progress=False)
    np.testing.assert_array_equal(batched.doc_indices, everything.doc_indices)
    assert searcher.search(queries, k=7).doc_indices.shape == (5, 7)  # below the cap: k columns, as before


@pytest.mark.parametrize("k", [0, -3, 2.5, True, "10"])
def test_k_must_be_a_positive_integer(k):
    searcher = ExactSearcher.build(zipf_matrix(10, 20, 4, seed=12))
    with pytest.raises(SpladekitError, match=r"k must be an integer >= 1, got "):
        searcher.search(zipf_matrix(2, 20, 3, seed=13), k=k)


def test_cli_search_with_k_beyond_the_corpus_writes_every_hit(tmp_path, cli):

    from spladekit.evaluation.run import Run
    from spladekit.vectors.artifact import Vectors

    documents, queries = zipf_matrix(25, 30, 6, seed=14), zipf_matrix(3, 30, 4, seed=15)
    searcher = ExactSearcher.build(documents)
    searcher.doc_ids = [f"d{i}" for i in range(25)]
    searcher.save(tmp_path / "index")
    Vectors(queries, ["q0", "q1", "q2"]).save(tmp_path / "queries")
    result = cli(
        "search",
        tmp_path / "index",
        "--query-vectors",
        tmp_path / "queries",
        "--hits",
        10**12,
        "--output",
        tmp_path / "run.trec",
    )
    assert result.returncode == 0, result.stderr
    run = Run.read(tmp_path / "run.trec")
    product = (queries @ documents.T).toarray()
    assert {q: len(run.scores.get(q, {})) for q in ("q0", "q1", "q2")} == {
        f"q{i}": int((product[i] > 0).sum()) for i in range(3)
    }
