"""The backends by name, and what every path that builds or opens an index asks of them first."""

from pathlib import Path
from typing import Any

import scipy.sparse as sp

from spladekit.common.errors import InputError, SpladekitError
from spladekit.index.anserini import AnseriniSearcher
from spladekit.index.base import Searcher
from spladekit.index.bmp import BmpSearcher
from spladekit.index.exact import ExactSearcher
from spladekit.index.milvus import MilvusSearcher
from spladekit.index.pisa import PisaSearcher
from spladekit.index.qdrant import QdrantSearcher
from spladekit.index.seismic import SeismicSearcher
from spladekit.index.store import MANIFEST, read_manifest

BACKENDS: dict[str, type[Searcher]] = {
    searcher.name: searcher
    for searcher in (
        ExactSearcher,
        SeismicSearcher,
        BmpSearcher,
        PisaSearcher,
        AnseriniSearcher,
        QdrantSearcher,
        MilvusSearcher,
    )
}


def backend_class(backend: str) -> type[Searcher]:
    """The searcher registered as ``backend``, or a SpladekitError listing the choices."""
    if backend not in BACKENDS:
        raise SpladekitError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return BACKENDS[backend]


def check_backend(backend: str, params: dict | None = None) -> dict:
    """The build parameters of ``backend`` typed and checked, once what it runs on is there
    (:meth:`Searcher.check_prerequisites`: Java and Anserini's jar, the engine's Python package). Every path that
    builds an index (``index``, ``evaluate``, ``tune-index``, the API) calls it before any work, so that a missing
    engine is one line naming what to install, not an error after the collection was encoded."""
    searcher = backend_class(backend)
    checked = searcher.check_params(params or {})
    searcher.check_prerequisites(searcher.defaults() | checked)
    return checked


def index_backend(path: str | Path) -> type[Searcher]:
    """The backend of the index folder ``path``, from its manifest, before its files are read or hashed: what a
    command checks its search parameters with before any work."""
    backend = read_manifest(path, verify_files=False)["backend"]
    if backend not in BACKENDS:
        raise InputError(f"unknown index backend {backend!r}", Path(path) / MANIFEST)
    return BACKENDS[backend]


def load_index(path: str | Path) -> Searcher:
    """Load any index folder with the backend named in its manifest (verified by the backend's ``load``)."""
    return index_backend(path).load(path)


def build_index(documents: sp.csr_matrix, backend: str = "exact", **params: Any) -> Searcher:
    """Build the named backend over a CSR document matrix (n_docs × V). ``params``: the backend's declared
    parameters, typed or as strings (``"64"``, ``"true"``); checked before any work, unset ones default."""
    return backend_class(backend).build(documents, **check_backend(backend, params))
