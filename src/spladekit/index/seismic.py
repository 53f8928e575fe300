"""Approximate search with Seismic (``pyseismic-lsr``): pruned, clustered posting lists with summaries.

Build parameters (Seismic's own names and defaults): ``n_postings`` (posting-list length kept per term
on average; the index is exact-ish when it exceeds the collection size), ``centroid_fraction`` (blocks
per list as a fraction of its length), ``min_cluster_size``, ``summary_energy`` (fraction of a block's
L1 mass its summary keeps), ``max_fraction``, ``doc_cut``. Search parameters: ``query_cut`` (only the
heaviest query terms are used), ``heap_factor`` (a block is skipped when its summary score is below
``heap_factor`` × the current k-th score; 1.0 = least pruning). Documents are added by integer
component id, so term v is Seismic component ``"v"`` and document row r is id ``"r"``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.errors import InputError
from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.vectors_ops import best_first

INDEX_PREFIX = "seismic"
INDEX_FILE = f"{INDEX_PREFIX}.index.seismic"
BUILD_DEFAULTS = {"n_postings": 3500, "centroid_fraction": 0.1, "min_cluster_size": 2,
                  "summary_energy": 0.4, "max_fraction": 1.5, "doc_cut": 15}
SEARCH_DEFAULTS = {"query_cut": 20, "heap_factor": 0.7}


@contextlib.contextmanager
def _stdout_to_stderr():
    """Seismic prints progress on the process's stdout; keep stdout clean for --json output."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


class SeismicSearcher(Searcher):
    name = "seismic"
    build_params = (*BUILD_DEFAULTS, *SEARCH_DEFAULTS, "num_threads")
    search_params = tuple(SEARCH_DEFAULTS)

    def __init__(self, index, vocab_size: int, n_docs: int, params: dict, num_threads: int = 0):
        self.index = index
        self.vocab_size = vocab_size
        self.n_docs = n_docs
        self.params = params
        self.num_threads = num_threads

    @classmethod
    def build(cls, documents: sp.csr_matrix, num_threads: int = 0, **params) -> SeismicSearcher:
        import seismic

        params = BUILD_DEFAULTS | SEARCH_DEFAULTS | params
        documents = check_documents(documents)
        documents.sort_indices()
        dataset = seismic.SeismicDataset(dim=documents.shape[1])
        dataset.add_documents_by_id([str(row) for row in range(documents.shape[0])],
                                    documents.indices.astype(np.int64), documents.data,
                                    documents.indptr.astype(np.int64))
        with _stdout_to_stderr():
            index = seismic.SeismicIndex.build_from_dataset(
                dataset, num_threads=num_threads, **{name: params[name] for name in BUILD_DEFAULTS}
            )
        return cls(index, documents.shape[1], documents.shape[0], params, num_threads)

    def search(self, queries: sp.csr_matrix, k: int = 10, query_cut: int | None = None,
               heap_factor: float | None = None) -> SearchResult:
        import seismic

        queries = self.check_queries(queries)
        string = seismic.get_seismic_string()
        ids = np.array([str(i) for i in range(queries.shape[0])], dtype=string)
        components, values = [], []
        for i in range(queries.shape[0]):
            low, high = queries.indptr[i], queries.indptr[i + 1]
            components.append(queries.indices[low:high].astype(str).astype(string))
            values.append(queries.data[low:high].astype(np.float32))
        results = self.index.batch_search(
            ids, components, values, k=k,
            query_cut=query_cut or self.params["query_cut"],
            heap_factor=heap_factor or self.params["heap_factor"],
            num_threads=self.num_threads,
        )
        hits = [(np.empty(0, np.int64), np.empty(0, np.float32))] * queries.shape[0]
        for found in results:  # each hit is (query id, score, document id); lists may come in any order
            if not found:
                continue
            rows = np.array([int(doc) for _, _, doc in found], dtype=np.int64)
            scores = np.array([score for _, score, _ in found], dtype=np.float32)
            order = best_first(rows, scores)
            hits[int(found[0][0])] = (rows[order], scores[order])
        return SearchResult.from_hits(hits, k)

    def write_files(self, folder: Path) -> None:
        with _stdout_to_stderr():
            self.index.save(str(folder / INDEX_PREFIX))

    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> SeismicSearcher:
        import seismic

        try:
            index = seismic.SeismicIndex.load(str(folder / INDEX_FILE))
        except OSError as error:
            raise InputError(f"cannot read the Seismic index ({error})", folder / INDEX_FILE) from None
        return cls(index, manifest["vocab_size"], manifest["n_docs"], manifest["params"])
