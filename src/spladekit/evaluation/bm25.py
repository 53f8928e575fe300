"""BM25 over raw text (bm25s, Lucene's formula): the lexical baseline rows of a sweep and the negatives of
``spladekit mine``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Ranker = Callable[[list[str], int], tuple[np.ndarray, np.ndarray]]  # (query texts, depth) → (rows, scores)


def bm25_ranker(texts: list[str], k1: float, b: float, show_progress: bool) -> Ranker:
    """Rank ``texts`` (the corpus) with bm25s: (query texts, depth) → (rows, scores), each n × depth."""
    import bm25s

    tokenizer = bm25s.tokenization.Tokenizer(lower=True, splitter=r"\w+", stopwords=None)
    token_ids = tokenizer.tokenize(texts, update_vocab=True, show_progress=show_progress, return_as="ids")
    retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
    retriever.index((token_ids, tokenizer.get_vocab_dict()), show_progress=show_progress)
    del token_ids  # the index holds what retrieval needs

    def rank(queries: list[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
        query_ids = tokenizer.tokenize(queries, update_vocab=False, show_progress=False, return_as="ids")
        rows, scores = retriever.retrieve(query_ids, k=depth, show_progress=False)
        return np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float32)

    return rank
