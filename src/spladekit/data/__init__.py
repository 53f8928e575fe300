"""Readers for the plain-data inputs of every stage (corpora, queries, triplets, qrels, collections, suites,
training sets, teacher scores) and the built-in sample pairs. May import: ``common``."""

from spladekit.data.collections import Collection, load_collection, reconcile
from spladekit.data.jsonl import Corpus, corpus_from_records, read_corpus, read_texts
from spladekit.data.suites import SUITES, load_suite
from spladekit.data.trec import read_qrels
from spladekit.data.triplets import Triplet, read_triplets

__all__ = [
    "SUITES",
    "Collection",
    "Corpus",
    "Triplet",
    "corpus_from_records",
    "load_collection",
    "load_suite",
    "read_corpus",
    "read_qrels",
    "read_texts",
    "read_triplets",
    "reconcile",
]
