"""Qdrant backend: documents as sparse vectors in a Qdrant collection, searched by Qdrant's engine.

Embedded by default: **Qdrant Edge** (``qdrant-edge-py``), Qdrant's Rust engine in-process, in a private
scratch folder (:mod:`spladekit.common.scratch`), or in the folder ``path=`` names, which then holds a shard that
``qdrant_edge.EdgeShard.load`` opens: an output like any other (:func:`spladekit.common.atomic.open_output`: a new
folder, built beside it and swapped in complete; ``recreate`` replaces only a shard folder spladekit wrote); with
``url=``, a Qdrant server or cluster through ``qdrant-client``. Both run the same searcher: a
collection of one named sparse vector per point, built with the same parameters (``modifier``, ``datatype``),
filled and queried batch by batch; only the engine object differs (:class:`_Edge`, :class:`_Server`). Point ids
are the document row numbers, so results come back as row numbers directly; the document id (when given) is in
the payload as ``doc_id``.

Qdrant scores sparse vectors by the dot product of the stored weights; with ``datatype=float32`` (the default)
and no ``modifier`` that is the exact dot product, and spladekit orders equal scores by lower row and, when a
tie straddles the k-th place, asks for more hits until it is resolved (:mod:`spladekit.index.engine`), so the
top-k equals brute-force ``Q @ D.T`` over the documents sharing a term with the query (score > 0), like the
``exact`` backend. ``datatype=float16`` / ``uint8`` store the weights rounded (Qdrant quantizes uint8 to
[0, 255] at indexing), and ``modifier=idf`` multiplies each query weight by Qdrant's IDF of its term: both
change the scores, on purpose. A server that cannot be reached, or refuses the key, is one error line.

Saved index (``save``): for a server, only the connection (url, collection, vector name; never the API
key: set ``QDRANT_API_KEY``); embedded, the document matrix (``documents.npz``, scipy, no pickle) from which
``load`` rebuilds the shard (an open shard rewrites its write-ahead log and segments, which an index folder's
checksums could not verify).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import scipy.sparse as sp

from spladekit.common.atomic import open_output
from spladekit.common.errors import SpladekitError
from spladekit.common.scratch import Scratch, scratch_folder
from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.index.engine import DOCUMENTS_FILE, EngineFiles, engine_errors, tie_resolved_top_k
from spladekit.index.params import Param

DEFAULT_COLLECTION = "spladekit"
DEFAULT_VECTOR = "splade"
API_KEY_VARIABLE = "QDRANT_API_KEY"
DATATYPES = ("float32", "float16", "uint8")
MODIFIERS = ("none", "idf")

Hits = list[tuple[np.ndarray, np.ndarray]]  # per query: (document rows, scores)


def _qdrant_client() -> ModuleType:
    try:
        import qdrant_client
    except ImportError:
        raise SpladekitError("qdrant-client is not installed: pip install 'spladekit[interop]'") from None
    return qdrant_client


def _qdrant_edge() -> ModuleType:
    try:
        import qdrant_edge
    except ImportError:
        raise SpladekitError(
            "qdrant-edge-py (embedded Qdrant) is not installed: pip install 'spladekit[interop]', or set url="
        ) from None
    return qdrant_edge


def _rows(vectors: sp.csr_matrix, row: int) -> tuple[list[int], list[float]]:
    start, end = vectors.indptr[row], vectors.indptr[row + 1]
    return vectors.indices[start:end].tolist(), vectors.data[start:end].tolist()


def _hits(points: list) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([int(point.id) for point in points], dtype=np.int64),
        np.array([point.score for point in points], dtype=np.float64),
    )


class _EdgeFailure(SpladekitError):
    """What Qdrant Edge raised (its failures are plain ``Exception`` objects, told apart from bugs by that)."""


class _Edge:
    """Qdrant Edge: one shard (a shard is one collection) in ``folder``, a new one (a scratch folder, or an output's
    staging: what was there before is the output's business, see :meth:`QdrantSearcher.build`)."""

    errors: tuple[type[BaseException], ...] = (_EdgeFailure,)

    def __init__(self, folder: Path, vector: str):
        self.edge, self.folder, self.vector = _qdrant_edge(), folder, vector
        self.shard: Any = None

    def create(self, recreate: bool, modifier: str, datatype: str) -> None:
        edge = self.edge
        params = edge.EdgeSparseVectorParams(
            modifier=edge.Modifier.Idf if modifier == "idf" else None,
            datatype=getattr(edge.VectorStorageDatatype, datatype.capitalize()),
        )
        # indexing_threshold=1 (KB): the optimizer turns every segment into an indexed one, as a server's does to a
        # large collection; only then does the storage datatype apply (an appendable segment holds float32)
        config = edge.EdgeConfig(
            sparse_vectors={self.vector: params}, optimizers=edge.EdgeOptimizersConfig(indexing_threshold=1)
        )
        self.shard = _edge_call(edge.EdgeShard.create, str(self.folder), config)

    def upsert(self, vectors: sp.csr_matrix, rows: range, doc_ids: list[str] | None) -> None:
        edge = self.edge
        points = [
            edge.Point(
                row,
                {self.vector: edge.SparseVector(*_rows(vectors, row))},
                None if doc_ids is None else {"doc_id": doc_ids[row]},
            )
            for row in rows
        ]
        _edge_call(self.shard.update, edge.UpdateOperation.upsert_points(points))

    def finish(self) -> None:
        """Run the optimizer once every point is in (see ``create``)."""
        _edge_call(self.shard.optimize)

    def move(self, folder: Path) -> None:
        """Open the shard again in ``folder``, where its files were moved once it was closed."""
        self.folder = folder
        self.shard = _edge_call(self.edge.EdgeShard.load, str(folder))

    def query(self, queries: sp.csr_matrix, rows: list[int], limit: int) -> Hits:
        edge = self.edge
        requests = [
            edge.QueryRequest(
                limit=limit, query=edge.Query.Nearest(edge.SparseVector(*_rows(queries, row)), using=self.vector)
            )
            for row in rows
        ]
        return [_hits(points) for points in _edge_call(self.shard.query_batch, edge.QueryBatchRequest(requests))]

    def count(self) -> int:
        return int(self.shard.info().points_count)

    def payload(self, row: int) -> dict | None:
        return self.shard.retrieve([row], with_payload=True, with_vector=False)[0].payload

    def close(self) -> None:
        if self.shard is not None:
            self.shard.flush()
            self.shard.close()
            self.shard = None


def _edge_call(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except Exception as error:
        if type(error) is not Exception:
            raise
        raise _EdgeFailure(str(error)) from None


class _Server:
    """A Qdrant server or cluster through qdrant-client (API key: ``api_key`` or ``$QDRANT_API_KEY``)."""

    def __init__(self, url: str, collection: str, vector: str, api_key: str | None = None):
        qdrant_client = _qdrant_client()
        exceptions = qdrant_client.http.exceptions
        # unreachable server (ResponseHandlingException), error status (UnexpectedResponse)
        self.errors = (exceptions.ResponseHandlingException, exceptions.UnexpectedResponse)
        self.models, self.collection, self.vector = qdrant_client.models, collection, vector
        # no version handshake: an unreachable server is reported by the first request, as one line
        self.client = qdrant_client.QdrantClient(
            url=url, api_key=api_key or os.environ.get(API_KEY_VARIABLE), check_compatibility=False
        )

    def exists(self) -> bool:
        return bool(self.client.collection_exists(self.collection))

    def create(self, recreate: bool, modifier: str, datatype: str) -> None:
        models = self.models
        if self.exists():
            if not recreate:
                raise SpladekitError(f"Qdrant collection {self.collection!r} already exists (recreate it to replace)")
            self.client.delete_collection(self.collection)
        index = models.SparseIndexParams(datatype=getattr(models.Datatype, datatype.upper()))
        vector = models.SparseVectorParams(index=index, modifier=models.Modifier.IDF if modifier == "idf" else None)
        self.client.create_collection(self.collection, vectors_config={}, sparse_vectors_config={self.vector: vector})

    def upsert(self, vectors: sp.csr_matrix, rows: range, doc_ids: list[str] | None) -> None:
        models = self.models
        points = [
            models.PointStruct(
                id=row,
                vector={self.vector: models.SparseVector(**dict(zip(("indices", "values"), _rows(vectors, row))))},
                payload={} if doc_ids is None else {"doc_id": doc_ids[row]},
            )
            for row in rows
        ]
        self.client.upsert(self.collection, points, wait=True)

    def finish(self) -> None:
        """Nothing: a server runs its optimizer by its own policy."""

    def query(self, queries: sp.csr_matrix, rows: list[int], limit: int) -> Hits:
        models = self.models
        requests = [
            models.QueryRequest(
                query=models.SparseVector(**dict(zip(("indices", "values"), _rows(queries, row)))),
                using=self.vector,
                limit=limit,
                with_payload=False,
            )
            for row in rows
        ]
        return [_hits(answer.points) for answer in self.client.query_batch_points(self.collection, requests=requests)]

    def count(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)

    def payload(self, row: int) -> dict | None:
        return self.client.retrieve(self.collection, [row], with_payload=True)[0].payload

    def close(self) -> None:
        self.client.close()


class QdrantSearcher(EngineFiles, Searcher):
    """A Qdrant collection with one named sparse vector per document (point id = document row)."""

    name = "qdrant"
    SERVER_PARAM = "url"
    summary = "Qdrant collection, exact top-k at float32; embedded Qdrant Edge unless url is set"
    declared_params = (
        Param("collection", str, DEFAULT_COLLECTION, "Qdrant collection to create (on a server)"),
        Param("vector_name", str, DEFAULT_VECTOR, "name of the sparse vector of each point"),
        Param(
            "url", str, None, f"Qdrant server or cluster (API key: ${API_KEY_VARIABLE}); unset: embedded Qdrant Edge"
        ),
        Param("batch_size", int, 256, "points per upload request", minimum=1),
        Param("recreate", bool, False, "replace an existing collection of that name"),
        Param(
            "datatype",
            str,
            "float32",
            "how Qdrant stores the weights (uint8: quantized to [0, 255])",
            choices=DATATYPES,
        ),
        Param("modifier", str, "none", "idf: Qdrant multiplies each query weight by its term's IDF", choices=MODIFIERS),
    )

    @classmethod
    def check_prerequisites(cls, params: dict) -> None:
        """qdrant-client for a server (``url``), else qdrant-edge-py (the embedded engine)."""
        _qdrant_client() if params.get("url") else _qdrant_edge()

    def __init__(
        self,
        engine: _Edge | _Server,
        vocab_size: int,
        n_docs: int,
        params: dict,
        documents: sp.csr_matrix | None = None,
        folder: Scratch | None = None,
    ) -> None:
        self.engine = engine
        self.vocab_size, self.n_docs = vocab_size, n_docs
        self.collection, self.vector_name, self.url = params["collection"], params["vector_name"], params["url"]
        self.where = self.url or "embedded (Qdrant Edge)"
        self.params = params
        self.documents = documents  # embedded only: what the saved index rebuilds the shard from
        self.folder = folder  # the scratch folder of an embedded shard, removed by close()

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
        """Upload ``documents`` (CSR, n × V) into ``collection`` of the server at ``url``, else into an embedded
        Qdrant Edge shard: in ``path`` when given (an output: checked before any work, built beside it, swapped in
        complete, kept there; the searcher then uses it there), else a scratch folder. ``recreate`` replaces an
        existing collection, or a shard folder that spladekit wrote (never a folder of other files)."""
        params = cls.defaults() | cls.check_params(params)
        documents = check_documents(documents)
        documents.sort_indices()  # Qdrant wants sorted sparse indices
        if doc_ids is not None and len(doc_ids) != documents.shape[0]:
            raise SpladekitError(f"{documents.shape[0]} document vectors but {len(doc_ids)} ids")
        url, folder, output, kept = params["url"], None, None, None
        engine: _Edge | _Server
        if url is not None:
            engine = _Server(url, params["collection"], params["vector_name"], api_key)
        elif path is not None:
            _qdrant_edge()  # not installed: said before the output is opened
            output = open_output(path, folder=True, overwrite=params["recreate"], option="recreate=True")
            engine = kept = _Edge(output.staging, params["vector_name"])
        else:
            _qdrant_edge()
            folder = scratch_folder("qdrant")
            engine = _Edge(folder.path / "shard", params["vector_name"])
        searcher = cls(
            engine,
            documents.shape[1],
            documents.shape[0],
            params,
            documents=None if url is not None else documents,
            folder=folder,
        )
        searcher.doc_ids = doc_ids
        try:
            with engine_errors("Qdrant", searcher.where, engine.errors):
                engine.create(params["recreate"], params["modifier"], params["datatype"])
                for start in range(0, documents.shape[0], params["batch_size"]):
                    engine.upsert(
                        documents, range(start, min(start + params["batch_size"], documents.shape[0])), doc_ids
                    )
                engine.finish()
                if output is not None and kept is not None:  # complete: swapped into place, opened there
                    kept.close()
                    kept.move(Path(output.commit()))
        except BaseException:
            searcher.close()
            if output is not None:
                output.discard()
            raise
        return searcher

    # ------------------------------------------------------------------ searching
    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """Top-k rows per query by dot product (ties: lower row first); -1 pads missing hits."""
        self.check_params(params, "search")  # Qdrant's exact search has no parameters: refuse any, clearly
        k = self.result_size(k)
        queries = self.check_queries(queries)
        with engine_errors("Qdrant", self.where, self.engine.errors):
            return tie_resolved_top_k(
                lambda rows, limit: self.engine.query(queries, rows, limit), queries, k, self.n_docs
            )

    def count(self) -> int:
        """The points in the collection (as the engine counts them)."""
        with engine_errors("Qdrant", self.where, self.engine.errors):
            return self.engine.count()

    # ------------------------------------------------------------------ persistence
    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> QdrantSearcher:
        params = cls.defaults() | manifest["params"]
        if params["url"]:
            server = _Server(params["url"], params["collection"], params["vector_name"])
            with engine_errors("Qdrant", params["url"], server.errors):
                if not server.exists():
                    raise SpladekitError(f"Qdrant at {params['url']}: collection {params['collection']!r} not found")
            return cls(server, manifest["vocab_size"], manifest["n_docs"], params)
        documents = sp.load_npz(folder / DOCUMENTS_FILE).tocsr()
        kept = {name: params[name] for name in ("collection", "vector_name", "datatype", "modifier")}
        return cls.build(documents, **kept)

    def close(self) -> None:
        """Release the engine (an embedded shard is flushed and closed) and remove the scratch folder."""
        self.engine.close()
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None
