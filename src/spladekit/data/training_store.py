"""The training data on disk: memory-mapped Arrow tables and NumPy arrays that every training process opens
read-only, so that the page cache holds one copy however many ranks read it.

:func:`build_store` writes one folder from a format's streamed records (:class:`Source`):

* ``queries.arrow``, ``documents.arrow``: Arrow IPC streams (what ``datasets.Dataset.from_file`` opens) with an
  ``id`` and a ``text`` column; where the training rows hold the texts themselves (text triplets, HF rows) the
  tables have only ``text``, and a text is its own id;
* ``query.npy``, ``positive.npy`` (one row number per group), ``offsets.npy`` (G + 1) and ``negatives.npy``: the
  groups of :func:`merge_pairs`, as row numbers into those tables;
* with teacher scores, ``teacher_positive.npy`` and ``teacher_negatives.npy``, aligned with the groups;
* ``manifest.json``: the counts and the source, written last (the folder appears atomically).

While building, the ids (or, for text rows, the distinct texts) are held in one dict, and the (query, positive,
negative) row numbers in flat int64 arrays: the build needs memory; the training processes need none of it.
"""

from __future__ import annotations

import json
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from spladekit.common.errors import InputError

STORE_VERSION = 1
_BATCH = 65_536  # rows per Arrow record batch
_NONE = -1  # the negative of a row that has none: it places its group, and is dropped


@dataclass
class Source:
    """What a training-data format streams into :func:`build_store`.

    ``rows``: ``(query key, positive key, negative keys, line)`` in file order; ``queries`` / ``documents``:
    ``(id, text, line)`` records, or None when the keys are the texts. ``teacher``: ``(qid, pid, score, line)``.
    The ``*_where`` strings are what errors name."""

    rows: Iterable[tuple[str, str, tuple[str, ...], int | None]]
    where: str
    queries: Iterable[tuple[str, str, int | None]] | None = None
    queries_where: str = ""
    documents: Iterable[tuple[str, str, int | None]] | None = None
    documents_where: str = ""
    teacher: Iterable[tuple[str, str, float, int | None]] | None = None
    teacher_where: str = ""


# ------------------------------------------------------------------------------------------------- tables
class _TableWriter:
    """Append ``(id, text)`` records to an Arrow IPC stream in record batches; ``rows[key]`` is a key's row."""

    def __init__(self, path: Path, with_ids: bool):
        self.with_ids = with_ids
        names = ["id", "text"] if with_ids else ["text"]
        self.schema = pa.schema([(name, pa.large_string()) for name in names])
        self.sink = pa.OSFile(str(path), "wb")
        self.writer = pa.ipc.new_stream(self.sink, self.schema)
        self.rows: dict[str, int] = {}
        self.ids: list[str] = []
        self.texts: list[str] = []

    def add(self, key: str, text: str) -> int:
        row = self.rows[key] = len(self.rows)
        if self.with_ids:
            self.ids.append(key)
        self.texts.append(text)
        if len(self.texts) == _BATCH:
            self.flush()
        return row

    def flush(self) -> None:
        if self.texts:
            columns = ([self.ids] if self.with_ids else []) + [self.texts]
            self.writer.write_batch(pa.record_batch(columns, schema=self.schema))
        self.ids, self.texts = [], []

    def close(self) -> None:
        self.flush()
        self.writer.close()
        self.sink.close()


def _write_records(path: Path, records: Iterable[tuple[str, str, int | None]], where: str) -> _TableWriter:
    table = _TableWriter(path, with_ids=True)
    lines = array("q")  # the line of each row, for the error naming a duplicate's first line
    try:
        for key, text, line in records:
            seen = table.rows.get(key)
            if seen is not None:
                first = f" (first seen on line {lines[seen]})" if lines[seen] else ""
                raise InputError(f"duplicate id {key!r}{first}", where, line)
            lines.append(line or 0)
            table.add(key, text)
    finally:
        table.close()
    if not table.rows:
        raise InputError("no texts in file", where)
    return table


class TextTable:
    """Row number → text (and id) of a memory-mapped ``*.arrow`` table; nothing is copied into memory."""

    def __init__(self, path: Path):
        table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
        self.texts = table.column("text")
        self.ids = table.column("id") if "id" in table.column_names else self.texts

    def __len__(self) -> int:
        return len(self.texts)

    def text(self, row: int) -> str:
        return self.texts[row].as_py()

    def id(self, row: int) -> str:
        return self.ids[row].as_py()


# ------------------------------------------------------------------------------------------------- groups
@dataclass(frozen=True)
class GroupArrays:
    """Groups as row numbers: group g is ``query[g]``, ``positive[g]`` and ``negatives[offsets[g]:offsets[g+1]]``."""

    query: np.ndarray
    positive: np.ndarray
    offsets: np.ndarray
    negatives: np.ndarray


def merge_pairs(query: np.ndarray, positive: np.ndarray, negative: np.ndarray) -> GroupArrays:
    """Merge (query, positive, negative) row triples, in file order, into groups: one per distinct (query,
    positive), in order of first appearance, with its negatives in order of first appearance and without repeats.
    A negative of ``-1`` (a row without negatives) places its group but is not kept; a group left with no
    negative is dropped."""
    width = int(max(positive.max(initial=0), negative.max(initial=0))) + 2  # the key below stays injective
    _, first, inverse = np.unique(query * width + positive, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    group = rank[inverse.reshape(-1)]
    real = np.flatnonzero(negative != _NONE)
    _, kept = np.unique(group[real] * width + negative[real], return_index=True)
    kept = real[np.sort(kept)]  # first occurrences, in file order
    kept = kept[np.argsort(group[kept], kind="stable")]
    counts = np.bincount(group[kept], minlength=len(first))
    starts = first[np.argsort(first, kind="stable")]  # a pair of each group, group order
    alive = counts > 0
    offsets = np.concatenate([[0], np.cumsum(counts[alive])])
    return GroupArrays(query[starts][alive], positive[starts][alive], offsets, negative[kept])


class _Rows:
    """The (query, positive, negative) row numbers of a source's rows, resolved as they stream."""

    def __init__(self) -> None:
        self.query, self.positive, self.negative = array("q"), array("q"), array("q")

    def add(self, query: int, positive: int, negatives: list[int]) -> None:
        for negative in negatives or [_NONE]:
            self.query.append(query)
            self.positive.append(positive)
            self.negative.append(negative)

    def merged(self) -> GroupArrays:
        columns = (self.query, self.positive, self.negative)
        return merge_pairs(*(np.frombuffer(column, dtype=np.int64) for column in columns))


def _resolve_rows(source: Source, queries: _TableWriter, documents: _TableWriter, keyed: bool) -> GroupArrays:
    """Row numbers of every row's texts; an id that the queries or the collection lack is an error (file:line)."""
    rows = _Rows()

    def by_id(key: str, table: _TableWriter, what: str, where: str, line: int | None) -> int:
        row = table.rows.get(key)
        if row is None:
            raise InputError(f"unknown {what} id {key!r} (not in {where})", source.where, line)
        return row

    def by_text(key: str, table: _TableWriter, *_: object) -> int:
        row = table.rows.get(key)
        return table.add(key, key) if row is None else row

    find = by_id if keyed else by_text
    for query, positive, negatives, line in source.rows:
        rows.add(
            find(query, queries, "query", source.queries_where, line),
            find(positive, documents, "document", source.documents_where, line),
            [find(doc, documents, "document", source.documents_where, line) for doc in negatives],
        )
    if not rows.query:
        raise InputError("no training examples", source.where)
    return rows.merged()


def _teacher_scores(
    source: Source, queries: _TableWriter, documents: _TableWriter, groups: GroupArrays
) -> tuple[np.ndarray, np.ndarray]:
    """The teacher score of every (group query, positive) and (group query, negative), or an error naming the first
    pair without one; a pair given twice is an error (file:line). Pairs of unknown ids are not needed: skipped."""
    assert source.teacher is not None
    width = len(documents.rows)
    keys, values, lines = array("q"), array("d"), array("q")
    for qid, pid, value, line in source.teacher:
        query, document = queries.rows.get(qid), documents.rows.get(pid)
        if query is not None and document is not None:
            keys.append(query * width + document)
            values.append(value)
            lines.append(line or 0)
    given = np.frombuffer(keys, dtype=np.int64)
    order = np.argsort(given, kind="stable")
    key, score = given[order], np.frombuffer(values, dtype=np.float64)[order]

    def pair(packed: int) -> str:
        query, document = divmod(packed, width)
        return f"qid {_key(queries, query)!r}, pid {_key(documents, document)!r}"

    repeated = order[np.flatnonzero(key[1:] == key[:-1]) + 1]  # the later line of each repeat (a stable sort)
    if repeated.size:
        at = int(repeated[np.argmin(np.frombuffer(lines, dtype=np.int64)[repeated])])
        raise InputError(f"duplicate teacher score for {pair(int(given[at]))}", source.teacher_where, lines[at] or None)
    per_negative = np.repeat(groups.query, np.diff(groups.offsets))
    found = []
    for wanted in (groups.query * width + groups.positive, per_negative * width + groups.negatives):
        at = np.minimum(np.searchsorted(key, wanted), max(len(key) - 1, 0))
        missing = np.flatnonzero(key[at] != wanted) if len(key) else np.arange(len(wanted))
        if missing.size:
            raise InputError(f"no teacher score for {pair(int(wanted[missing[0]]))}", source.teacher_where)
        found.append(score[at])
    return found[0], found[1]


def _key(table: _TableWriter, row: int) -> str:
    return next(key for key, at in table.rows.items() if at == row)  # only for an error message


# ------------------------------------------------------------------------------------------------- the store
def build_store(source: Source, folder: Path) -> dict:
    """Write the store of ``source`` into the (empty, staging) ``folder``; returns its manifest."""
    started = time.perf_counter()
    keyed = source.queries is not None
    if keyed:
        assert source.queries is not None and source.documents is not None
        queries = _write_records(folder / "queries.arrow", source.queries, source.queries_where)
        documents = _write_records(folder / "documents.arrow", source.documents, source.documents_where)
        groups = _resolve_rows(source, queries, documents, keyed=True)
    else:
        queries = _TableWriter(folder / "queries.arrow", with_ids=False)
        documents = _TableWriter(folder / "documents.arrow", with_ids=False)
        try:
            groups = _resolve_rows(source, queries, documents, keyed=False)
        finally:
            queries.close()
            documents.close()
    if not len(groups.query):
        raise InputError("no training examples (every query lacks a positive or a negative)", source.where)
    arrays = {"query": groups.query, "positive": groups.positive, "offsets": groups.offsets}
    arrays["negatives"] = groups.negatives
    if source.teacher is not None:
        arrays["teacher_positive"], arrays["teacher_negatives"] = _teacher_scores(source, queries, documents, groups)
    for name, values in arrays.items():
        np.save(folder / f"{name}.npy", values)
    manifest = {
        "version": STORE_VERSION,
        "source": source.where,
        "queries": len(queries.rows),
        "documents": len(documents.rows),
        "groups": len(groups.query),
        "negatives": len(groups.negatives),
        "teacher": source.teacher is not None,
        "build_seconds": round(time.perf_counter() - started, 3),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


@dataclass(frozen=True)
class Store:
    """An opened store: the two text tables and the group arrays, all memory-mapped read-only."""

    folder: Path
    queries: TextTable
    documents: TextTable
    groups: GroupArrays
    teacher: tuple[np.ndarray, np.ndarray] | None
    manifest: dict


def open_store(folder: Path) -> Store:
    """Open a store written by :func:`build_store` (its manifest says it is complete)."""
    manifest = json.loads((folder / "manifest.json").read_text())

    def mapped(name: str) -> np.ndarray:
        return np.load(folder / f"{name}.npy", mmap_mode="r")

    groups = GroupArrays(mapped("query"), mapped("positive"), mapped("offsets"), mapped("negatives"))
    teacher = (mapped("teacher_positive"), mapped("teacher_negatives")) if manifest["teacher"] else None
    return Store(
        folder, TextTable(folder / "queries.arrow"), TextTable(folder / "documents.arrow"), groups, teacher, manifest
    )
