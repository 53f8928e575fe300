"""The training data on disk: memory-mapped Arrow tables and NumPy arrays that every training process opens
read-only, so that the page cache holds one copy however many ranks read it.

:func:`build_store` writes one folder from a format's streamed records (:class:`Source`):

* ``queries.arrow``, ``documents.arrow``: Arrow IPC streams (what ``datasets.Dataset.from_file`` opens) with an
  ``id`` and a ``text`` column; where the training rows hold the texts themselves (text triplets, HF rows) the
  tables have only ``text``, and a text is its own id;
* ``query.npy``, ``positive.npy`` (one row number per group), ``offsets.npy`` (G + 1) and ``negatives.npy``: the
  groups of :func:`merge_pairs`, as row numbers into those tables;
* with teacher scores, ``teacher_positive.npy`` and ``teacher_negatives.npy``, aligned with the groups;
* ``manifest.json``: the counts, the source, the byte size and sha256 of every file above and a checksum of its
  own content; written last (the folder appears atomically).

While building, the ids (or, for text rows, the distinct texts) are held in one dict, and the (query, positive,
negative) row numbers in flat int64 arrays: the build needs memory; the training processes need none of it.

The store is derived data, so :func:`open_store` trusts nothing it has not checked: a store that fails a check is
a :class:`DamagedStore` (the cache rebuilds it), never data to train on. At every open: the manifest's own checksum,
every file present with its recorded size, the tables' row counts and the arrays' dtypes, shapes and values
(offsets start at 0, increase, end at the negatives' count; every row number in range; teacher arrays aligned):
one pass over the row-number arrays, far cheaper than a checksum of the tables.

The sha256 of the files is checked once per version of a file, not at every open: hashing a store of MS MARCO's
size reads every page of its gigabytes, and would be paid by each of N ranks at every start and every run of a
sweep. So an open that has hashed a file records its stamp (size, mtime,
ctime, inode) in ``verified.json``; a later open hashes only the files whose stamp changed. Any change made
through the file system moves the ctime, which programs cannot set (``touch``, ``rsync -t`` and ``cp -p`` restore
the mtime only), and a copy has new inodes; a stamp less than two seconds old is not recorded, since a file
system's clock ticks coarsely (a change within the same tick could leave the same stamp): the first opens after a
build hash everything. ``verified.json`` is only ever a shortcut: missing, damaged or stale, the files are hashed
again. Bit rot below the file system (the disk's own errors) is left to the disk and the file system.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from spladekit.common.checksums import sha256_file
from spladekit.common.errors import InputError

STORE_VERSION = 2  # 2: the manifest records every file's size and sha256, and its own checksum
MANIFEST = "manifest.json"
VERIFIED = "verified.json"  # the stamps of the files whose sha256 an open has checked (see the module docstring)
TABLES = ("queries.arrow", "documents.arrow")
GROUP_FILES = ("query.npy", "positive.npy", "offsets.npy", "negatives.npy")
TEACHER_FILES = ("teacher_positive.npy", "teacher_negatives.npy")
COUNTS = ("queries", "documents", "groups", "negatives")
_RACY_NS = 2 * 10**9  # a stamp younger than this is not recorded: file system clocks tick in up to 2 s
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
    """Row number → text (and id) of a memory-mapped ``*.arrow`` table; nothing is copied into memory.

    :func:`open_store` checks a table's checksum before use; a text that still does not decode (the file changed
    under a running process) is an :class:`InputError` naming the file, not a ``UnicodeDecodeError``."""

    def __init__(self, path: Path):
        self.path = path
        self.table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
        self.texts = self.table.column("text")
        self.ids = self.table.column("id") if "id" in self.table.column_names else self.texts

    def __len__(self) -> int:
        return len(self.texts)

    def text(self, row: int) -> str:
        return self._value(self.texts, row)

    def id(self, row: int) -> str:
        return self._value(self.ids, row)

    def _value(self, column: pa.ChunkedArray, row: int) -> str:
        try:
            return column[row].as_py()
        except (UnicodeDecodeError, pa.ArrowException) as error:
            raise InputError(
                f"row {row}: damaged text ({error}); the store changed after it was checked: "
                f"remove {self.path.parent} to rebuild it",
                self.path,
            ) from None


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
    return write_manifest(folder, manifest)


def store_files(teacher: bool) -> tuple[str, ...]:
    """The files of a store (the manifest aside), with or without teacher scores."""
    return TABLES + GROUP_FILES + (TEACHER_FILES if teacher else ())


def _checksum(manifest: dict) -> str:
    """The checksum of a manifest's content (its ``checksum`` aside): a changed byte anywhere in it shows."""
    content = {key: value for key, value in manifest.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def write_manifest(folder: Path, manifest: dict) -> dict:
    """Write ``manifest.json``: ``manifest``'s counts, the byte size and sha256 of every store file in ``folder``,
    and the checksum of the whole; returns it."""
    manifest = {key: value for key, value in manifest.items() if key not in ("files", "checksum")}
    manifest["files"] = {
        name: {"bytes": (folder / name).stat().st_size, "sha256": sha256_file(folder / name)}
        for name in store_files(manifest["teacher"])
    }
    manifest["checksum"] = _checksum(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
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


class DamagedStore(InputError):
    """A store folder that fails a check of :func:`open_store`: derived data, to be rebuilt, never used."""


def open_store(folder: Path) -> Store:
    """Open the store in ``folder`` after checking it (see the module docstring); a :class:`DamagedStore` naming
    the file and what is wrong if any check fails."""
    manifest = _read_manifest(folder)
    files: dict = manifest["files"]
    stamps = {name: _stamp(folder / name, files[name]["bytes"]) for name in files}
    checked = _checked_stamps(folder, manifest["checksum"])
    hashed = [name for name in files if checked.get(name) != stamps[name]]
    for name in hashed:
        try:
            digest = sha256_file(folder / name)
        except OSError as error:
            raise DamagedStore(f"unreadable ({error.strerror or error})", folder / name) from None
        if digest != files[name]["sha256"]:
            raise DamagedStore("sha256 differs from the manifest: the file changed or is damaged", folder / name)
    store = _checked_structure(folder, manifest)
    if hashed:
        _record_stamps(folder, manifest["checksum"], stamps, checked)
    return store


def _read_manifest(folder: Path) -> dict:
    """The manifest, its checksum, version, counts and file list checked."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise DamagedStore("missing file", path) from None
    except (OSError, ValueError) as error:  # ValueError: not UTF-8 or not JSON
        raise DamagedStore(f"unreadable ({error})", path) from None
    if not isinstance(manifest, dict) or manifest.get("checksum") != _checksum(manifest):
        raise DamagedStore("its content does not match its checksum", path)
    if manifest.get("version") != STORE_VERSION:
        raise DamagedStore(f"store version {manifest.get('version')!r}, not {STORE_VERSION}", path)
    counts = [manifest.get(key) for key in COUNTS]
    if not all(type(count) is int and count >= 0 for count in counts) or type(manifest.get("teacher")) is not bool:
        raise DamagedStore(f"expected counts {', '.join(COUNTS)} and a teacher flag", path)
    files = manifest.get("files")
    if not isinstance(files, dict) or sorted(files) != sorted(store_files(manifest["teacher"])):
        raise DamagedStore(f"expected the files {', '.join(store_files(manifest['teacher']))}", path)
    for name, entry in files.items():
        if (
            not isinstance(entry, dict)
            or type(entry.get("bytes")) is not int
            or not isinstance(entry.get("sha256"), str)
        ):
            raise DamagedStore(f"files: {name!r} needs a byte size and a sha256", path)
    return manifest


def _stamp(path: Path, size: int) -> list[int]:
    """What changes when ``path`` is written: its size, mtime, ctime and inode; the file must have ``size`` bytes."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise DamagedStore("missing file", path) from None
    except OSError as error:
        raise DamagedStore(f"unreadable ({error.strerror or error})", path) from None
    if stat.st_size != size:
        raise DamagedStore(f"{stat.st_size} bytes, the manifest says {size}", path)
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _checked_stamps(folder: Path, checksum: str) -> dict:
    """The recorded stamps of the files whose sha256 was checked against this manifest; {} when there is no usable
    record (it is only a shortcut)."""
    try:
        record = json.loads((folder / VERIFIED).read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or record.get("manifest") != checksum or not isinstance(record.get("files"), dict):
        return {}
    return record["files"]


def _record_stamps(folder: Path, checksum: str, stamps: dict, recorded: dict) -> None:
    """Record the stamps old enough to be trusted (see ``_RACY_NS``) in place of the ``recorded`` ones, atomically.
    Best effort: a read-only cache, or a folder replaced meanwhile, only means that the next open hashes again."""
    settled = time.time_ns() - _RACY_NS
    trusted = {name: stamp for name, stamp in stamps.items() if stamp[2] <= settled}
    if not trusted or trusted == recorded:
        return
    staging = folder / f".{VERIFIED}.{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(staging, "x", encoding="utf-8") as stream:  # "x": never recreates a folder removed meanwhile
            stream.write(json.dumps({"manifest": checksum, "files": trusted}) + "\n")
        os.replace(staging, folder / VERIFIED)
    except OSError:
        staging.unlink(missing_ok=True)


def _checked_structure(folder: Path, manifest: dict) -> Store:
    """Open the tables and arrays, checking them against the manifest's counts and each other."""
    queries, documents = (_table(folder / name, manifest[name.removesuffix(".arrow")]) for name in TABLES)
    if queries.table.schema != documents.table.schema:
        raise DamagedStore("its columns differ from those of queries.arrow", folder / "documents.arrow")
    groups, negatives = manifest["groups"], manifest["negatives"]

    def array(name: str, dtype: type, length: int) -> np.ndarray:
        path = folder / f"{name}.npy"
        try:
            values = np.load(path, mmap_mode="r")
        except (OSError, ValueError, EOFError) as error:  # EOFError: an empty file
            raise DamagedStore(f"not a NumPy array ({error})", path) from None
        if values.dtype != dtype or values.shape != (length,):
            raise DamagedStore(
                f"{values.dtype} of shape {values.shape}, expected {np.dtype(dtype)} of ({length},)", path
            )
        return values

    def in_range(name: str, values: np.ndarray, rows: int) -> None:
        if len(values) and (int(values.min()) < 0 or int(values.max()) >= rows):
            raise DamagedStore(f"row numbers outside 0…{rows - 1}", folder / f"{name}.npy")

    found = GroupArrays(
        array("query", np.int64, groups),
        array("positive", np.int64, groups),
        array("offsets", np.int64, groups + 1),
        array("negatives", np.int64, negatives),
    )
    in_range("query", found.query, len(queries))
    in_range("positive", found.positive, len(documents))
    in_range("negatives", found.negatives, len(documents))
    offsets = found.offsets
    if offsets[0] != 0 or offsets[-1] != negatives or not bool((np.diff(offsets) > 0).all()):
        raise DamagedStore(
            f"offsets must increase from 0 to the negatives' count ({negatives})", folder / "offsets.npy"
        )
    teacher = None
    if manifest["teacher"]:
        teacher = (array("teacher_positive", np.float64, groups), array("teacher_negatives", np.float64, negatives))
    return Store(folder, queries, documents, found, teacher, manifest)


def _table(path: Path, rows: int) -> TextTable:
    """A text table with ``rows`` rows and string columns ``text`` (and ``id``)."""
    try:
        table = TextTable(path)
    except (OSError, KeyError, pa.ArrowException) as error:  # KeyError: no "text" column
        raise DamagedStore(f"not a text table ({error})", path) from None
    schema = table.table.schema
    if schema.names not in (["text"], ["id", "text"]) or any(kind != pa.large_string() for kind in schema.types):
        raise DamagedStore(f"expected large_string columns [id,] text, got {schema}", path)
    if len(table) != rows:
        raise DamagedStore(f"{len(table)} rows, the manifest says {rows}", path)
    return table
