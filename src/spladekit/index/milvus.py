"""Milvus backend: documents as sparse vectors in a Milvus collection, searched through ``pymilvus``.

One client code path, ``MilvusClient(uri=…)``: unset ``uri`` runs Milvus Lite (``milvus-lite``, an
embedded engine, in a private scratch folder, :mod:`spladekit.common.scratch`); ``uri=http://host:19530`` talks
to a Milvus standalone or distributed deployment (or Zilliz Cloud), with the token from ``$MILVUS_TOKEN``. The
collection has the primary key ``row`` (INT64, the document row, so hits come back as rows), a ``SPARSE_FLOAT_VECTOR``
field with a ``SPARSE_INVERTED_INDEX`` and metric ``IP`` (score = Σ_v q_v·d_v), and, when ids are given,
``doc_id`` (VARCHAR). Milvus Lite 3.2 scores exactly (term-at-a-time accumulation, ``TAAT_NAIVE``; it
refuses ``drop_ratio_search`` ≠ 0); a server's inverted index defaults to ``DAAT_MAXSCORE`` (rank-safe
pruning) with ``drop_ratio_search`` = 0, and spladekit passes no search parameter. Engines order equal
scores their own way: spladekit orders them by lower row, resolving a tie at the k-th place by asking for
more hits (:mod:`spladekit.index.engine`) up to Milvus's limit of 16,384 hits per query.

Saved index (``save``): for a server, only the connection (uri, collection, field; never the token); for
Milvus Lite, the document matrix (``documents.npz``, scipy, no pickle) from which ``load`` rebuilds the
collection. Milvus Lite's own folder (a WAL, Parquet segments, a lock file, rewritten while it is open)
is not a file that an index folder's checksums can verify, so it stays in the scratch folder.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.common.errors import SpladekitError
from spladekit.common.scratch import Scratch, scratch_folder
from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.index.engine import DOCUMENTS_FILE, EngineFiles, engine_errors, tie_resolved_top_k
from spladekit.index.params import Param

if TYPE_CHECKING:
    from pymilvus import MilvusClient

DEFAULT_COLLECTION = "spladekit"
DEFAULT_FIELD = "splade"
ROW_FIELD, ID_FIELD = "row", "doc_id"
TOKEN_VARIABLE = "MILVUS_TOKEN"
MAX_TOP_K = 16384  # Milvus's limit on hits per query (its topk / limit)
MAX_ID_LENGTH = 65535  # Milvus's longest VARCHAR
QUERY_BATCH = 256  # queries per search request (Milvus caps a request's size)
SERVER_SCHEMES = ("http://", "https://", "tcp://", "grpc://")


def _pymilvus() -> ModuleType:
    try:
        import pymilvus
    except ImportError:
        raise SpladekitError("pymilvus is not installed: pip install 'spladekit[milvus]'") from None
    # pymilvus logs every failed call with its traceback before raising; spladekit reports it as one line
    logging.getLogger("pymilvus.decorators").setLevel(logging.CRITICAL)
    return pymilvus


def _errors() -> tuple[type[BaseException], ...]:
    return (_pymilvus().MilvusException,)


def connect(uri: str, token: str | None = None) -> MilvusClient:
    """A Milvus client: a server at ``uri`` (token: ``token`` or ``$MILVUS_TOKEN``), or Milvus Lite when
    ``uri`` is a local ``.db`` path; a connection failure is one SpladekitError line."""
    pymilvus = _pymilvus()
    with engine_errors("Milvus", uri, _errors()):
        return pymilvus.MilvusClient(uri=uri, token=token or os.environ.get(TOKEN_VARIABLE, ""))


def check_uri(uri: str | None) -> None:
    """A server URI names its scheme; a local path here would leave an unverifiable database outside the
    index folder (leave ``uri`` unset for Milvus Lite)."""
    if uri is not None and not uri.startswith(SERVER_SCHEMES):
        raise SpladekitError(
            f"milvus parameter uri={uri}: must be a Milvus server URL ({', '.join(SERVER_SCHEMES)}"
            "…, e.g. http://localhost:19530); leave it unset for embedded Milvus Lite"
        )


def _sparse_rows(vectors: sp.csr_matrix, start: int, end: int) -> list[dict[int, float]]:
    """CSR rows ``start:end`` as Milvus sparse vectors (term id → weight)."""
    return [
        dict(
            zip(
                vectors.indices[vectors.indptr[row] : vectors.indptr[row + 1]].tolist(),
                vectors.data[vectors.indptr[row] : vectors.indptr[row + 1]].tolist(),
            )
        )
        for row in range(start, end)
    ]


LITE_DATABASE = "milvus.db"


class MilvusSearcher(EngineFiles, Searcher):
    """A Milvus collection with one sparse vector per document (primary key = document row)."""

    name = "milvus"
    SERVER_PARAM = "uri"
    summary = "Milvus collection (sparse inverted index, exact top-k); embedded Milvus Lite unless uri is set"
    declared_params = (
        Param("collection", str, DEFAULT_COLLECTION, "Milvus collection to create"),
        Param("vector_field", str, DEFAULT_FIELD, "name of the sparse vector field"),
        Param(
            "uri",
            str,
            None,
            f"Milvus server, e.g. http://localhost:19530 (token: ${TOKEN_VARIABLE}); unset: "
            "embedded Milvus Lite in a scratch folder",
        ),
        Param("batch_size", int, 1000, "documents per insert request", minimum=1),
        Param("recreate", bool, False, "replace an existing collection of that name"),
    )

    def __init__(
        self,
        client: MilvusClient,
        vocab_size: int,
        n_docs: int,
        params: dict,
        documents: sp.csr_matrix | None = None,
        folder: Scratch | None = None,
    ) -> None:
        self.client = client
        self.vocab_size, self.n_docs = vocab_size, n_docs
        self.collection, self.vector_field, self.uri = params["collection"], params["vector_field"], params["uri"]
        self.where = self.uri or "embedded Milvus Lite"
        self.params = params
        self.documents = documents  # Milvus Lite only: saved instead of its database folder
        self.folder = folder  # Milvus Lite's scratch folder (removed by close, or when garbage-collected)

    @classmethod
    def check_params(cls, values: dict, role: str = "build") -> dict:
        """The declared checks, and ``uri`` must name a server (before any work)."""
        checked = super().check_params(values, role)
        check_uri(checked.get("uri"))
        return checked

    @classmethod
    def check_prerequisites(cls, params: dict) -> None:
        """pymilvus and, unless ``uri`` names a server, milvus-lite (found, not imported: it starts nothing yet)."""
        _pymilvus()
        if not params.get("uri") and importlib.util.find_spec("milvus_lite") is None:
            raise SpladekitError(
                "embedded Milvus Lite needs milvus-lite: pip install 'spladekit[milvus]', or set uri= to a server"
            )

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        documents: sp.csr_matrix,
        doc_ids: list[str] | None = None,
        token: str | None = None,
        show_progress: bool = True,
        **params: Any,
    ) -> MilvusSearcher:
        """Insert ``documents`` (CSR, n × V) into ``collection`` of the server at ``uri``, or of an embedded
        Milvus Lite. ``recreate`` replaces an existing collection; ``doc_ids`` also go into ``doc_id``."""
        params = cls.defaults() | cls.check_params(params)
        documents = check_documents(documents)
        documents.sort_indices()
        if doc_ids is not None and len(doc_ids) != documents.shape[0]:
            raise SpladekitError(f"{documents.shape[0]} document vectors but {len(doc_ids)} ids")
        if doc_ids is not None and any(len(doc_id.encode()) > MAX_ID_LENGTH for doc_id in doc_ids):
            raise SpladekitError(f"Milvus stores ids of at most {MAX_ID_LENGTH} bytes")
        folder = None
        if params["uri"] is None:
            _pymilvus()  # not installed: said before the scratch folder is made
            folder = scratch_folder("milvus")
            try:
                client = connect(str(folder.path / LITE_DATABASE))
            except BaseException:
                folder.cleanup()
                raise
        else:
            client = connect(params["uri"], token)
        searcher = cls(
            client,
            documents.shape[1],
            documents.shape[0],
            params,
            documents=documents if folder is not None else None,
            folder=folder,
        )
        searcher.doc_ids = doc_ids
        try:
            with engine_errors("Milvus", searcher.where, _errors()):
                searcher._create_collection(params["recreate"], with_ids=doc_ids is not None)
                searcher._insert(documents, params["batch_size"], show_progress)
        except BaseException:
            searcher.close()
            raise
        return searcher

    def _create_collection(self, recreate: bool, with_ids: bool) -> None:
        pymilvus = _pymilvus()
        if self.client.has_collection(self.collection):
            if not recreate:
                raise SpladekitError(f"Milvus collection {self.collection!r} already exists (recreate it to replace)")
            self.client.drop_collection(self.collection)
        schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(ROW_FIELD, pymilvus.DataType.INT64, is_primary=True)
        schema.add_field(self.vector_field, pymilvus.DataType.SPARSE_FLOAT_VECTOR)
        if with_ids:
            schema.add_field(ID_FIELD, pymilvus.DataType.VARCHAR, max_length=MAX_ID_LENGTH)
        # Strong consistency: a search right after the inserts sees all of them (the default may lag on a server)
        self.client.create_collection(self.collection, schema=schema, consistency_level="Strong")
        index = self.client.prepare_index_params()
        index.add_index(field_name=self.vector_field, index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        # sync=False: waiting for the index calls AllocTimestamp, which Milvus Lite does not implement (it logs a
        # traceback); a server searches rows not indexed yet by brute force, with the same scores
        self.client.create_index(self.collection, index, sync=False)
        self.client.load_collection(self.collection)

    def _insert(self, documents: sp.csr_matrix, batch_size: int, show_progress: bool) -> None:
        for start in tqdm(
            range(0, documents.shape[0], batch_size),
            desc="milvus insert",
            unit="batch",
            disable=not show_progress,
            leave=False,
        ):
            end = min(start + batch_size, documents.shape[0])
            # an empty vector (Milvus refuses it) never scores above 0, so it is never a hit: not inserted
            rows = [
                {ROW_FIELD: row, self.vector_field: vector}
                | ({} if self.doc_ids is None else {ID_FIELD: self.doc_ids[row]})
                for row, vector in zip(range(start, end), _sparse_rows(documents, start, end))
                if vector
            ]
            if rows:
                self.client.insert(self.collection, rows)

    # ------------------------------------------------------------------ searching
    def _query(self, queries: sp.csr_matrix, rows: list[int], limit: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query row: the engine's hits as (document rows, scores)."""
        ranked = []
        for start in range(0, len(rows), QUERY_BATCH):
            batch = rows[start : start + QUERY_BATCH]
            data = [_sparse_rows(queries, row, row + 1)[0] for row in batch]
            answers = self.client.search(
                self.collection,
                data=data,
                anns_field=self.vector_field,
                limit=limit,
                output_fields=[ROW_FIELD],
                search_params={"metric_type": "IP"},
            )
            for hits in answers:
                ranked.append(
                    (
                        np.array([hit.id for hit in hits], dtype=np.int64),
                        np.array([hit.distance for hit in hits], dtype=np.float64),
                    )
                )
        return ranked

    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """Top-k rows per query by dot product (ties: lower row first); -1 pads missing hits."""
        self.check_params(params, "search")  # exact sparse search has no parameters: refuse any, clearly
        k = self.result_size(k)
        if k > MAX_TOP_K:
            raise SpladekitError(f"Milvus returns at most {MAX_TOP_K} hits per query, asked for k={k}")
        queries = self.check_queries(queries)
        with engine_errors("Milvus", self.where, _errors()):
            return tie_resolved_top_k(
                lambda rows, limit: self._query(queries, rows, limit), queries, k, self.n_docs, MAX_TOP_K
            )

    # ------------------------------------------------------------------ persistence
    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> MilvusSearcher:
        params = cls.defaults() | manifest["params"]
        if params["uri"]:
            client = connect(params["uri"])
            with engine_errors("Milvus", params["uri"], _errors()):
                if not client.has_collection(params["collection"]):
                    raise SpladekitError(f"Milvus at {params['uri']}: collection {params['collection']!r} not found")
            return cls(client, manifest["vocab_size"], manifest["n_docs"], params)
        documents = sp.load_npz(folder / DOCUMENTS_FILE).tocsr()
        return cls.build(
            documents,
            collection=params["collection"],
            vector_field=params["vector_field"],
            batch_size=params["batch_size"],
        )

    def close(self) -> None:
        """Release the client and remove Milvus Lite's scratch folder. Milvus Lite's in-process server is
        stopped first: it would otherwise write its database back into the folder at exit (atexit)."""
        self.client.close()
        if self.folder is not None:
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(str(self.folder.path / LITE_DATABASE))
            self.folder.cleanup()
            self.folder = None
