"""The one interface every search backend implements (exact, seismic, bmp, qdrant)."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp


@dataclass
class SearchResult:
    """Top-k per query: row i holds the document *row numbers* (int64, -1 = no hit) and their scores."""

    doc_indices: np.ndarray  # n_queries × k, int64
    scores: np.ndarray  # n_queries × k, float32

    def to_run(self, query_ids: list[str], doc_ids: list[str]) -> dict[str, dict[str, float]]:
        """As an ir_measures / TREC run: {query_id: {doc_id: score}} (missing hits dropped)."""
        return {
            qid: {doc_ids[d]: float(s) for d, s in zip(rows, scores) if d >= 0}
            for qid, rows, scores in zip(query_ids, self.doc_indices, self.scores)
        }


class Searcher(abc.ABC):
    """Built from a CSR document matrix (n_docs × V); searched with a CSR query matrix (n_queries × V)."""

    name: str

    @classmethod
    @abc.abstractmethod
    def build(cls, documents: sp.csr_matrix, **params) -> Searcher: ...

    @abc.abstractmethod
    def search(self, queries: sp.csr_matrix, k: int = 10) -> SearchResult: ...

    @abc.abstractmethod
    def save(self, path: str | Path) -> None: ...

    @classmethod
    @abc.abstractmethod
    def load(cls, path: str | Path) -> Searcher: ...
