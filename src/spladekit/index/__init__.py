"""Search backends behind one :class:`Searcher` interface: exact (reference), seismic, bmp, qdrant."""

from spladekit.index.base import Searcher, SearchResult
from spladekit.index.bmp import BmpSearcher
from spladekit.index.exact import ExactSearcher
from spladekit.index.qdrant import QdrantSearcher
from spladekit.index.seismic import SeismicSearcher
from spladekit.index.store import read_index as load_index

BACKENDS: dict[str, type[Searcher]] = {
    searcher.name: searcher for searcher in (ExactSearcher, SeismicSearcher, BmpSearcher, QdrantSearcher)
}


def build_index(documents, backend: str = "exact", **params) -> Searcher:
    """Build the named backend over a CSR document matrix (n_docs × V)."""
    from spladekit.errors import SpladekitError

    if backend not in BACKENDS:
        raise SpladekitError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    searcher = BACKENDS[backend]
    return searcher.build(documents, **searcher.check_params(params, searcher.build_params))


__all__ = ["BACKENDS", "BmpSearcher", "ExactSearcher", "QdrantSearcher", "SearchResult", "Searcher",
           "SeismicSearcher", "build_index", "load_index"]
