"""Approximate search with Seismic (``pyseismic-lsr``): pruned, clustered posting lists with summaries.

Parameters (Seismic's own names and defaults; declared in ``SeismicSearcher.declared_params``): the build
ones prune each posting list to about ``n_postings`` entries, split it into blocks and keep a summary of
each block; the search ones visit the posting lists of the ``query_cut`` heaviest query terms and skip a
block whose summary score is below ``heap_factor`` × the current k-th score (smaller: less pruning).
Documents are added by integer component id, so term v is Seismic component ``"v"`` and document row r is
id ``"r"``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import scipy.sparse as sp

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.sparse import best_first
from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.index.params import Param

INDEX_PREFIX = "seismic"
INDEX_FILE = f"{INDEX_PREFIX}.index.seismic"
PARAMS = (
    Param("n_postings", int, 3500, "postings kept per term on average (more: better recall, bigger index)", minimum=1),
    Param(
        "centroid_fraction",
        float,
        0.1,
        "blocks per posting list, as a fraction of n_postings",
        minimum=0,
        exclusive_minimum=True,
        maximum=1,
    ),
    Param("min_cluster_size", int, 2, "fewest documents in a block (smaller clusters are merged)", minimum=1),
    Param(
        "summary_energy",
        float,
        0.4,
        "fraction of a block's L1 mass its summary keeps",
        minimum=0,
        exclusive_minimum=True,
        maximum=1,
    ),
    Param(
        "max_fraction",
        float,
        1.5,
        "longest posting list, as a multiple of n_postings",
        minimum=0,
        exclusive_minimum=True,
    ),
    Param("doc_cut", int, 15, "heaviest document terms used to assign documents to blocks", minimum=1),
    Param("num_threads", int, 0, "threads for building and searching (0: all cores)", role="search", minimum=0),
    Param("query_cut", int, 20, "heaviest query terms whose posting lists are visited", role="search", minimum=1),
    Param(
        "heap_factor",
        float,
        0.7,
        "skip a block whose summary score is below heap_factor x the k-th score (smaller: less pruning; 0: none)",
        role="search",
        minimum=0,
    ),
)


def _seismic() -> ModuleType:
    """The ``seismic`` module of pyseismic-lsr, or one line naming what to install."""
    try:
        import seismic
    except ImportError:
        raise SpladekitError("the seismic backend needs pyseismic-lsr: pip install 'spladekit[index]'") from None
    return seismic


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
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
    summary = "approximate: pruned, clustered posting lists with summaries"
    declared_params = PARAMS

    def __init__(self, index: Any, vocab_size: int, n_docs: int, params: dict) -> None:
        self.index = index
        self.vocab_size = vocab_size
        self.n_docs = n_docs
        self.params = params

    @classmethod
    def check_prerequisites(cls, params: dict) -> None:
        _seismic()

    @classmethod
    def build(cls, documents: sp.csr_matrix, **params: Any) -> SeismicSearcher:
        seismic = _seismic()
        params = cls.defaults() | cls.check_params(params)
        documents = check_documents(documents)
        documents.sort_indices()
        dataset = seismic.SeismicDataset(dim=documents.shape[1])
        dataset.add_documents_by_id(
            [str(row) for row in range(documents.shape[0])],
            documents.indices.astype(np.int64),
            documents.data,
            documents.indptr.astype(np.int64),
        )
        with _stdout_to_stderr():
            index = seismic.SeismicIndex.build_from_dataset(
                dataset,
                num_threads=params["num_threads"],
                **{param.name: params[param.name] for param in PARAMS if param.role == "build"},
            )
        return cls(index, documents.shape[1], documents.shape[0], params)

    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """``params``: query_cut, heap_factor, num_threads (default: the index's)."""
        seismic = _seismic()
        settings = self.search_settings(params)
        k = self.result_size(k)
        queries = self.check_queries(queries)
        string = seismic.get_seismic_string()
        ids = np.array([str(i) for i in range(queries.shape[0])], dtype=string)
        components, values = [], []
        for i in range(queries.shape[0]):
            low, high = queries.indptr[i], queries.indptr[i + 1]
            components.append(queries.indices[low:high].astype(str).astype(string))
            values.append(queries.data[low:high].astype(np.float32))
        results = self.index.batch_search(
            ids,
            components,
            values,
            k=k,
            query_cut=settings["query_cut"],
            heap_factor=settings["heap_factor"],
            num_threads=settings["num_threads"],
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
    def stored_files(cls, params: dict) -> tuple[str, ...]:
        return (INDEX_FILE,)

    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> SeismicSearcher:
        seismic = _seismic()
        try:
            index = seismic.SeismicIndex.load(str(folder / INDEX_FILE))
        except OSError as error:
            raise InputError(f"cannot read the Seismic index ({error})", folder / INDEX_FILE) from None
        return cls(index, manifest["vocab_size"], manifest["n_docs"], cls.defaults() | manifest["params"])
