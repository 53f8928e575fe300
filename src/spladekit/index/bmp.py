"""Block-Max Pruning (``bmp`` package): documents in blocks of ``bsize`` rows, block upper bounds, 8-bit
quantized impacts.

Quantization. bmp 0.2.8 rescales every query so that its largest weight is 32 (``ceil``) and keeps
scores in 16 bits: a score above 65,535 wraps around and scrambles the ranking (SPLADE documents with
a few hundred active terms do reach it). A document weight w therefore becomes
``max(1, round(w · s))`` with ``s = min(255 / w_max, (2047 − nnz_max) / L1_max)``: at most 255 levels
(8 bits), and small enough that every document's quantized L1 mass is ≤ 2047 = 65,535 / 32, so no
query can overflow (``w_max``, ``nnz_max``, ``L1_max``: largest weight, active terms and L1 norm of
any document). Returned scores are on BMP's integer scale, comparable within a query only. BMP stores
term ids in 16 bits, so vocabularies above 65,535 terms are refused, and documents with 2,047 or more
active terms cannot be made overflow-safe (refused too). Parameters: see ``BmpSearcher.declared_params``;
``bsize`` is at most 256 because BMP stores a document's position within its block in 8 bits (larger
blocks silently score the wrong documents).

Sentinel: bmp 0.2.8 visits candidate blocks by decreasing upper bound but never scores the last one
(with a single candidate block, e.g. a collection smaller than ``bsize``, a query gets no results). We
therefore pad the collection to a multiple of ``bsize`` with empty documents and append one sentinel
document holding only a private term; every query carries that term with weight 1 and asks for
k + 1 results, so the sentinel block is the last candidate (lowest bound, highest block number) and
every real block is scored. Sentinel and padding documents are removed from the results.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.scratch import Scratch, scratch_folder
from spladekit.common.sparse import best_first, quantize
from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.index.params import Param

logger = logging.getLogger("spladekit")

INDEX_FILE = "index.bmp"
TERMS_FILE = "terms.npy"  # bool mask of the vocabulary ids that have postings
MAX_VOCAB = 65_535
LEVELS = 255
QUERY_MAX = 32  # bmp rescales each query so that its largest weight is 32
SCORE_MAX = 65_535  # bmp keeps scores in 16 bits
SENTINEL = "sentinel"
PARAMS = (
    Param(
        "bsize",
        int,
        32,
        "documents per block (BMP keeps a document's position in its block in 8 bits)",
        minimum=1,
        maximum=256,
    ),
    Param("compress_range", bool, False, "store the block upper bounds compressed (smaller index)"),
    Param(
        "alpha",
        float,
        1.0,
        "stop when the k-th score exceeds alpha x the best remaining block bound "
        "(1: safe; smaller: faster, approximate)",
        role="search",
        minimum=0,
        exclusive_minimum=True,
        maximum=1,
    ),
    Param(
        "beta",
        float,
        1.0,
        "fraction of the query terms kept, heaviest first (1: all)",
        role="search",
        minimum=0,
        exclusive_minimum=True,
        maximum=1,
    ),
)


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the duration (Rust panics print there directly)."""
    saved = os.dup(2)
    with open(os.devnull, "w") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _bmp() -> ModuleType:
    """The ``bmp`` module, or one line naming what to install."""
    try:
        import bmp
    except ImportError:
        raise SpladekitError("the bmp backend needs bmp: pip install 'spladekit[index]'") from None
    return bmp


def overflow_safe_scale(documents: sp.csr_matrix) -> float:
    """``min(255 / w_max, (2047 − nnz_max) / L1_max)``: 8 bits, and no query score above 65,535."""
    budget = SCORE_MAX // QUERY_MAX - int(np.diff(documents.indptr).max())
    if budget <= 0:
        raise SpladekitError(
            f"BMP keeps scores in 16 bits: documents with {SCORE_MAX // QUERY_MAX:,} or more "
            "active terms would overflow; prune the vectors or use the exact or seismic backend"
        )
    l1_max = float(np.asarray(documents.sum(axis=1)).max())
    return min(LEVELS / float(documents.data.max()), budget / l1_max)


class BmpSearcher(Searcher):
    name = "bmp"
    summary = "block-max pruning, 8-bit impacts, vocabulary <= 65,535"
    declared_params = PARAMS

    def __init__(
        self,
        path: Path,
        vocab_size: int,
        n_docs: int,
        params: dict,
        terms: np.ndarray,
        staging: Scratch | None = None,
    ) -> None:
        bmp = _bmp()
        self._staging = staging  # a freshly built index file lives here as long as the searcher
        self.path = path
        self.searcher = bmp.Searcher(str(path))
        self.vocab_size = vocab_size
        self.n_docs = n_docs
        self.params = params
        self.terms = terms  # bool mask of terms that have postings (BMP cannot take unknown terms)

    @classmethod
    def check_prerequisites(cls, params: dict) -> None:
        _bmp()

    @classmethod
    def build(cls, documents: sp.csr_matrix, show_progress: bool = False, **params: Any) -> BmpSearcher:
        _bmp()  # not installed: said before any work
        params = cls.defaults() | cls.check_params(params)
        if documents.shape[1] > MAX_VOCAB:
            raise SpladekitError(
                f"BMP stores term ids in 16 bits: a vocabulary of {documents.shape[1]:,} terms is over "
                f"{MAX_VOCAB:,}; use the exact or seismic backend"
            )
        documents = check_documents(documents)
        if documents.nnz == 0:
            raise SpladekitError("cannot build a BMP index: every document vector is empty")
        params["scale"] = overflow_safe_scale(documents)
        impacts = quantize(documents.data, params["scale"], minimum=1, dtype=np.int64)
        staging = scratch_folder("bmp")  # the index file: removed with the searcher
        try:
            return cls._index(documents, impacts, staging, params, show_progress)
        except BaseException:
            staging.cleanup()
            raise

    @classmethod
    def _index(
        cls, documents: sp.csr_matrix, impacts: np.ndarray, staging: Scratch, params: dict, show_progress: bool
    ) -> BmpSearcher:
        """The searcher of BMP's index of ``documents`` (weights quantized to ``impacts``), written in ``staging``
        (which it then holds)."""
        bmp = _bmp()
        path = staging.path / INDEX_FILE
        indexer = bmp.Indexer(str(path), bsize=params["bsize"], compress_range=params["compress_range"])
        for row in tqdm(
            range(documents.shape[0]), desc="bmp index", unit="doc", disable=not show_progress, leave=False
        ):
            low, high = documents.indptr[row], documents.indptr[row + 1]
            indexer.add_document(
                str(row), dict(zip(documents.indices[low:high].astype(str).tolist(), impacts[low:high].tolist()))
            )
        for row in range(documents.shape[0], -(-documents.shape[0] // params["bsize"]) * params["bsize"]):
            indexer.add_document(f"pad{row}", {})
        indexer.add_document(SENTINEL, {SENTINEL: 1})
        indexer.finish()
        terms = np.zeros(documents.shape[1], dtype=bool)
        terms[documents.indices] = True
        return cls(path, documents.shape[1], documents.shape[0], params, terms, staging)

    def _search_one(
        self, indices: np.ndarray, values: np.ndarray, k: int, alpha: float, beta: float
    ) -> tuple[np.ndarray, np.ndarray]:
        known = self.terms[indices]
        indices, values = indices[known], values[known]
        if len(indices) == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        query = dict(
            zip(
                indices.astype(str).tolist(),
                quantize(values, LEVELS / values.max(), minimum=1, dtype=np.int64).tolist(),
            )
        )
        query[SENTINEL] = 1
        docs, found = self._bmp_search(query, k + 1, alpha, beta)
        real = [i for i, doc in enumerate(docs) if doc.isdigit()]
        rows = np.array([int(docs[i]) for i in real], dtype=np.int64)
        scores = np.array([found[i] for i in real], dtype=np.float32)
        order = best_first(rows, scores, k)
        return rows[order], scores[order]

    def _bmp_search(self, query: dict, k: int, alpha: float, beta: float) -> tuple[list[str], list[float]]:
        """BMP panics (``Option::unwrap`` on ``None``) when no block bound exceeds its initial threshold
        (max over query terms of the k-th posting weight × query weight), e.g. when every block ties at
        it. Asking for more results lowers that threshold, so we retry with 2k, 4k… (silencing the
        panic's stderr report); past the collection size the query gets no results and a warning."""
        wanted = k
        while True:
            try:
                with _stderr_silenced():
                    return self.searcher.search(query, k=wanted, alpha=alpha, beta=beta)
            except BaseException as error:  # pyo3's PanicException derives from BaseException
                if type(error).__name__ != "PanicException":
                    raise
                if wanted > self.n_docs + 2 * self.params["bsize"]:
                    logger.warning("bmp failed on one query (%s); it gets no results", error)
                    return [], []
                wanted *= 2

    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """``params``: alpha, beta (default: the index's)."""
        settings = self.search_settings(params)
        k = self.result_size(k)
        queries = self.check_queries(queries)
        hits = [
            self._search_one(
                queries.indices[queries.indptr[i] : queries.indptr[i + 1]],
                queries.data[queries.indptr[i] : queries.indptr[i + 1]],
                k,
                settings["alpha"],
                settings["beta"],
            )
            for i in range(queries.shape[0])
        ]
        return SearchResult.from_hits(hits, k)

    def write_files(self, folder: Path) -> None:
        shutil.copyfile(self.path, folder / INDEX_FILE)
        np.save(folder / TERMS_FILE, self.terms, allow_pickle=False)

    @classmethod
    def stored_files(cls, params: dict) -> tuple[str, ...]:
        return (INDEX_FILE, TERMS_FILE)

    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> BmpSearcher:
        terms = np.load(folder / TERMS_FILE, allow_pickle=False)
        if terms.shape != (manifest["vocab_size"],):
            raise InputError("term mask does not match the manifest's vocabulary size", folder / TERMS_FILE)
        return cls(folder / INDEX_FILE, manifest["vocab_size"], manifest["n_docs"], manifest["params"], terms)
