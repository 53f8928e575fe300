"""Readers for the plain-data inputs of every stage (corpora, queries, triplets)."""

from spladekit.data.jsonl import Corpus, read_corpus, read_texts
from spladekit.data.triplets import Triplet, read_triplets

__all__ = ["Corpus", "Triplet", "read_corpus", "read_texts", "read_triplets"]
