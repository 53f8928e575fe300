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

Sampling is a pure function of (seed, example index): example i of the run is group
``perm_e[i mod N]`` with ``e = i // N`` and ``perm_e`` a seeded permutation, and its K negatives are a
seeded draw from the group's. So the data position of a run is just its step: resuming needs no
iterator state, and every process of a distributed run knows the whole batch.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import numpy as np

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import check_id, numbered_lines
from spladekit.common.schema import MIN_TOKEN_LIMIT, allowed
from spladekit.common.sources import Library, fetching
from spladekit.data.jsonl import read_corpus
from spladekit.data.teacher import READERS, TeacherScores
from spladekit.data.triplets import read_triplets


@dataclass
class DataConfig:
    format: Literal["triplets", "id_triplets", "hard_negatives", "ir_datasets", "hf"] = "triplets"
    path: str = ""  # TSV file, hard-negatives JSONL, ir_datasets id or HF dataset name/folder
    queries: str | None = None  # id_triplets / hard_negatives: queries (BEIR JSONL or id<TAB>text TSV)
    collection: str | None = None  # id_triplets / hard_negatives: documents (BEIR JSONL or id<TAB>text TSV)
    header: bool = False  # id_triplets: the first line is a header
    columns: int | None = allowed(
        None, minimum=3
    )  # triplet TSVs: use only the first N columns (query, positive, negatives…)
    negative_systems: list | None = None  # hard_negatives: which systems' negatives (None: all)
    hf_config: str | None = None
    split: str = "train"
    teacher: str | None = None  # teacher scores for distillation
    teacher_format: Literal["jsonl", "ce_scores"] = "jsonl"
    negatives: int = allowed(1, minimum=1)  # hard negatives per query
    limit: int | None = allowed(None, minimum=1)  # read at most this many lines / pairs
    query_max_length: int = allowed(32, minimum=MIN_TOKEN_LIMIT)
    doc_max_length: int = allowed(128, minimum=MIN_TOKEN_LIMIT)


_Row = tuple[str, str, tuple[str, ...]]  # (query, positive, negatives) before merging


@dataclass(frozen=True)
class Group:
    """One query, one positive and its pool of hard negatives, as keys into the text mappings."""

    query: str
    positive: str
    negatives: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    query: str
    positive: str
    negatives: tuple[str, ...]
    teacher: tuple[float, ...] | None  # teacher scores of (positive, negatives…)


class TextLookup(Protocol):
    """Key → text: a dict, or one of the lookups below."""

    def __getitem__(self, key: str) -> str: ...


class _SameText:
    """Key → text when the keys are the texts themselves (text triplets, HF rows)."""

    def __getitem__(self, key: str) -> str:
        return key


@dataclass
class TrainingSet:
    groups: list[Group]
    queries: TextLookup
    documents: TextLookup
    teacher: TeacherScores | None = None
    source: str = ""
    _permutation: tuple = field(default=(None, None, None), repr=False)  # (seed, epoch, order) of the last epoch

    def __len__(self) -> int:
        return len(self.groups)

    def _order(self, seed: int, epoch: int) -> np.ndarray:
        if self._permutation[:2] != (seed, epoch):
            self._permutation = (seed, epoch, np.random.default_rng([seed, epoch]).permutation(len(self.groups)))
        return self._permutation[2]

    def example(self, index: int, negatives: int, seed: int) -> Example:
        """Example ``index`` (0-based, counted over the whole run) with ``negatives`` hard negatives."""
        epoch, position = divmod(index, len(self.groups))
        group = self.groups[int(self._order(seed, epoch)[position])]
        rng = np.random.default_rng([seed, epoch, position, 1])
        pool = group.negatives
        picks = rng.choice(len(pool), size=negatives, replace=len(pool) < negatives)
        chosen = tuple(pool[int(i)] for i in picks)
        teacher = None
        if self.teacher is not None:
            teacher = tuple(self.teacher[(group.query, doc)] for doc in (group.positive,) + chosen)
        return Example(
            self.queries[group.query],
            self.documents[group.positive],
            tuple(self.documents[doc] for doc in chosen),
            teacher,
        )

    def document_texts(self) -> list[str]:
        """Every distinct document of the training set (positives and negatives), first occurrence first."""
        keys = dict.fromkeys(key for group in self.groups for key in (group.positive, *group.negatives))
        return [self.documents[key] for key in keys]

    def batch(self, step: int, batch_size: int, negatives: int, seed: int) -> list[Example]:
        """The ``batch_size`` examples of optimizer step ``step`` (1-based)."""
        start = (step - 1) * batch_size
        return [self.example(start + i, negatives, seed) for i in range(batch_size)]


# ----------------------------------------------------------------------------------------- readers
def read_id_texts(path: str | Path) -> dict[str, str]:
    """``{id: text}`` from a BEIR JSONL file (``.jsonl``) or an ``id<TAB>text`` TSV (MS MARCO)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        corpus = read_corpus(path)
        return dict(zip(corpus.ids, corpus.texts))
    texts: dict[str, str] = {}
    for number, line in numbered_lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        key, separator, text = line.partition("\t")
        if not separator or not key or not text.strip():
            raise InputError("expected id<TAB>text with a non-empty id and text", path, number)
        check_id(key, "id", path, number)
        if key in texts:
            raise InputError(f"duplicate id {key!r}", path, number)
        texts[key] = text
    if not texts:
        raise InputError("no texts in file", path)
    return texts


def merge_groups(rows: Iterable[_Row]) -> list[Group]:
    """Merge rows sharing (query, positive); negatives keep first-seen order without repeats. ``rows`` may be a
    stream: only the merged groups are held, never the rows."""
    merged: dict[tuple[str, str], dict[str, None]] = {}
    for query, positive, negatives in rows:
        merged.setdefault((query, positive), {}).update(dict.fromkeys(negatives))
    return [Group(query, positive, tuple(negatives)) for (query, positive), negatives in merged.items() if negatives]


def _text_triplets(data: DataConfig) -> TrainingSet:
    triplets = read_triplets(data.path, limit=data.limit, header=data.header, columns=data.columns)
    groups = merge_groups([(t.query, t.positive, t.negatives) for t in triplets])
    return TrainingSet(groups, _SameText(), _SameText(), source=data.path)


def _check_known(
    key: str, known: Mapping[str, str], what: str, path: str | Path, line: int | None, where: str | Path | None = None
) -> None:
    if key not in known:
        raise InputError(f"unknown {what} id {key!r}" + (f" (not in {where})" if where else ""), path, line)


def _id_triplets(data: DataConfig) -> TrainingSet:
    # validate() requires data.queries and data.collection with this format
    queries, documents = read_id_texts(cast(str, data.queries)), read_id_texts(cast(str, data.collection))
    triplets = read_triplets(data.path, limit=data.limit, header=data.header, columns=data.columns)
    for t in triplets:
        _check_known(t.query, queries, "query", data.path, t.line, data.queries)
        for doc in (t.positive,) + t.negatives:
            _check_known(doc, documents, "document", data.path, t.line, data.collection)
    groups = merge_groups([(t.query, t.positive, t.negatives) for t in triplets])
    return TrainingSet(groups, queries, documents, source=data.path)


def _hard_negatives(data: DataConfig) -> TrainingSet:
    # validate() requires data.queries and data.collection with this format
    queries, documents = read_id_texts(cast(str, data.queries)), read_id_texts(cast(str, data.collection))
    rows: list[_Row] = []
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
        _check_known(qid, queries, "query", data.path, number, data.queries)
        systems = data.negative_systems or list(record["neg"])
        listed = [record["neg"].get(system) or [] for system in systems]
        if not all(isinstance(pids, list) for pids in listed):
            raise InputError('"neg" must map each system to a list of pids', data.path, number)
        positives = [check_id(pid, "a pid", data.path, number) for pid in record["pos"]]
        negatives = [check_id(pid, "a pid", data.path, number) for pids in listed for pid in pids]
        negatives = [pid for pid in dict.fromkeys(negatives) if pid not in positives]
        for doc in positives + negatives:
            _check_known(doc, documents, "document", data.path, number, data.collection)
        rows.extend((qid, pid, tuple(negatives)) for pid in positives)
    return TrainingSet(merge_groups(rows), queries, documents, source=data.path)


class _DocStore:
    """``doc_id → text`` over an ir_datasets docstore (looked up lazily)."""

    def __init__(self, store: Any, name: str) -> None:
        self.store, self.name = store, name

    def __getitem__(self, key: str) -> str:
        try:
            return self.store.get(key).text
        except KeyError:
            raise InputError(f"unknown document id {key!r}", self.name) from None


def _ir_datasets(data: DataConfig) -> TrainingSet:
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
    queries = {query.query_id: query.text for query in dataset.queries_iter()}

    def rows() -> Iterator[_Row]:  # streamed: the pairs are read as they are merged, up to data.limit
        for number, pair in enumerate(itertools.islice(dataset.docpairs_iter(), data.limit), start=1):
            _check_known(pair.query_id, queries, "query", data.path, number)
            yield pair.query_id, pair.doc_id_a, (pair.doc_id_b,)

    return TrainingSet(merge_groups(rows()), queries, _DocStore(dataset.docs_store(), data.path), source=data.path)


def _hf(data: DataConfig) -> TrainingSet:
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

    def rows() -> Iterator[_Row]:
        for number, row in enumerate(itertools.islice(table, data.limit), start=1):
            names = list(row)
            if len(names) < 3:
                raise InputError(f"expected columns query, positive, negative…; got {names}", data.path)
            for name in names:
                if not isinstance(row[name], str) or not row[name].strip():
                    raise InputError(f"row {number}: column {name!r} must be a non-empty string", data.path)
            yield row[names[0]], row[names[1]], tuple(row[name] for name in names[2:])

    return TrainingSet(merge_groups(rows()), _SameText(), _SameText(), source=data.path)


LOADERS = {
    "triplets": _text_triplets,
    "id_triplets": _id_triplets,
    "hard_negatives": _hard_negatives,
    "ir_datasets": _ir_datasets,
    "hf": _hf,
}
REMOTE_FORMATS: dict[str, Library] = {"ir_datasets": "ir_datasets", "hf": "hub"}  # whose cache holds them


def _attach_teacher(training_set: TrainingSet, data: DataConfig) -> None:
    scores = READERS[data.teacher_format](cast(str, data.teacher))  # called only when data.teacher is set
    for group in training_set.groups:
        for doc in (group.positive,) + group.negatives:
            if (group.query, doc) not in scores:
                raise InputError(f"no teacher score for qid {group.query!r}, pid {doc!r}", data.teacher)
    training_set.teacher = scores


def load_training_set(data: DataConfig) -> TrainingSet:
    """Read the training data described by a ``DataConfig`` (a failed download: one error line, see
    :func:`spladekit.common.sources.fetching`)."""
    library = REMOTE_FORMATS.get(data.format)
    with fetching(data.path, library, "a local file (data.path)") if library else contextlib.nullcontext():
        training_set = LOADERS[data.format](data)
    if not training_set.groups:
        raise InputError("no training examples (every query lacks a positive or a negative)", data.path)
    if data.teacher is not None:
        _attach_teacher(training_set, data)
    return training_set
