"""What the backends that delegate to a vector database (qdrant, milvus) share: exact top-k with ties
ordered by row, the engine's errors as one line, and how their index folder is kept (:class:`EngineFiles`).

Both engines score sparse vectors by the exact dot product, but order equal scores their own way and
return at most ``limit`` hits. spladekit orders equal scores by lower row, like the ``exact`` backend; when
a tie straddles the k-th place, a lower row with that score may lie beyond the engine's answer, so the
query is asked again with twice the limit until the tie is resolved (:func:`tie_resolved_top_k`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from spladekit.common.errors import SpladekitError
from spladekit.common.sparse import best_first
from spladekit.index.base import SearchResult

DOCUMENTS_FILE = "documents.npz"


class EngineFiles:
    """The index folder of an engine backend: in embedded mode the document matrix, from which the
    collection is rebuilt on load (the engines' own files are databases they rewrite while open, or
    pickles); against a server nothing but the manifest's parameters (the server holds the documents)."""

    SERVER_PARAM: ClassVar[str]  # the parameter naming the server (its URL); empty = embedded mode
    documents: sp.csr_matrix | None

    def write_files(self, folder: Path) -> None:
        if self.documents is not None:
            sp.save_npz(folder / DOCUMENTS_FILE, self.documents, compressed=False)

    @classmethod
    def stored_files(cls, params: dict) -> tuple[str, ...]:
        return () if params.get(cls.SERVER_PARAM) else (DOCUMENTS_FILE,)


# query rows, limit -> per row: (document rows, scores) in any order
EngineQuery = Callable[[list[int], int], list[tuple[np.ndarray, np.ndarray]]]


def tie_resolved_top_k(
    query: EngineQuery, queries: sp.csr_matrix, k: int, n_docs: int, max_limit: int | None = None
) -> SearchResult:
    """Top-k rows per query (score descending, then lower row; scores > 0 only; -1 pads) from an engine.

    Empty queries are not sent. ``query(rows, limit)`` returns the engine's hits for those query rows. An
    answer of ``limit`` hits whose last score equals the k-th may hide an equal-score lower row, so that
    query is asked again with twice the limit, until the answer is shorter than the limit (every hit
    returned), the last score is below the k-th, or the limit reaches ``max_limit`` (the engine's cap; the
    order of the rows tied at the k-th place is then the engine's).
    """
    empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
    hits = [empty] * queries.shape[0]
    pending = [row for row in range(queries.shape[0]) if queries.indptr[row + 1] > queries.indptr[row]]
    cap = n_docs if max_limit is None else min(n_docs, max_limit)
    limit = min(k, cap)
    while pending:
        unresolved = []
        for row, (found, scores) in zip(pending, query(pending, limit)):
            positive = scores > 0
            found, scores = found[positive].astype(np.int64), scores[positive]
            order = best_first(found, scores)
            found, scores = found[order], scores[order]
            if len(found) == limit and limit < cap and scores[-1] == scores[k - 1]:
                unresolved.append(row)
            hits[row] = (found[:k], scores[:k].astype(np.float32))
        pending, limit = unresolved, min(2 * limit, cap)
    return SearchResult.from_hits(hits, k)


@contextmanager
def engine_errors(engine: str, where: str, errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Turn the engine client's ``errors`` (connection refused, unknown collection…) into one SpladekitError
    line naming the engine and ``where`` (a URL, or "embedded"), instead of a client traceback."""
    try:
        yield
    except errors as error:
        reason = " ".join(str(getattr(error, "message", "") or error).split()) or type(error).__name__
        raise SpladekitError(f"{engine} at {where}: {reason}") from None
