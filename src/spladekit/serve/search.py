"""The served index: any backend behind :class:`spladekit.index.base.Searcher`, opened once, read-only, and the
documents' text when a collection is given.

The index is loaded from the folder named at start (never one a client names) and only searched: no route writes
to it. Searches run one at a time in a thread of their own (:meth:`SearchService.search`), so a backend whose
engine is not safe to call from several threads at once (an embedded database) is shared safely by concurrent
requests. An index encoded with another vocabulary is refused at start, in one line.

Document text (``--collection``: a JSONL corpus, a BEIR folder, a Hugging Face or ir_datasets id, read with
:func:`spladekit.data.stream.iter_corpus`) is kept in memory for the indexed ids only: what hits show and what
their explanations re-encode.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from spladekit.common.errors import SpladekitError
from spladekit.index.base import Searcher


def check_vocabulary(index: str, searcher: Searcher, model: str, vocab_size: int) -> None:
    """One line refusing an index whose vectors have another vocabulary than the model's."""
    if searcher.vocab_size != vocab_size:
        raise SpladekitError(
            f"{index}: vocabulary mismatch: the index has {searcher.vocab_size} terms, the model {model} "
            f"{vocab_size}: serve the model that encoded its documents"
        )


class SearchService:
    """A loaded index, its document ids and (optionally) their texts."""

    def __init__(
        self, searcher: Searcher, path: str, texts: dict[str, str] | None = None, collection: str | None = None
    ):
        if searcher.doc_ids is None:
            raise SpladekitError(f"{path}: index has no ids.json; rebuild it with `spladekit index`")
        self.searcher, self.path, self.texts, self.collection = searcher, path, texts, collection
        self.doc_ids: list[str] = searcher.doc_ids

    @classmethod
    def open(cls, index: str, model: str, vocab_size: int, collection: str | None = None) -> SearchService:
        """Load ``index`` (its manifest first: a vocabulary mismatch is refused before the files are read) and the
        texts of its documents from ``collection``."""
        from spladekit.index import load_index
        from spladekit.index.store import read_manifest

        manifest = read_manifest(index, verify_files=False)
        if int(manifest["vocab_size"]) != vocab_size:
            raise SpladekitError(
                f"{index}: vocabulary mismatch: the index has {manifest['vocab_size']} terms, the model {model} "
                f"{vocab_size}: serve the model that encoded its documents"
            )
        searcher = load_index(index)
        check_vocabulary(index, searcher, model, vocab_size)
        if searcher.doc_ids is None:
            raise SpladekitError(f"{index}: index has no ids.json; rebuild it with `spladekit index`")
        texts = None if collection is None else read_texts(collection, searcher.doc_ids)
        return cls(searcher, index, texts, collection)

    def search(self, query: sp.csr_matrix, k: int) -> list[tuple[str, float]]:
        """The top ``k`` documents of one query vector (1 × V): (id, score), best first, no padding."""
        result = self.searcher.search(self.searcher.check_queries(query), k=k)
        hits = []
        for row, score in zip(result.doc_indices[0].tolist(), result.scores[0].tolist()):
            if row >= 0:
                hits.append((self.doc_ids[row], float(score)))
        return hits

    def text(self, doc_id: str) -> str | None:
        return None if self.texts is None else self.texts.get(doc_id)

    def describe(self) -> dict:
        return {
            "backend": self.searcher.name,
            "documents": int(self.searcher.n_docs),
            "vocab_size": int(self.searcher.vocab_size),
            "collection": self.collection is not None,
        }

    def close(self) -> None:
        self.searcher.close()


def read_texts(collection: str, ids: list[str]) -> dict[str, str]:
    """The text of each indexed id found in ``collection`` (read lazily; other documents are not kept). A
    collection holding none of the index's ids is refused: it is not the one that was indexed."""
    from spladekit.data.stream import iter_corpus

    wanted = set(ids)
    texts = {doc_id: text for doc_id, text in iter_corpus(collection) if doc_id in wanted}
    if not texts:
        raise SpladekitError(f"{collection}: none of the index's {len(ids)} document ids is in this collection")
    return texts


def query_row(vectors: sp.csr_matrix) -> sp.csr_matrix:
    """One query vector as a float32 1 × V CSR row."""
    return sp.csr_matrix(vectors, dtype=np.float32)
