"""An index folder from a vectors folder: what ``spladekit index`` does, as one function.

The vectors are read shard by shard (each checked against its manifest), pruned to ``max_active_dims`` when asked,
and streamed into the backend's builder; the folder is written atomically (:func:`spladekit.common.atomic
.open_output`: checked, locked and staged before any vector is read)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import scipy.sparse as sp

from spladekit.common.atomic import open_output
from spladekit.common.errors import SpladekitError
from spladekit.common.sparse import check_max_active_dims, keep_top_weights
from spladekit.index.base import Restartable
from spladekit.index.registry import backend_class, check_backend


@dataclass(frozen=True)
class BuiltIndex:
    """What :func:`build_index_folder` built."""

    index: str
    backend: str
    docs: int
    vocab_size: int
    params: dict
    max_active_dims: int | None
    postings: int
    build_seconds: float  # building only: reading and verifying the shards is not counted

    def to_dict(self) -> dict:
        return asdict(self)


def build_index_folder(
    vectors: str | Path,
    output: str | Path,
    backend: str = "exact",
    params: dict | None = None,
    max_active_dims: int | None = None,
    overwrite: bool = False,
) -> BuiltIndex:
    """Build a ``backend`` index over the document vectors folder ``vectors`` into the folder ``output``.

    ``params`` (strings or values) are checked with the backend's declarations and its prerequisites before any
    work; ``max_active_dims`` keeps each document's K largest weights (recorded in the manifest)."""
    from spladekit.vectors.artifact import Vectors

    searcher_class = backend_class(backend)
    checked = check_backend(backend, params)  # parameters and prerequisites, before reading the vectors
    check_max_active_dims(max_active_dims)
    with open_output(output, folder=True, overwrite=overwrite) as staged:
        ids: list[str] = []
        meta: dict = {}
        postings = 0
        reading = 0.0  # seconds spent reading and verifying shards, not building

        def blocks() -> Iterator[sp.csr_matrix]:  # shard by shard: pruned, ids and postings collected on the way
            nonlocal meta, postings, reading
            ids.clear()  # a builder may read the blocks twice (a scale derived from the weights): count the last
            postings = 0
            shards = Vectors.blocks(vectors)
            while True:
                started = time.perf_counter()
                block = next(shards, None)
                reading += time.perf_counter() - started
                if block is None:
                    return
                matrix = block.matrix if max_active_dims is None else keep_top_weights(block.matrix, max_active_dims)
                ids.extend(block.ids)
                meta = block.meta
                postings += int(matrix.nnz)
                yield matrix

        started = time.perf_counter()
        with searcher_class.build_from_blocks(Restartable(blocks), **checked) as searcher:
            seconds = time.perf_counter() - started - reading
            if not searcher.n_docs:  # exact, seismic, qdrant and milvus would save an index of nothing
                raise SpladekitError(f"{vectors}: no document vectors: nothing to index")
            searcher.doc_ids = ids
            searcher.save(
                staged.staging,
                meta={
                    "vectors": str(vectors),
                    "model": meta.get("model"),
                    "max_length": meta.get("max_length"),
                    "max_active_dims": max_active_dims,
                },
            )
    return BuiltIndex(
        index=str(output),
        backend=backend,
        docs=searcher.n_docs,
        vocab_size=searcher.vocab_size,
        params=searcher.params,
        max_active_dims=max_active_dims,
        postings=postings,
        build_seconds=round(seconds, 3),
    )
