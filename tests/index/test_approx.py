"""Seismic, BMP and PISA: recall@10 of exact search with the documented default parameters, and their folders."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.common.errors import SpladekitError
from spladekit.index import BmpSearcher, ExactSearcher, PisaSearcher, SeismicSearcher, load_index
from synthetic_sparse import zipf_matrix

BACKENDS = [SeismicSearcher, BmpSearcher, PisaSearcher]


@pytest.fixture(scope="module")
def collection():
    """3,000 documents (~55 active terms), 60 queries (~15), vocabulary 2,000, Zipf term frequencies."""
    return zipf_matrix(3000, 2000, 60, seed=11), zipf_matrix(60, 2000, 15, seed=12)


@pytest.fixture(scope="module")
def exact_top10(collection):
    documents, queries = collection
    return ExactSearcher.build(documents).search(queries, k=10).doc_indices


def recall_at_10(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f[f >= 0]) & set(e[e >= 0])) / (e >= 0).sum() for f, e in zip(found, exact)]))


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_recall_at_10_of_exact_with_default_parameters(backend, collection, exact_top10):
    documents, queries = collection
    result = backend.build(documents).search(queries, k=10)
    assert result.doc_indices.shape == (60, 10)
    assert recall_at_10(result.doc_indices, exact_top10) >= 0.95
    # scores are sorted best first within each query
    assert (np.diff(result.scores, axis=1) <= 0).all()


def test_aggressive_seismic_pruning_loses_recall(collection, exact_top10):
    """The recall assertion above can fail: heavy pruning measurably drops below it."""
    documents, queries = collection
    pruned = SeismicSearcher.build(documents, n_postings=20, summary_energy=0.1, query_cut=2, heap_factor=0.3)
    assert recall_at_10(pruned.search(queries, k=10).doc_indices, exact_top10) < 0.9


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_save_load_round_trip(backend, collection, tmp_path):
    documents, queries = collection
    searcher = backend.build(documents)
    searcher.save(tmp_path / "index")
    loaded = load_index(tmp_path / "index")
    assert type(loaded) is backend and loaded.vocab_size == 2000 and loaded.n_docs == 3000
    np.testing.assert_array_equal(loaded.search(queries, 10).doc_indices, searcher.search(queries, 10).doc_indices)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_queries_without_known_terms_get_no_hits(backend):
    documents = sp.csr_matrix(np.array([[1.0, 0, 0], [0, 2.0, 0]], dtype=np.float32))
    queries = sp.csr_matrix(np.array([[0, 0, 1.0], [0, 0, 0], [0, 1.0, 0]], dtype=np.float32))
    result = backend.build(documents).search(queries, k=2)
    assert result.doc_indices[:2].tolist() == [[-1, -1], [-1, -1]]
    assert result.doc_indices[2, 0] == 1


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_k_beyond_the_corpus_is_capped(backend):
    documents, queries = zipf_matrix(30, 40, 6, seed=21), zipf_matrix(4, 40, 4, seed=22)
    searcher = backend.build(documents)
    huge = searcher.search(queries, k=10**12)
    assert huge.doc_indices.shape == (4, 30)
    np.testing.assert_array_equal(huge.doc_indices, searcher.search(queries, k=30).doc_indices)


def test_bmp_refuses_vocabularies_over_65535():
    documents = sp.csr_matrix((np.ones(2, np.float32), ([0, 1], [3, 70_000])), shape=(2, 70_001))
    with pytest.raises(SpladekitError, match="16 bits.*70,001 terms is over 65,535"):
        BmpSearcher.build(documents)


def test_bmp_quantization_is_8_bit_and_overflow_safe():
    from spladekit.common.sparse import quantize
    from spladekit.index.bmp import overflow_safe_scale

    values = np.array([0.001, 0.5, 1.0, 2.0], dtype=np.float32)
    assert quantize(values, 255 / 2.0, minimum=1, dtype=np.int64).tolist() == [1, 64, 128, 255]
    light = sp.csr_matrix(np.array([[2.0, 0.5, 0], [0, 1.0, 1.0]], dtype=np.float32))
    assert overflow_safe_scale(light) == pytest.approx(255 / 2.0)  # 8 bits bind
    heavy = sp.csr_matrix(np.full((2, 400), 2.0, dtype=np.float32))  # L1 = 800: 16-bit scores bind
    scale = overflow_safe_scale(heavy)
    assert scale == pytest.approx((2047 - 400) / 800)
    assert quantize(heavy.data, scale, minimum=1).reshape(2, 400).sum(axis=1).max() * 32 <= 65_535


def test_bmp_long_queries_do_not_overflow():
    """60 active terms per document and query, flat weights: with plain 255-level impacts the top scores
    pass 65,535 and wrap (recall@10 ≈ 0); the overflow-safe scale keeps them in 16 bits."""
    documents = sp.random(500, 100, density=0.6, format="csr", dtype=np.float32, random_state=1)
    documents.data = 0.2 + 0.8 * documents.data
    queries = sp.random(20, 100, density=0.6, format="csr", dtype=np.float32, random_state=2)
    queries.data[:] = 1.0
    exact = ExactSearcher.build(documents).search(queries, k=10).doc_indices
    assert recall_at_10(BmpSearcher.build(documents).search(queries, k=10).doc_indices, exact) >= 0.9


def test_corrupt_seismic_file_is_named(collection, tmp_path):
    SeismicSearcher.build(collection[0][:200]).save(tmp_path / "index")
    target = tmp_path / "index" / "seismic.index.seismic"
    target.write_bytes(target.read_bytes()[:-10])
    with pytest.raises(SpladekitError, match=r"seismic\.index\.seismic: corrupt index file"):
        load_index(tmp_path / "index")


def test_bmp_survives_a_query_whose_blocks_all_tie():
    """bmp 0.2.8 panics when no block bound exceeds its threshold; spladekit retries with more results."""
    documents = sp.csr_matrix(np.ones((100, 3), dtype=np.float32))
    result = BmpSearcher.build(documents).search(sp.csr_matrix(np.array([[1.0, 0, 0]], dtype=np.float32)), k=10)
    assert result.doc_indices[0].tolist() == list(range(10))
