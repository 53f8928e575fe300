"""baselines.py: BM25 scored like a model (per-query values, self-hit rule, suites)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collection_files import write_beir
from spladekit.data.collections import load_collection
from spladekit.data.jsonl import Corpus
from spladekit.data.trec import Qrels
from spladekit.evaluation.baselines import evaluate_bm25, evaluate_bm25_data


def test_bm25_ranks_the_document_sharing_the_rare_terms_first(tmp_path):
    collection = load_collection(write_beir(tmp_path / "c"))
    result = evaluate_bm25(collection, k=10, run_path=tmp_path / "bm25.trec")
    assert set(result.per_query["nDCG@10"]) == set(collection.qrels)
    assert result.metrics["nDCG@10"] == pytest.approx(
        sum(result.per_query["nDCG@10"].values()) / len(result.per_query["nDCG@10"])
    )
    lines = (tmp_path / "bm25.trec").read_text().splitlines()
    assert lines and all(line.split()[5] == "spladekit-bm25" for line in lines)
    assert all(float(line.split()[4]) > 0 for line in lines)  # documents sharing no term are not retrieved


def test_bm25_drops_the_querys_own_document_where_the_collection_says_so():
    corpus = Corpus(["a", "b", "c"], ["red apple pie", "green apple tart", "blue sky"])
    queries = Corpus(["a", "b"], ["red apple pie", "green apple"])
    qrels: Qrels = {"a": {"b": 1}, "b": {"a": 1}}
    kept = evaluate_bm25(load_like(corpus, queries, qrels, drop=False), k=2)
    dropped = evaluate_bm25(load_like(corpus, queries, qrels, drop=True), k=2)
    assert dropped.provenance["self_hits_removed"] == 2 and kept.provenance["self_hits_removed"] is None
    assert dropped.metrics["nDCG@10"] == 1.0 > kept.metrics["nDCG@10"]  # the self-hit no longer takes rank 1


def load_like(corpus: Corpus, queries: Corpus, qrels: Qrels, drop: bool):
    from spladekit.data.collections import Collection

    return replace(Collection("toy", corpus, queries, qrels, measures=("nDCG@10",)), drop_self_hits=drop)


def test_bm25_on_data_resolves_a_folder_like_evaluate(tmp_path):
    result = evaluate_bm25_data(write_beir(tmp_path / "collection"), run_dir=None)
    # every judged query shares its words with its relevant documents only: BM25 ranks them first (an empty or
    # misordered run gives less)
    assert result.name == "collection" and result.metrics == {"nDCG@10": 1.0, "RR@10": 1.0, "R@1000": 1.0}
    assert sorted(result.per_query["nDCG@10"]) == ["q1", "q2", "q3", "q4"]
