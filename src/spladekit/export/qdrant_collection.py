"""Encoded vectors → a Qdrant collection with sparse vectors (server, local storage, or index folder)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import scipy.sparse as sp

from spladekit.common.atomic import final_path, open_output
from spladekit.index.qdrant import QdrantSearcher


def export_qdrant(
    vectors: sp.csr_matrix,
    ids: list[str],
    url: str | None = None,
    qdrant_path: str | Path | None = None,
    output: str | Path | None = None,
    collection: str = "spladekit",
    vector_name: str = "splade",
    recreate: bool = False,
    overwrite: bool = False,
) -> dict:
    """Upload ``vectors`` (point id = row, payload ``doc_id``) to the server at ``url`` or into a Qdrant Edge shard
    in the folder ``qdrant_path`` (``qdrant_edge.EdgeShard.load`` opens it; a new folder, or one that spladekit wrote
    with ``recreate``: see :meth:`QdrantSearcher.build`; a scratch one if neither); with
    ``output``, also save a spladekit index folder (``spladekit search`` reads it with the qdrant backend), opened
    before the upload."""
    with contextlib.ExitStack() as stack:
        opened = None if output is None else stack.enter_context(open_output(output, folder=True, overwrite=overwrite))
        searcher = QdrantSearcher.build(
            vectors,
            doc_ids=ids,
            url=url,
            path=qdrant_path,
            collection=collection,
            vector_name=vector_name,
            recreate=recreate,
        )
        try:
            if opened is not None:
                searcher.save(opened.staging, meta={"exported_by": "spladekit.export.export_qdrant"})
            points = searcher.count()
        finally:
            searcher.close()
    return {
        "format": "qdrant",
        "collection": collection,
        "vector_name": vector_name,
        "points": points,
        "url": url,
        "qdrant_path": None if qdrant_path is None else str(final_path(qdrant_path)),
        "output": None if output is None else str(final_path(output)),
    }
