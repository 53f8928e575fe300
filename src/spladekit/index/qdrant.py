"""Qdrant backend: documents as sparse vectors in a Qdrant collection, searched through ``qdrant-client``.

Embedded local mode by default (no server: ``qdrant-client``'s in-process engine), or a Qdrant server /
cluster with ``url=``. ``path=`` keeps the collection in qdrant-client's own local storage folder instead
of memory. Point ids are the document row numbers, so results come back as row numbers directly; the
document id (when given) is in the payload as ``doc_id``. Qdrant scores sparse vectors by the exact dot
product; spladekit orders equal scores by lower row and, when a tie straddles the k-th place, asks for
more hits until it is resolved (:mod:`spladekit.index.engine`), so the top-k equals brute-force
``Q @ D.T`` over the documents sharing a term with the query (score > 0), like the ``exact`` backend.
Local and server mode run the same code; only the client's constructor differs. A server that cannot be
reached, or refuses the key, is one error line.

Saved index (``save``): for a server, only the connection (url, collection, vector name; never the API
key: set ``QDRANT_API_KEY``); in local mode, the document matrix (``documents.npz``, scipy, no pickle) from
which ``load`` rebuilds the in-memory collection. qdrant-client's local storage format pickles points,
so spladekit never reads one back itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from spladekit.common.errors import SpladekitError
from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.index.engine import DOCUMENTS_FILE, EngineFiles, engine_errors, tie_resolved_top_k
from spladekit.index.params import Param

if TYPE_CHECKING:
    from qdrant_client import QdrantClient
    from qdrant_client.models import SparseVector

DEFAULT_COLLECTION = "spladekit"
DEFAULT_VECTOR = "splade"
API_KEY_VARIABLE = "QDRANT_API_KEY"


def _qdrant() -> ModuleType:
    try:
        import qdrant_client
    except ImportError:
        raise SpladekitError("qdrant-client is not installed: pip install 'spladekit[interop]'") from None
    return qdrant_client


def _errors() -> tuple[type[BaseException], ...]:
    """qdrant-client's failures: unreachable server (ResponseHandlingException), error status (UnexpectedResponse)."""
    exceptions = _qdrant().http.exceptions
    return (exceptions.ResponseHandlingException, exceptions.UnexpectedResponse)


def connect(url: str | None = None, api_key: str | None = None, path: str | Path | None = None) -> QdrantClient:
    """A Qdrant client: server at ``url`` (API key: ``api_key`` or ``$QDRANT_API_KEY``), local storage at
    ``path``, else embedded in memory."""
    qdrant_client = _qdrant()
    if url is not None:
        # no version handshake: an unreachable server is reported by the first request, as one line
        return qdrant_client.QdrantClient(
            url=url, api_key=api_key or os.environ.get(API_KEY_VARIABLE), check_compatibility=False
        )
    if path is not None:
        return qdrant_client.QdrantClient(path=str(path))
    return qdrant_client.QdrantClient(":memory:")


def _sparse(models: ModuleType, vectors: sp.csr_matrix, row: int) -> SparseVector:
    start, end = vectors.indptr[row], vectors.indptr[row + 1]
    return models.SparseVector(indices=vectors.indices[start:end].tolist(), values=vectors.data[start:end].tolist())


class QdrantSearcher(EngineFiles, Searcher):
    """A Qdrant collection with one named sparse vector per document (point id = document row)."""

    name = "qdrant"
    SERVER_PARAM = "url"
    summary = "Qdrant collection, exact top-k; embedded in memory unless url is set"
    declared_params = (
        Param("collection", str, DEFAULT_COLLECTION, "Qdrant collection to create"),
        Param("vector_name", str, DEFAULT_VECTOR, "name of the sparse vector of each point"),
        Param("url", str, None, f"Qdrant server or cluster (API key: ${API_KEY_VARIABLE}); unset: embedded in memory"),
        Param("batch_size", int, 256, "points per upload request", minimum=1),
        Param("recreate", bool, False, "replace an existing collection of that name"),
    )

    def __init__(
        self, client: QdrantClient, vocab_size: int, n_docs: int, params: dict, documents: sp.csr_matrix | None = None
    ) -> None:
        self.client = client
        self.vocab_size, self.n_docs = vocab_size, n_docs
        self.collection, self.vector_name, self.url = params["collection"], params["vector_name"], params["url"]
        self.where = self.url or "embedded"
        self.params = params
        self.documents = documents  # kept in local mode only, to save the index without Qdrant's pickles

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        documents: sp.csr_matrix,
        doc_ids: list[str] | None = None,
        api_key: str | None = None,
        path: str | Path | None = None,
        **params: Any,
    ) -> QdrantSearcher:
        """Upload ``documents`` (CSR, n × V) into ``collection``: on the server at ``url``, in qdrant-client's
        local storage at ``path``, else embedded in memory. ``recreate`` replaces an existing collection."""
        params = cls.defaults() | cls.check_params(params)
        documents = check_documents(documents)
        documents.sort_indices()  # qdrant-client's local mode requires sorted sparse indices
        if doc_ids is not None and len(doc_ids) != documents.shape[0]:
            raise SpladekitError(f"{documents.shape[0]} document vectors but {len(doc_ids)} ids")
        url = params["url"]
        searcher = cls(
            connect(url, api_key, path),
            documents.shape[1],
            documents.shape[0],
            params,
            documents=None if url is not None else documents,
        )
        searcher.doc_ids = doc_ids
        with engine_errors("Qdrant", searcher.where, _errors()):
            searcher._create_collection(params["recreate"])
            searcher._upload(documents, params["batch_size"])
        return searcher

    def _create_collection(self, recreate: bool) -> None:
        models = _qdrant().models
        if self.client.collection_exists(self.collection):
            if not recreate:
                raise SpladekitError(f"Qdrant collection {self.collection!r} already exists (recreate it to replace)")
            self.client.delete_collection(self.collection)
        self.client.create_collection(
            self.collection,
            vectors_config={},
            sparse_vectors_config={self.vector_name: models.SparseVectorParams(index=models.SparseIndexParams())},
        )

    def _upload(self, documents: sp.csr_matrix, batch_size: int) -> None:
        models = _qdrant().models
        points = (
            models.PointStruct(
                id=row,
                vector={self.vector_name: _sparse(models, documents, row)},
                payload={} if self.doc_ids is None else {"doc_id": self.doc_ids[row]},
            )
            for row in range(documents.shape[0])
        )
        self.client.upload_points(self.collection, points, batch_size=batch_size, wait=True)

    # ------------------------------------------------------------------ searching
    def _query(self, queries: sp.csr_matrix, rows: list[int], limit: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query row: the engine's hits as (document rows, scores)."""
        models = _qdrant().models
        requests = [
            models.QueryRequest(
                query=_sparse(models, queries, row), using=self.vector_name, limit=limit, with_payload=False
            )
            for row in rows
        ]
        return [
            (
                np.array([int(point.id) for point in response.points], dtype=np.int64),
                np.array([point.score for point in response.points], dtype=np.float64),
            )
            for response in self.client.query_batch_points(self.collection, requests=requests)
        ]

    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """Top-k rows per query by dot product (ties: lower row first); -1 pads missing hits."""
        self.check_params(params, "search")  # Qdrant's exact search has no parameters: refuse any, clearly
        k = self.result_size(k)
        queries = self.check_queries(queries)
        with engine_errors("Qdrant", self.where, _errors()):
            return tie_resolved_top_k(lambda rows, limit: self._query(queries, rows, limit), queries, k, self.n_docs)

    # ------------------------------------------------------------------ persistence
    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> QdrantSearcher:
        params = cls.defaults() | manifest["params"]
        if params["url"]:
            client = connect(params["url"])
            with engine_errors("Qdrant", params["url"], _errors()):
                if not client.collection_exists(params["collection"]):
                    raise SpladekitError(f"Qdrant at {params['url']}: collection {params['collection']!r} not found")
            return cls(client, manifest["vocab_size"], manifest["n_docs"], params)
        documents = sp.load_npz(folder / DOCUMENTS_FILE).tocsr()
        return cls.build(documents, collection=params["collection"], vector_name=params["vector_name"])

    def close(self) -> None:
        """Release the client (qdrant-client's local storage holds a lock on its folder)."""
        self.client.close()
