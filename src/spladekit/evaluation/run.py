"""``Run``: the artifact between search and evaluation — a ranked list of documents per query.

TREC format, one hit per line: ``query_id Q0 doc_id rank score tag``. Hits are kept best first; equal
scores keep the order the search returned them in (the backends order ties by document row), so a run
written and read back ranks identically. ``Run.scores`` is the ``{query_id: {doc_id: score}}`` mapping
that ``ir_measures`` takes directly. Ids must be ones a TREC line can carry
(:func:`spladekit.common.lines.id_problem`): ``write`` refuses any other rather than write a file that
nothing can read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import id_problem, numbered_lines


@dataclass
class Run:
    """``scores[query_id]`` maps document ids to scores, in rank order (best first)."""

    scores: dict[str, dict[str, float]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.scores)

    def __contains__(self, query_id: object) -> bool:
        return query_id in self.scores

    def ranking(self, query_id: str) -> list[str]:
        """Document ids of one query, best first."""
        return list(self.scores.get(query_id, {}))

    @classmethod
    def from_hits(cls, query_ids: Sequence[str], doc_ids: Sequence[str], rows: np.ndarray, scores: np.ndarray) -> Run:
        """From a search's ``n_queries × k`` document rows (-1: no hit) and scores, best first per row."""
        if len(query_ids) != len(rows):
            raise ValueError(f"{len(query_ids)} query ids for {len(rows)} result rows")
        return cls(
            {
                query_id: {doc_ids[row]: float(score) for row, score in zip(hit_rows, hit_scores) if row >= 0}
                for query_id, hit_rows, hit_scores in zip(query_ids, rows, scores)
            }
        )

    def without_self_hits(self, k: int | None = None) -> tuple[Run, int]:
        """The run without any document whose id equals its query's id, cut to ``k`` hits per query, and how
        many such self-hits were dropped (BEIR's ``ignore_identical_ids``; see ``Collection.drop_self_hits``)."""
        kept: dict[str, dict[str, float]] = {}
        dropped = 0
        for query_id, hits in self.scores.items():
            dropped += query_id in hits
            others = [(doc_id, score) for doc_id, score in hits.items() if doc_id != query_id]
            kept[query_id] = dict(others[:k])
        return Run(kept), dropped

    def write(self, path: str | Path, tag: str = "spladekit") -> Path:
        """Write the run as a TREC file, atomically; ranks follow the stored order (best first).

        An id (or ``tag``) that a TREC line cannot carry is a :class:`SpladekitError`, and nothing is written."""
        self.check_ids(tag)
        with atomic_file(path) as stream:
            for query_id, hits in self.scores.items():
                for rank, (doc_id, score) in enumerate(_ranked(hits), start=1):
                    stream.write(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}\n")
        return Path(path)

    def check_ids(self, tag: str = "spladekit") -> None:
        """Refuse ids (and a tag) that would break the TREC columns: empty, or holding whitespace."""
        problem = id_problem(tag)
        if problem is not None:
            raise SpladekitError(f"run tag {problem}")
        for query_id, hits in self.scores.items():
            problem = id_problem(query_id)
            if problem is not None:
                raise SpladekitError(f"query id {problem}")
            for doc_id in hits:
                problem = id_problem(doc_id)
                if problem is not None:
                    raise SpladekitError(f"document id {problem} (query {query_id!r})")

    @classmethod
    def read(cls, path: str | Path) -> Run:
        """Read a TREC run file strictly (``file:line`` errors); hits are ordered by their rank column."""
        path = Path(path)
        ranked: dict[str, list[tuple[int, str, float]]] = {}
        seen: dict[str, set[str]] = {}
        for number, line in numbered_lines(path):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 6:
                raise InputError(
                    f"expected 6 fields (query_id Q0 doc_id rank score tag), got {len(fields)}", path, number
                )
            query_id, _, doc_id, rank, score, _ = fields
            try:
                value = float(score)
            except ValueError:
                raise InputError(f"score must be a number, got {score!r}", path, number) from None
            try:
                position = int(rank)
            except ValueError:
                raise InputError(f"rank must be an integer, got {rank!r}", path, number) from None
            if doc_id in seen.setdefault(query_id, set()):
                raise InputError(f"document {doc_id!r} listed twice for query {query_id!r}", path, number)
            seen[query_id].add(doc_id)
            ranked.setdefault(query_id, []).append((position, doc_id, value))
        if not ranked:
            raise InputError("no results in run file", path)
        return cls(
            {
                query_id: {doc_id: score for _, doc_id, score in sorted(hits, key=lambda hit: hit[0])}
                for query_id, hits in ranked.items()
            }
        )


def _ranked(hits: dict[str, float]) -> list[tuple[str, float]]:
    """Best first; a stable sort, so equal scores keep their stored order."""
    return sorted(hits.items(), key=lambda hit: -hit[1])
