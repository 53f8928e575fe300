"""Test collections: a corpus, queries and qrels, from a BEIR folder, an ir_datasets id or a HF dataset.

``load_collection(spec, split)`` resolves ``spec`` in this order:

1. an existing folder: BEIR layout (``corpus.jsonl``, ``queries.jsonl`` or ``queries-<split>.jsonl``,
   ``qrels/<split>.tsv``) or Hugging Face parquet layout (``corpus/*.parquet``, ``queries/*.parquet``,
   ``qrels/*.parquet``, as in a downloaded NanoBEIR repository);
2. a Hugging Face dataset id with ``corpus``/``queries``/``qrels`` configs (``zeta-alpha-ai/NanoSciFact``);
3. an ``ir_datasets`` id (``beir/scifact/test``, ``msmarco-passage/dev/small``…); ``<id>/<split>`` is
   used when that id exists.

A download that fails (not cached, offline) is one error line naming the id and the cache folder
(:func:`spladekit.common.sources.fetching`).

``reconcile`` drops judgments that name unknown queries or documents and queries without judgments,
and reports how many of each it dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import check_id
from spladekit.common.sources import fetching, is_local
from spladekit.data.jsonl import Corpus, corpus_from_records, read_corpus
from spladekit.data.trec import Qrels, read_qrels

if TYPE_CHECKING:
    from datasets import Dataset

logger = logging.getLogger("spladekit")

DEFAULT_MEASURES = ("nDCG@10", "RR@10", "R@1000")
HF_CONFIGS = ("corpus", "queries", "qrels")
LOCAL_COPY = "a local collection folder (BEIR: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv)"
# Collections whose queries are documents of the corpus: ArguAna (find the counter-argument of an argument)
# and Quora (find the duplicates of a question). There the query's own document is removed from its
# ranking, as BEIR (``EvaluateRetrieval.evaluate(ignore_identical_ids=True)``) and naver/splade do; left in,
# it takes rank 1 and is never relevant. Elsewhere a shared id is a coincidence of numbering (CISI,
# Cranfield and Vaswani number queries and documents from 1 each) and that document can be truly relevant.
SELF_HIT_COLLECTIONS = ("arguana", "quora")


def drops_self_hits(identity: str) -> bool:
    """Whether a collection named or identified by ``identity`` (folder name, ir_datasets or HF id) is one
    whose query's own document is removed from its ranking (see ``SELF_HIT_COLLECTIONS``)."""
    return any(name in identity.lower() for name in SELF_HIT_COLLECTIONS)


@dataclass
class Collection:
    """Documents, queries and judgments of one test collection; ``measures`` are ir_measures names."""

    name: str
    corpus: Corpus
    queries: Corpus
    qrels: Qrels
    measures: tuple[str, ...] = DEFAULT_MEASURES
    source: str = ""
    dropped: dict[str, int] = field(default_factory=dict)
    drop_self_hits: bool = False  # remove the document whose id is the query's id from its ranking


# ----------------------------------------------------------------------------------------- BEIR folders
def beir_splits(folder: Path) -> list[str]:
    return sorted(path.stem for path in (folder / "qrels").glob("*.tsv"))


def load_beir_folder(folder: str | Path, split: str = "test", name: str | None = None) -> Collection:
    """A BEIR folder; a missing split is an error that lists the available ones."""
    folder = Path(folder)
    if not (folder / "corpus.jsonl").is_file():
        raise InputError("not a BEIR folder: no corpus.jsonl", folder)
    available = beir_splits(folder)
    qrels_file = folder / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():
        raise InputError(f"no split {split!r}; available: {', '.join(available) or 'none (no qrels/*.tsv)'}", folder)
    queries_file = folder / f"queries-{split}.jsonl"
    if not queries_file.is_file():
        queries_file = folder / "queries.jsonl"
    return Collection(
        name=name or folder.name,
        corpus=read_corpus(folder / "corpus.jsonl"),
        queries=read_corpus(queries_file),
        qrels=read_qrels(qrels_file),
        source=str(folder),
    )


# ----------------------------------------------------------------------------------------- Hugging Face
def _hf_rows(source: str, config: str) -> Dataset:
    """Rows of one config: local ``<folder>/<config>/*.parquet`` or the hub repo's ``train`` split."""
    from datasets import load_dataset

    folder = Path(source)
    if folder.is_dir():
        files = sorted(str(path) for path in (folder / config).glob("*.parquet"))
        if not files:
            raise InputError(f"no {config}/*.parquet (expected the corpus/queries/qrels parquet layout)", folder)
        return load_dataset("parquet", data_files=files, split="train")
    return load_dataset(source, config, split="train")


def _grade(value: Any, where: str, number: int) -> int:
    """A relevance grade from a dataset row: integral values only (1, 1.0, "2"), since int() would
    silently truncate a fractional grade such as 0.5 to 0."""
    try:
        grade = float(value)
    except (TypeError, ValueError):
        grade = None
    if grade is None or not grade.is_integer():
        raise InputError(f"relevance must be an integer, got {value!r}", where, number)
    return int(grade)


def load_hf_dataset(source: str, name: str | None = None) -> Collection:
    """A BEIR-style Hugging Face dataset (NanoBEIR): configs corpus (``_id``, ``text``, ``title``?),
    queries (``_id``, ``text``), qrels (``query-id``, ``corpus-id``, ``score``? default 1)."""
    where = {config: f"{source} [{config}]" for config in HF_CONFIGS}
    corpus = corpus_from_records(enumerate(_hf_rows(source, "corpus"), start=1), where["corpus"])
    queries = corpus_from_records(enumerate(_hf_rows(source, "queries"), start=1), where["queries"])
    qrels: Qrels = {}
    for number, row in enumerate(_hf_rows(source, "qrels"), start=1):
        if "query-id" not in row or "corpus-id" not in row:
            raise InputError("qrels rows need 'query-id' and 'corpus-id'", where["qrels"], number)
        query_id = check_id(row["query-id"], "'query-id'", where["qrels"], number)
        doc_id = check_id(row["corpus-id"], "'corpus-id'", where["qrels"], number)
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged:
            raise InputError(f"duplicate judgment for query {query_id!r}, document {doc_id!r}", where["qrels"], number)
        judged[doc_id] = _grade(row.get("score", 1), where["qrels"], number)
    return Collection(name=name or Path(source).name, corpus=corpus, queries=queries, qrels=qrels, source=source)


# ----------------------------------------------------------------------------------------- ir_datasets
def resolve_ir_dataset_id(dataset_id: str, split: str | None) -> str:
    import ir_datasets

    registered = ir_datasets.registry._registered
    if split and f"{dataset_id}/{split}" in registered:
        return f"{dataset_id}/{split}"
    if dataset_id not in registered:
        raise SpladekitError(
            f"{dataset_id!r} is not a folder, a suite or an ir_datasets id "
            "(see `ir_datasets list`; suites: msmarco-dev, dl19, beir13, nanobeir)"
        )
    return dataset_id


def _text(record: Any) -> str:
    return record.default_text() if hasattr(record, "default_text") else record.text


def load_ir_dataset(dataset_id: str, split: str | None = None, name: str | None = None) -> Collection:
    """Corpus, queries and qrels of an ir_datasets id (downloaded by ir_datasets on first use)."""
    import ir_datasets

    dataset_id = resolve_ir_dataset_id(dataset_id, split)
    dataset = ir_datasets.load(dataset_id)
    for part in ("docs", "queries", "qrels"):
        if not getattr(dataset, f"has_{part}")():
            raise SpladekitError(
                f"ir_datasets {dataset_id!r} has no {part}; pick an id with a split, e.g. {dataset_id}/test"
            )
    docs = tqdm(dataset.docs_iter(), total=dataset.docs_count(), desc=f"reading {dataset_id}", unit="doc", leave=False)
    corpus = corpus_from_records(
        ((number, {"_id": doc.doc_id, "text": _text(doc)}) for number, doc in enumerate(docs, start=1)), dataset_id
    )
    queries = corpus_from_records(
        (
            (number, {"_id": query.query_id, "text": _text(query)})
            for number, query in enumerate(dataset.queries_iter(), start=1)
        ),
        dataset_id,
    )
    qrels: Qrels = {}
    for number, judgment in enumerate(dataset.qrels_iter(), start=1):
        query_id = check_id(judgment.query_id, "qrels query id", dataset_id, number)
        doc_id = check_id(judgment.doc_id, "qrels doc id", dataset_id, number)
        qrels.setdefault(query_id, {})[doc_id] = _grade(judgment.relevance, dataset_id, number)
    return Collection(name=name or dataset_id, corpus=corpus, queries=queries, qrels=qrels, source=dataset_id)


# ----------------------------------------------------------------------------------------- dispatch
def is_hf_dataset_id(spec: str) -> bool:
    return spec.startswith("zeta-alpha-ai/") or spec.startswith("hf:")


def load_collection(spec: str | Path, split: str = "test", name: str | None = None) -> Collection:
    """Load a folder, a Hugging Face dataset id or an ir_datasets id (see the module docstring); self-hits
    are dropped for the collections that need it (:func:`drops_self_hits` of its name or id)."""
    collection = _load_collection(spec, split, name)
    identity = f"{Path(str(spec)).name} {collection.name}" if Path(spec).is_dir() else f"{spec} {collection.name}"
    return replace(collection, drop_self_hits=drops_self_hits(identity))


def _load_collection(spec: str | Path, split: str, name: str | None) -> Collection:
    path = Path(spec)
    if path.is_dir():
        if (path / "corpus.jsonl").is_file():
            return load_beir_folder(path, split, name)
        if (path / "corpus").is_dir():
            return load_hf_dataset(str(path), name)
        raise InputError("not a collection folder: expected corpus.jsonl (BEIR) or corpus/*.parquet (HF)", path)
    if path.exists():
        raise InputError("expected a collection folder, got a file", path)
    if is_local(spec):
        raise InputError("no such collection folder", path)
    spec = str(spec)
    if is_hf_dataset_id(spec):
        with fetching(spec, "hub", LOCAL_COPY):
            return load_hf_dataset(spec.removeprefix("hf:"), name or spec.rsplit("/", 1)[-1])
    with fetching(spec, "ir_datasets", LOCAL_COPY):  # ir_datasets downloads on first use
        return load_ir_dataset(spec, split, name)


def reconcile(collection: Collection) -> Collection:
    """Keep only judged queries and judgments whose query and document exist; warn with counts.

    The counts go to ``dropped``: ``qrels_unknown_queries`` (judged query ids absent from the queries),
    ``qrels_unknown_docs`` (judgments naming documents absent from the corpus), ``queries_unjudged``.
    """
    doc_ids = set(collection.corpus.ids)
    query_ids = set(collection.queries.ids)
    unknown_queries = [query for query in collection.qrels if query not in query_ids]
    qrels: Qrels = {}
    unknown_docs = 0
    for query, judged in collection.qrels.items():
        if query not in query_ids:
            continue
        kept = {doc: relevance for doc, relevance in judged.items() if doc in doc_ids}
        unknown_docs += len(judged) - len(kept)
        if kept:
            qrels[query] = kept
    keep = [i for i, query in enumerate(collection.queries.ids) if query in qrels]
    queries = Corpus([collection.queries.ids[i] for i in keep], [collection.queries.texts[i] for i in keep])
    dropped = {
        "qrels_unknown_queries": len(unknown_queries),
        "qrels_unknown_docs": unknown_docs,
        "queries_unjudged": len(collection.queries) - len(keep),
    }
    if unknown_queries:
        logger.warning(
            "%s: qrels name %d queries that are not in the queries file (e.g. %r); ignored",
            collection.name,
            len(unknown_queries),
            unknown_queries[0],
        )
    if unknown_docs:
        logger.warning(
            "%s: %d judgments name documents that are not in the corpus; ignored", collection.name, unknown_docs
        )
    if dropped["queries_unjudged"]:
        logger.info("%s: %d queries have no judgments; excluded", collection.name, dropped["queries_unjudged"])
    if not keep:
        raise SpladekitError(f"{collection.name}: no query has a judgment on a document of the corpus")
    return replace(collection, queries=queries, qrels=qrels, dropped=dropped)
