"""Training data: (query, positive, hard negatives[, teacher scores]) groups from five sources.

``load_training_set(config.data)`` reads, by ``data.format``:

* ``triplets``: a TSV of texts, ``query<TAB>positive<TAB>negative[<TAB>negative…]`` (MS MARCO
  ``triples.train``);
* ``id_triplets``: the same with ids, plus ``data.queries`` and ``data.collection`` (BEIR JSONL or
  ``id<TAB>text`` TSV, as MS MARCO's ``queries.train.tsv`` / ``collection.tsv``);
* ``hard_negatives``: the sentence-transformers ``msmarco-hard-negatives.jsonl(.gz)`` layout, one
  ``{"qid", "pos": [pid…], "neg": {system: [pid…]}}`` per line, plus queries and collection;
* ``ir_datasets``: an id with doc pairs, e.g. ``msmarco-passage/train/triples-small``;
* ``hf``: a Hugging Face dataset (hub name, folder or data file): first column query, second positive,
  the others negatives (the sentence-transformers triplet layout).

Lines that share a (query, positive) are merged, so several rows with one negative each give one
query with several hard negatives. Teacher scores (``data.teacher``) are matched by (qid, pid).

The data is read once into a store of memory-mapped Arrow tables and arrays
(:mod:`spladekit.data.training_store`) under ``$SPLADEKIT_CACHE/training/KEY`` (default
``~/.cache/spladekit``), which every training process then opens read-only: the operating system's page cache
holds one copy for all ranks, and a process's own memory does not grow with the collection. KEY covers the
settings that change the groups and each input file's identity (absolute path, size, modification time — how
``datasets`` keys local files); a remote dataset (``hf`` hub name, ``ir_datasets`` id) is keyed by its name.
The first process builds the store under a lock; the others wait for it. Every open checks the store first
(:func:`~spladekit.data.training_store.open_store`: sizes, structure, checksums): an entry that fails is rebuilt
with one warning naming the folder and what is wrong, never used.

Sampling is a pure function of (seed, example index): example i of the run is group
``perm_e[i mod N]`` with ``e = i // N`` and ``perm_e`` a seeded permutation, and its K negatives are a
seeded draw from the group's. So the data position of a run is just its step: resuming needs no
iterator state, and every process of a distributed run knows the whole batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, cast

import numpy as np

from spladekit.common.atomic import build_once
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import check_id, json_records, numbered_lines
from spladekit.common.schema import MIN_TOKEN_LIMIT, declared
from spladekit.common.sources import Library, cache_root, fetching, is_local
from spladekit.data.jsonl import checked_record
from spladekit.data.teacher import READERS
from spladekit.data.training_store import STORE_VERSION, DamagedStore, Source, Store, build_store, open_store
from spladekit.data.triplets import iter_triplets

logger = logging.getLogger(__name__)


@dataclass
class DataConfig:
    format: Literal["triplets", "id_triplets", "hard_negatives", "ir_datasets", "hf"] = declared(
        "triplets", "how data.path is read (docs/training.md, Training data)"
    )
    path: str = declared("", "TSV file, hard-negatives JSONL, ir_datasets id or HF dataset name/folder; required")
    queries: str | None = declared(None, "id_triplets / hard_negatives: queries (BEIR JSONL or id<TAB>text TSV)")
    collection: str | None = declared(None, "id_triplets / hard_negatives: documents (BEIR JSONL or id<TAB>text TSV)")
    header: bool = declared(False, "id_triplets: the first line is a header")
    columns: int | None = declared(
        None, "triplet TSVs: use only the first N columns (query, positive, negatives...)", minimum=3
    )
    negative_systems: list[str] | None = declared(None, "hard_negatives: which systems' negatives (null: all)")
    hf_config: str | None = declared(None, "hf: the dataset's configuration name")
    split: str = declared("train", "ir_datasets / hf: the split to read")
    teacher: str | None = declared(None, "teacher scores for distillation (loss.name margin_mse or kl)")
    teacher_format: Literal["jsonl", "ce_scores"] = declared(
        "jsonl", 'jsonl: {"qid", "pid", "score"} per line; ce_scores: sentence-transformers\' cross-encoder scores'
    )
    negatives: int = declared(1, "hard negatives per query", minimum=1)
    limit: int | None = declared(None, "read at most this many lines / pairs (null: all)", minimum=1)
    query_max_length: int = declared(32, "query token limit", minimum=MIN_TOKEN_LIMIT)
    doc_max_length: int = declared(128, "document token limit", minimum=MIN_TOKEN_LIMIT)


SAMPLING_ONLY = ("negatives", "query_max_length", "doc_max_length")  # DataConfig fields the store does not depend on


@dataclass(frozen=True)
class Group:
    """One query, one positive and its pool of hard negatives, by id (for a text source, the ids are the texts)."""

    query: str
    positive: str
    negatives: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    query: str
    positive: str
    negatives: tuple[str, ...]
    teacher: tuple[float, ...] | None  # teacher scores of (positive, negatives…)


@dataclass
class TrainingSet:
    """The groups of a store, sampled by (seed, example index); texts are read from the memory-mapped tables."""

    store: Store
    source: str = ""
    _permutation: tuple = field(default=(None, None, None), repr=False)  # (seed, epoch, order) of the last epoch

    def __len__(self) -> int:
        return len(self.store.groups.query)

    def _order(self, seed: int, epoch: int) -> np.ndarray:
        if self._permutation[:2] != (seed, epoch):
            self._permutation = (seed, epoch, np.random.default_rng([seed, epoch]).permutation(len(self)))
        return self._permutation[2]

    def example(self, index: int, negatives: int, seed: int) -> Example:
        """Example ``index`` (0-based, counted over the whole run) with ``negatives`` hard negatives."""
        epoch, position = divmod(index, len(self))
        groups, documents = self.store.groups, self.store.documents
        g = int(self._order(seed, epoch)[position])
        start, end = int(groups.offsets[g]), int(groups.offsets[g + 1])
        rng = np.random.default_rng([seed, epoch, position, 1])
        picks = rng.choice(end - start, size=negatives, replace=end - start < negatives)
        teacher = None
        if self.store.teacher is not None:
            positive_scores, negative_scores = self.store.teacher
            teacher = (float(positive_scores[g]), *(float(negative_scores[start + int(i)]) for i in picks))
        return Example(
            self.store.queries.text(int(groups.query[g])),
            documents.text(int(groups.positive[g])),
            tuple(documents.text(int(groups.negatives[start + int(i)])) for i in picks),
            teacher,
        )

    def batch(self, step: int, batch_size: int, negatives: int, seed: int) -> list[Example]:
        """The ``batch_size`` examples of optimizer step ``step`` (1-based)."""
        start = (step - 1) * batch_size
        return [self.example(start + i, negatives, seed) for i in range(batch_size)]

    def groups(self) -> Iterator[Group]:
        """Every group by id, in order (for inspection: one Python object a group)."""
        groups, queries, documents = self.store.groups, self.store.queries, self.store.documents
        for g in range(len(self)):
            pool = groups.negatives[groups.offsets[g] : groups.offsets[g + 1]]
            yield Group(
                queries.id(int(groups.query[g])),
                documents.id(int(groups.positive[g])),
                tuple(documents.id(int(row)) for row in pool),
            )

    def pairs(self, count: int) -> list[tuple[str, str]]:
        """The first ``count`` (query, positive) text pairs (auto-k and step-0 checks)."""
        groups = self.store.groups
        return [
            (self.store.queries.text(int(groups.query[g])), self.store.documents.text(int(groups.positive[g])))
            for g in range(min(count, len(self)))
        ]

    def document_rows(self) -> np.ndarray:
        """The row of every distinct document of the groups (positives and negatives), first occurrence first."""
        groups = self.store.groups
        counts = np.diff(groups.offsets)
        flat = np.empty(len(self) + len(groups.negatives), dtype=np.int64)
        flat[groups.offsets[:-1] + np.arange(len(self))] = groups.positive
        flat[np.arange(len(groups.negatives)) + np.repeat(np.arange(len(self)), counts) + 1] = groups.negatives
        _, first = np.unique(flat, return_index=True)
        return flat[np.sort(first)]

    def document_texts(self, rows: np.ndarray) -> Iterator[str]:
        """The texts of ``rows``, read one at a time."""
        for row in rows:
            yield self.store.documents.text(int(row))


# ----------------------------------------------------------------------------------------- readers
def iter_id_texts(path: str | Path) -> Iterator[tuple[str, str, int]]:
    """``(id, text, line)`` from a BEIR JSONL file (``.jsonl``) or an ``id<TAB>text`` TSV (MS MARCO), read
    lazily and checked line by line (duplicates are the store's to find)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    if path.suffix == ".jsonl":
        for number, record in json_records(numbered_lines(path), path):
            yield (*checked_record(number, record, path), number)
        return
    for number, line in numbered_lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        key, separator, text = line.partition("\t")
        if not separator or not key or not text.strip():
            raise InputError("expected id<TAB>text with a non-empty id and text", path, number)
        yield check_id(key, "id", path, number), text, number


def _triplet_rows(data: DataConfig) -> Iterator[tuple[str, str, tuple[str, ...], int]]:
    for t in iter_triplets(data.path, limit=data.limit, header=data.header, columns=data.columns):
        yield t.query, t.positive, t.negatives, t.line


def _text_triplets(data: DataConfig) -> Source:
    return Source(_triplet_rows(data), data.path)


def _with_collection(data: DataConfig, rows: Iterator) -> Source:
    # validate() requires data.queries and data.collection with these formats
    queries, collection = cast(str, data.queries), cast(str, data.collection)
    return Source(rows, data.path, iter_id_texts(queries), queries, iter_id_texts(collection), collection)


def _id_triplets(data: DataConfig) -> Source:
    return _with_collection(data, _triplet_rows(data))


def _hard_negative_rows(data: DataConfig) -> Iterator[tuple[str, str, tuple[str, ...], int]]:
    for number, line in numbered_lines(data.path):
        if data.limit is not None and number > data.limit:
            break
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON ({error.msg} at column {error.colno})", data.path, number) from None
        if (
            not isinstance(record, dict)
            or not {"qid", "pos", "neg"} <= record.keys()
            or not isinstance(record["pos"], list)
            or not isinstance(record["neg"], dict)
        ):
            raise InputError('expected {"qid": …, "pos": [pid…], "neg": {system: [pid…]}}', data.path, number)
        qid = check_id(record["qid"], "qid", data.path, number)
        systems = data.negative_systems or list(record["neg"])
        listed = [record["neg"].get(system) or [] for system in systems]
        if not all(isinstance(pids, list) for pids in listed):
            raise InputError('"neg" must map each system to a list of pids', data.path, number)
        positives = [check_id(pid, "a pid", data.path, number) for pid in record["pos"]]
        negatives = [check_id(pid, "a pid", data.path, number) for pids in listed for pid in pids]
        negatives = [pid for pid in dict.fromkeys(negatives) if pid not in positives]
        for pid in positives:
            yield qid, pid, tuple(negatives), number


def _hard_negatives(data: DataConfig) -> Source:
    if not Path(data.path).is_file():
        raise InputError("no such file", data.path)
    return _with_collection(data, _hard_negative_rows(data))


def _ir_datasets(data: DataConfig) -> Source:
    try:
        import ir_datasets
    except ImportError:
        raise SpladekitError(
            "data.format 'ir_datasets' needs the ir_datasets package (pip install ir_datasets)"
        ) from None
    try:
        dataset = ir_datasets.load(data.path)
    except KeyError:
        raise InputError("unknown ir_datasets id", data.path) from None
    if not dataset.has_docpairs():
        raise InputError(
            "this ir_datasets id has no training doc pairs (try msmarco-passage/train/triples-small)", data.path
        )
    pairs = itertools.islice(dataset.docpairs_iter(), data.limit)
    return Source(
        ((pair.query_id, pair.doc_id_a, (pair.doc_id_b,), number) for number, pair in enumerate(pairs, start=1)),
        data.path,
        ((query.query_id, query.text, None) for query in dataset.queries_iter()),
        f"{data.path} [queries]",
        ((doc.doc_id, doc.text, None) for doc in dataset.docs_iter()),
        f"{data.path} [docs]",
    )


def _hf(data: DataConfig) -> Source:
    try:
        import datasets
    except ImportError:
        raise SpladekitError("data.format 'hf' needs the datasets package (pip install datasets)") from None
    path = Path(data.path)
    if path.is_file():
        builder = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(path.suffix)
        if builder is None:
            raise InputError("data.format 'hf' reads .jsonl, .json, .csv or .parquet files", path)
        table = datasets.load_dataset(builder, data_files=str(path), split=data.split)
    else:  # a hub dataset (or a folder of data files) is streamed: rows are read up to data.limit, no full download
        table = datasets.load_dataset(data.path, data.hf_config, split=data.split, streaming=True)

    def rows() -> Iterator[tuple[str, str, tuple[str, ...], int]]:
        for number, row in enumerate(itertools.islice(table, data.limit), start=1):
            names = list(row)
            if len(names) < 3:
                raise InputError(f"expected columns query, positive, negative…; got {names}", data.path)
            for name in names:
                if not isinstance(row[name], str) or not row[name].strip():
                    raise InputError(f"row {number}: column {name!r} must be a non-empty string", data.path)
            yield row[names[0]], row[names[1]], tuple(row[name] for name in names[2:]), number

    return Source(rows(), data.path)


SOURCES = {
    "triplets": _text_triplets,
    "id_triplets": _id_triplets,
    "hard_negatives": _hard_negatives,
    "ir_datasets": _ir_datasets,
    "hf": _hf,
}
REMOTE_FORMATS: dict[str, Library] = {"ir_datasets": "ir_datasets", "hf": "hub"}  # whose cache holds them


# ----------------------------------------------------------------------------------------- the cache
def _identity(value: str) -> object:
    """What the store key records of one input: a local file's absolute path, size and modification time."""
    path = Path(value)
    if not is_local(value) or not path.exists():
        return value  # a remote name (or a missing file: the reader names it)
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


def store_key(data: DataConfig) -> str:
    """The cache key of ``data``'s store (see the module docstring)."""
    settings = {name: value for name, value in asdict(data).items() if name not in SAMPLING_ONLY}
    for name in ("path", "queries", "collection", "teacher"):
        if settings[name] is not None:
            settings[name] = _identity(settings[name])
    text = json.dumps({"version": STORE_VERSION, **settings}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class _Entry:
    """The cache entry of a store, as :func:`build_once` asks whether it is complete: a sound store is opened once
    and kept; a damaged one is reported once (one warning) and rebuilt. The same damaged folder, asked about again
    under the lock or while another process rebuilds it, is neither checked nor reported again."""

    def __init__(self) -> None:
        self.store: Store | None = None
        self.damaged: tuple[int, int] | None = None  # (device, inode) of the damaged folder

    def complete(self, folder: Path) -> bool:
        try:
            stat = folder.stat()
        except FileNotFoundError:
            return False  # not built yet
        if (stat.st_dev, stat.st_ino) == self.damaged:
            return False
        try:
            self.store = open_store(folder)
        except DamagedStore as error:
            self.damaged = (stat.st_dev, stat.st_ino)
            logger.warning("rebuilding a damaged training-data cache entry %s: %s", folder, error)
            return False
        return True


def _source(data: DataConfig) -> Source:
    source = SOURCES[data.format](data)
    if data.teacher is not None:
        source.teacher, source.teacher_where = READERS[data.teacher_format](data.teacher), data.teacher
    return source


def build_training_store(data: DataConfig) -> Store:
    """The store of ``data``: opened from the cache, or built into it (waiting while another process builds it)."""
    folder = cache_root() / "training" / store_key(data)

    def build(staging: Path) -> None:
        library = REMOTE_FORMATS.get(data.format)
        with fetching(data.path, library, "a local file (data.path)") if library else contextlib.nullcontext():
            manifest = build_store(_source(data), staging)
        counts = {key: value for key, value in manifest.items() if key not in ("files", "checksum")}
        logger.info("training data stored in %s (%s)", folder, counts)

    entry = _Entry()
    build_once(folder, entry.complete, build, "the training data")
    return cast(Store, entry.store)


def load_training_set(data: DataConfig) -> TrainingSet:
    """The training set described by a ``DataConfig``, from its store (a failed download: one error line, see
    :func:`spladekit.common.sources.fetching`)."""
    return TrainingSet(build_training_store(data), source=data.path)
