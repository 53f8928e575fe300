"""Search backends behind one :class:`Searcher` interface: exact (reference), seismic, bmp, pisa, anserini, qdrant,
milvus.
May import: ``common``."""

from pathlib import Path
from typing import Any

import scipy.sparse as sp

from spladekit.common.errors import InputError, SpladekitError
from spladekit.index.anserini import AnseriniSearcher
from spladekit.index.base import Searcher, SearchResult
from spladekit.index.bmp import BmpSearcher
from spladekit.index.exact import ExactSearcher
from spladekit.index.milvus import MilvusSearcher
from spladekit.index.params import Param
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


def load_index(path: str | Path) -> Searcher:
    """Load any index folder with the backend named in its (verified) manifest."""
    backend = read_manifest(path)["backend"]
    if backend not in BACKENDS:
        raise InputError(f"unknown index backend {backend!r}", Path(path) / MANIFEST)
    return BACKENDS[backend].load(path)


def build_index(documents: sp.csr_matrix, backend: str = "exact", **params: Any) -> Searcher:
    """Build the named backend over a CSR document matrix (n_docs × V). ``params``: the backend's declared
    parameters, typed or as strings (``"64"``, ``"true"``); checked before any work, unset ones default."""
    searcher = backend_class(backend)
    return searcher.build(documents, **searcher.check_params(params))


__all__ = [
    "BACKENDS",
    "AnseriniSearcher",
    "BmpSearcher",
    "ExactSearcher",
    "MilvusSearcher",
    "Param",
    "PisaSearcher",
    "QdrantSearcher",
    "SearchResult",
    "Searcher",
    "SeismicSearcher",
    "backend_class",
    "build_index",
    "load_index",
]
