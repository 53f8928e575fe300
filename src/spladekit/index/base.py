"""The one interface every search backend implements (exact, seismic, bmp, pisa, anserini, qdrant, milvus)."""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from spladekit.common.atomic import atomic_directory
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import read_id_list, reading
from spladekit.common.scratch import Scratch
from spladekit.common.sparse import IMPACT_LEVELS, impact_scale, max_weight
from spladekit.index.params import Param, check_values
from spladekit.index.store import IDS_FILE, MANIFEST, read_manifest, write_manifest


class Restartable:
    """An iterable whose every iteration calls ``start()`` afresh (a generator function over a vectors folder):
    what a builder that reads its blocks twice (:func:`resolve_impact_scale`) needs."""

    def __init__(self, start: Callable[[], Iterator[sp.csr_matrix]]):
        self.start = start

    def __iter__(self) -> Iterator[sp.csr_matrix]:
        return self.start()


def resolve_impact_scale(params: dict, blocks: Iterable[sp.csr_matrix]) -> dict:
    """``params`` with ``scale`` set: as given, or (unset) derived from the documents' largest weight by
    :func:`spladekit.common.sparse.impact_scale`, in a first pass over the blocks, so it must be able to iterate
    them twice (a list, or an object whose ``__iter__`` starts again); the engine records the scale it used."""
    if params.get("scale") is not None:
        return params
    if iter(blocks) is blocks:
        raise TypeError("deriving the impact scale reads the blocks twice: pass a re-iterable, or a scale")
    return params | {"scale": impact_scale(max_weight(blocks))}


IMPACT_SCALE_HELP = (
    "quantization: weight w -> integer impact round(w x scale), documents and queries alike; scores returned are "
    f"sum(q_impact x d_impact) / scale^2. Unset: derived from the documents, {IMPACT_LEVELS} / their largest "
    "weight (3 significant digits; docs/results/impact-scale), recorded in the index"
)


@dataclass
class SearchResult:
    """Top-k per query: row i holds the document *row numbers* (int64, -1 = no hit) and their scores; k is
    the requested k capped at the number of documents (:meth:`Searcher.result_size`).

    With the query and document ids it becomes a :class:`spladekit.evaluation.run.Run` (``Run.from_hits``)."""

    doc_indices: np.ndarray  # n_queries × min(k, n_docs), int64
    scores: np.ndarray  # n_queries × min(k, n_docs), float32

    @classmethod
    def from_hits(cls, hits: list[tuple[np.ndarray, np.ndarray]], k: int) -> SearchResult:
        """Pack per-query (row numbers, scores), best first, into -1-padded n × k arrays."""
        doc_indices = np.full((len(hits), k), -1, dtype=np.int64)
        scores = np.zeros((len(hits), k), dtype=np.float32)
        for i, (rows, values) in enumerate(hits):
            doc_indices[i, : len(rows)] = rows[:k]
            scores[i, : len(rows)] = values[:k]
        return cls(doc_indices, scores)


class Searcher(abc.ABC):
    """Built from a CSR document matrix (n_docs × V); searched with a CSR query matrix (n_queries × V).

    ``save(path)`` writes a folder with a versioned, checksummed ``manifest.json`` (see
    :mod:`spladekit.index.store`); backends only write and read their own files.
    """

    name: str
    summary: str  # one line for the CLI help
    declared_params: tuple[Param, ...] = ()  # what ``build`` (all) and ``search`` (role "search") accept
    vocab_size: int
    n_docs: int
    params: dict
    doc_ids: list[str] | None = None

    @classmethod
    @abc.abstractmethod
    def build(cls, documents: sp.csr_matrix, **params: Any) -> Searcher: ...

    @classmethod
    def build_from_blocks(cls, blocks: Iterable[sp.csr_matrix], **params: Any) -> Searcher:
        """Build from consecutive row blocks of the document matrix (the shards of a vectors folder, in
        order). Default: stack them and :meth:`build`; a backend that can index a stream overrides it so no
        whole-corpus copy is made in Python."""
        return cls.build(sp.vstack(list(blocks), format="csr"), **params)

    @abc.abstractmethod
    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """Top-k per query; ``params``: the backend's search parameters (default: the index's)."""

    def search_batches(
        self, queries: sp.csr_matrix, k: int = 10, batch_size: int = 256, show_progress: bool = True, **params: Any
    ) -> SearchResult:
        """``search`` over consecutive query batches, with a progress bar (long runs: MS MARCO dev)."""
        from tqdm.auto import tqdm

        k = self.result_size(k)
        parts = [
            self.search(queries[start : start + batch_size], k=k, **params)
            for start in tqdm(
                range(0, queries.shape[0], batch_size),
                desc=f"{self.name} search",
                unit="batch",
                disable=not show_progress,
                leave=False,
            )
        ]
        if not parts:
            return SearchResult(np.empty((0, k), np.int64), np.empty((0, k), np.float32))
        return SearchResult(np.vstack([part.doc_indices for part in parts]), np.vstack([part.scores for part in parts]))

    _staging: Scratch | None = None  # where a fresh build keeps its engine's files (pisa, anserini, bmp)

    def close(self) -> None:
        """Release what the backend holds outside Python (an engine's client, its database folder); ``with
        searcher:`` calls it. Default: remove a fresh build's scratch folder (a saved copy stays), if any."""
        if self._staging is not None:
            self._staging.cleanup()
            self._staging = None

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def result_size(self, k: int) -> int:
        """The hits per query a search returns: ``k``, capped at the number of documents (no query can have
        more, and ``--k 10**12`` must not allocate n_queries × 10¹² slots); every backend's ``search``
        starts with it. SpladekitError for a k that is not an integer >= 1."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise SpladekitError(f"k must be an integer >= 1, got {k!r}")
        return max(1, min(int(k), self.n_docs))

    @abc.abstractmethod
    def write_files(self, folder: Path) -> None:
        """Write the backend's own files into ``folder`` (a fresh staging folder)."""

    @classmethod
    @abc.abstractmethod
    def read_files(cls, folder: Path, manifest: dict) -> Searcher:
        """Rebuild the searcher from ``folder`` (checksums already verified)."""

    @classmethod
    @abc.abstractmethod
    def stored_files(cls, params: dict) -> tuple[str, ...]:
        """The names of the files ``read_files`` reads, for an index built with ``params``: loading refuses a
        manifest that does not list (hence verify) each of them."""

    def save(self, path: str | Path, meta: dict | None = None, overwrite: bool = False) -> Path:
        """Write this index (and its ``doc_ids``, if any) as an index folder, atomically (:mod:`.store`)."""
        with atomic_directory(path, overwrite=overwrite) as staging:
            self.write_files(staging)
            if self.doc_ids is not None:
                if len(self.doc_ids) != self.n_docs:
                    raise SpladekitError(f"{self.n_docs} documents but {len(self.doc_ids)} ids")
                (staging / IDS_FILE).write_text(json.dumps(self.doc_ids), encoding="utf-8")
            write_manifest(staging, self.name, self.vocab_size, self.n_docs, self.params, meta)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> Searcher:
        """Load the index folder ``path`` with this backend, which must be the one named in its manifest.

        Every file the backend reads (``stored_files``) must be listed in the manifest, hence verified; the
        stored values of declared parameters are checked against the declarations; a backend file that still
        cannot be read is an :class:`InputError` naming the folder."""
        path = Path(path)
        manifest = read_manifest(path, verify_files=False)
        manifest_path = path / MANIFEST
        if manifest["backend"] != cls.name:
            raise SpladekitError(f"{path}: this is a {manifest['backend']!r} index, not {cls.name!r}")
        cls.check_prerequisites(cls.defaults() | manifest["params"])  # before hashing the files
        manifest = read_manifest(path)
        declared = {param.name for param in cls.declared_params}  # others are derived (e.g. bmp's scale)
        try:
            checked = cls.check_params({name: value for name, value in manifest["params"].items() if name in declared})
        except SpladekitError as error:
            raise InputError(f"stored parameters: {error}", manifest_path) from None
        params = manifest["params"] | checked
        manifest = manifest | {"params": params}
        unlisted = [name for name in cls.stored_files(params) if name not in manifest["files"]]
        if unlisted:
            raise InputError(
                f"the manifest does not list {', '.join(unlisted)} (a {cls.name} index reads it), "
                "so it cannot be verified; rebuild the index",
                manifest_path,
            )
        with reading(path, f"{cls.name} index"):
            searcher = cls.read_files(path, manifest)
        ids_path = path / IDS_FILE
        searcher.doc_ids = read_id_list(ids_path) if ids_path.is_file() else None
        if searcher.doc_ids is not None and len(searcher.doc_ids) != manifest["n_docs"]:
            raise InputError(f"{len(searcher.doc_ids)} ids for {manifest['n_docs']} documents", ids_path)
        return searcher

    @classmethod
    def check_params(cls, values: dict, role: str = "build") -> dict:
        """``values`` (strings from the command line or Python values) typed and checked against the
        declarations; SpladekitError (one line) for an unknown name or a value out of range."""
        return check_values(cls.name, cls.declared_params, values, role)

    @classmethod
    def check_prerequisites(cls, params: dict) -> None:
        """Refuse in one line naming what to install when what the backend runs on is missing (its engine's
        Python package; Java and Anserini's jar), so that a command fails before its work (encoding a
        collection can take hours), not after: every path that builds an index calls it through
        :func:`spladekit.index.check_backend`, and :meth:`load` before reading the folder. ``params``: the
        index's parameters (a server URL needs the client package, not the embedded engine). Default: nothing."""
        return None  # a hook, not abstract: exact search needs nothing but numpy

    @classmethod
    def defaults(cls) -> dict:
        """The declared default of every parameter (search ones included: they become the index's)."""
        return {param.name: param.default for param in cls.declared_params}

    def search_settings(self, values: dict) -> dict:
        """The index's search parameters (declared defaults for any it predates), overridden by the checked
        ``values`` of this search."""
        saved = {
            param.name: self.params.get(param.name, param.default)
            for param in self.declared_params
            if param.role == "search"
        }
        return saved | self.check_params(values, "search")

    def check_queries(self, queries: sp.csr_matrix) -> sp.csr_matrix:
        """Refuse queries from another vocabulary or with negative weights; return them as sorted float32 CSR."""
        if queries.shape[1] != self.vocab_size:
            raise SpladekitError(
                f"vocabulary mismatch: queries have {queries.shape[1]} dimensions, the {self.name} index "
                f"{self.vocab_size} (encode queries with the model that encoded the documents)"
            )
        queries = sp.csr_matrix(queries, dtype=np.float32)
        queries.sort_indices()
        if queries.nnz and (not np.isfinite(queries.data).all() or queries.data.min() < 0):
            raise SpladekitError("query vectors must be finite and non-negative (SPLADE weights are >= 0)")
        return queries


class FolderSearcher(Searcher):
    """A backend whose index is a folder of the engine's own files (pisa, anserini): a fresh build keeps it in a
    scratch folder (``staging``, :mod:`spladekit.common.scratch`) as long as the searcher, or until ``close``; a
    loaded index is read in place."""

    def __init__(
        self,
        folder: Path,
        vocab_size: int,
        n_docs: int,
        params: dict,
        staging: Scratch | None = None,
    ) -> None:
        self._staging = staging
        self.folder = folder
        self.vocab_size = vocab_size
        self.n_docs = n_docs
        self.params = params


def check_documents(documents: sp.csr_matrix) -> sp.csr_matrix:
    """Documents must be finite and non-negative (SPLADE weights are ``log(1 + ReLU(·)) >= 0``)."""
    documents = sp.csr_matrix(documents, dtype=np.float32)
    documents.sum_duplicates()
    documents.eliminate_zeros()
    if documents.nnz and (not np.isfinite(documents.data).all() or documents.data.min() < 0):
        raise SpladekitError("document vectors must be finite and non-negative (SPLADE weights are >= 0)")
    return documents
