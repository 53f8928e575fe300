"""Search backends behind one :class:`Searcher` interface: exact (reference), seismic, bmp, pisa, anserini, qdrant,
milvus.
May import: ``common``, ``vectors``."""

from spladekit.index.anserini import AnseriniSearcher
from spladekit.index.base import Searcher, SearchResult
from spladekit.index.bmp import BmpSearcher
from spladekit.index.building import BuiltIndex, build_index_folder
from spladekit.index.exact import ExactSearcher
from spladekit.index.milvus import MilvusSearcher
from spladekit.index.params import Param
from spladekit.index.pisa import PisaSearcher
from spladekit.index.qdrant import QdrantSearcher
from spladekit.index.registry import BACKENDS, backend_class, build_index, check_backend, index_backend, load_index
from spladekit.index.seismic import SeismicSearcher

__all__ = [
    "BACKENDS",
    "BuiltIndex",
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
    "build_index_folder",
    "check_backend",
    "index_backend",
    "load_index",
]
