"""Hard-negative mining: training data for ``spladekit train`` from any collection with a train split.

**Queries and positives.** Every query judged in the split that has a document with relevance > 0 (its
*positives*) is mined; queries whose judgments are all <= 0 are skipped (counted). A judgment naming a
query absent from the queries or a document absent from the corpus is an error (nothing is mined).

**Candidates.** A first-stage retriever ranks the corpus for the query; the candidates are the documents
at ranks A..B of that ranking (``rank_range``; 1-based, both ends included: ``1:30`` is the top 30,
``10:100`` skips the first 9), minus the excluded ones: always the query's positives, and with
``exclude_judged`` every document judged for the query (relevance <= 0 included). Ranks count every
retrieved document, excluded ones too. A hit with score <= 0 (no term in common) is not a candidate.

**Draw.** N negatives (``negatives``) are drawn from the candidates without replacement (all of them when
fewer), by ``numpy.random.default_rng([seed, i, j])``, i = the query's position among the split's
judged queries (queries-file order), so a query's draw depends on nothing else:

* ``triplets`` (j = 1, 2, … for the query's positives): for each (query, positive) pair, N lines
  ``query<TAB>positive<TAB>negative`` of texts (MS MARCO ``triples.train`` layout; tabs and line breaks in
  a text become spaces). ``data.format: triplets`` reads it.
* ``hard_negatives`` (j = 0, one draw shared by the query's positives): a folder with
  ``hard-negatives.jsonl`` (one ``{"qid", "pos": [doc id…], "neg": {system: [doc id…]}}`` per query,
  negatives in rank order: the sentence-transformers ``msmarco-hard-negatives`` layout), ``queries.jsonl``
  (the mined queries) and ``corpus.jsonl`` (only the documents the file names), ``mining.json`` (settings
  and counts); ``data.format: hard_negatives`` reads it (see :func:`hard_negatives_data`).

**Retrievers.** ``bm25`` (the default): the ``bm25s`` library, Lucene's BM25 — a term of the query adds
``idf · tf / (tf + k1 · (1 − b + b · |d| / avgdl))`` with ``idf = ln(1 + (N − df + 0.5) / (df + 0.5))`` —
over lowercase ``\\w+`` tokens, no stemming, no stopwords (k1 = 0.9, b = 0.4: Anserini's defaults, as used
for ``scifact/triplets-train.tsv``). Or a SPLADE model's own ranking (``model``): corpus and queries encoded
by :class:`spladekit.model.encoder.SparseEncoder` (the corpus through the evaluation cache), exact search
(:func:`spladekit.index.build_index`).

**Memory.** The corpus texts are held once (the collection); BM25 adds the corpus token ids (one Python
list per document, ~8 bytes a token) and its score matrix (~8 bytes per distinct (document, term));
a model adds the corpus vectors (CSR, ~8 bytes per non-zero). Queries are ranked in batches of
``QUERY_BATCH`` and written as they are mined: no ranking of all queries is held.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import numpy as np
from tqdm.auto import tqdm

from spladekit.common.atomic import atomic_file, final_path, open_output
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import numbered_lines
from spladekit.common.schema import MAX_SEED
from spladekit.common.sources import is_local
from spladekit.data.collections import Collection, is_hf_dataset_id, load_collection, resolve_ir_dataset_id
from spladekit.evaluation.bm25 import Ranker, bm25_ranker

logger = logging.getLogger("spladekit")

TRIPLETS, HARD_NEGATIVES = "triplets", "hard_negatives"
FORMATS = (TRIPLETS, HARD_NEGATIVES)
HARD_NEGATIVES_FILE, QUERIES_FILE, CORPUS_FILE, SUMMARY_FILE = (
    "hard-negatives.jsonl",
    "queries.jsonl",
    "corpus.jsonl",
    "mining.json",
)
TRIPLETS_FILE = "triplets-train.tsv"  # what quickstart looks for in a data folder, and mines when absent
QUERY_BATCH = 1024
_LINE_BREAKING = re.compile(r"[\t\r\n]")


@dataclass(frozen=True)
class MiningSettings:
    """What to mine (see the module docstring); ``model=None`` mines with BM25 (``k1``, ``b``)."""

    negatives: int = 4
    rank_range: tuple[int, int] = (1, 30)
    exclude_judged: bool = False
    seed: int = 13
    k1: float = 0.9
    b: float = 0.4
    model: str | None = None
    max_length: int | None = None  # model: tokens per text (default: the model's)
    batch_size: int = 32  # model: texts per encoding batch
    device: str = "auto"  # model: where it encodes (spladekit.common.devices.resolve_device)
    trust_remote_code: bool = False

    def check(self) -> None:
        first, last = self.rank_range
        if not 1 <= first <= last:
            raise SpladekitError(
                f"rank range must be A:B with 1 <= A <= B (1-based ranks, both included), got {first}:{last}"
            )
        if self.negatives < 1:
            raise SpladekitError(f"negatives must be >= 1, got {self.negatives}")
        if not (0 < self.k1 < float("inf")) or not 0 <= self.b <= 1:
            raise SpladekitError(f"BM25 needs k1 > 0 (finite) and 0 <= b <= 1, got k1 {self.k1}, b {self.b}")
        if self.batch_size < 1:
            raise SpladekitError(f"batch size must be >= 1, got {self.batch_size}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise SpladekitError(f"seed must be an integer in [0, {MAX_SEED}], got {self.seed!r}")

    @property
    def system(self) -> str:
        """The retriever's name (the ``neg`` key of the hard_negatives layout)."""
        return "bm25" if self.model is None else Path(self.model).name


def parse_rank_range(text: str) -> tuple[int, int]:
    """``"10:100"`` → ``(10, 100)``: 1-based ranks, both included."""
    first, separator, last = text.partition(":")
    try:
        if not separator:
            raise ValueError
        return int(first), int(last)
    except ValueError:
        raise SpladekitError(
            f"rank range must be A:B (1-based ranks, both included, e.g. 1:30), got {text!r}"
        ) from None


# ----------------------------------------------------------------------------------------- the split
def load_training_collection(data: str | Path, split: str = "train") -> Collection:
    """``load_collection(data, split)``, refusing an ir_datasets id that has no such split (it would fall back
    to the id's own judgments, e.g. ``beir/arguana``'s test qrels)."""
    if not is_local(data) and not is_hf_dataset_id(str(data)):
        resolved = resolve_ir_dataset_id(str(data), split)
        if split not in resolved.split("/"):
            raise SpladekitError(
                f"ir_datasets {resolved!r} has no {split!r} split (mining reads a training split: "
                f"name an id with one, e.g. beir/scifact/train)"
            )
    collection = load_collection(data, split)
    if (Path(data) / "corpus").is_dir() if is_local(data) else is_hf_dataset_id(str(data)):
        logger.warning(
            "%s: the Hugging Face corpus/queries/qrels layout has one set of judgments, not splits; "
            "mining uses them all",
            collection.name,
        )
    return collection


@dataclass(frozen=True)
class TrainingQuery:
    position: int  # among the split's judged queries (seeds the draw)
    query_id: str
    text: str
    positives: tuple[int, ...]  # corpus rows, judgment order
    excluded: frozenset[int]  # corpus rows never drawn as negatives


def _qrels_line(collection: Collection, split: str, query_id: str, doc_id: str) -> tuple[str, int | None]:
    """Where a judgment comes from: ``FOLDER/qrels/SPLIT.tsv`` and its line for a BEIR folder, else the source."""
    path = Path(collection.source) / "qrels" / f"{split}.tsv"
    if not path.is_file():
        return collection.source, None
    for number, line in numbered_lines(path):
        fields = line.split()
        if fields and fields[0] == query_id and doc_id in fields[1:3]:
            return str(path), number
    return str(path), None


def training_queries(collection: Collection, split: str, exclude_judged: bool) -> tuple[list[TrainingQuery], int]:
    """The queries to mine, in queries-file order, and how many judged queries have no positive.

    InputError for a judgment naming an unknown query or document."""
    judged = collection.qrels
    needed = {doc for documents in judged.values() for doc in documents}
    row_of = {doc: row for row, doc in enumerate(collection.corpus.ids) if doc in needed}
    query_ids = set(collection.queries.ids)
    for query_id, documents in judged.items():
        missing = [doc for doc in documents if doc not in row_of]
        if missing:
            where, line = _qrels_line(collection, split, query_id, missing[0])
            raise InputError(
                f"judgment of query {query_id!r} names document {missing[0]!r}, which is not in the "
                f"corpus ({sum(d not in row_of for docs in judged.values() for d in docs)} such judgments)",
                where,
                line,
            )
        if query_id not in query_ids:
            where, line = _qrels_line(collection, split, query_id, next(iter(documents)))
            raise InputError(f"judged query {query_id!r} is not in the queries", where, line)
    queries, without_positive = [], 0
    judged_ids = [query_id for query_id in collection.queries.ids if query_id in judged]
    texts = dict(zip(collection.queries.ids, collection.queries.texts))
    for position, query_id in enumerate(judged_ids):
        documents = judged[query_id]
        positives = tuple(row_of[doc] for doc, relevance in documents.items() if relevance > 0)
        if not positives:
            without_positive += 1
            continue
        excluded = frozenset(row_of[doc] for doc in documents) if exclude_judged else frozenset(positives)
        queries.append(TrainingQuery(position, query_id, texts[query_id], positives, excluded))
    if not queries:
        raise SpladekitError(f"{collection.name}: no judged query has a relevant document (relevance > 0) to train on")
    return queries, without_positive


# ----------------------------------------------------------------------------------------- retrievers
def model_ranker(collection: Collection, settings: MiningSettings, show_progress: bool) -> Ranker:
    """Rank with a retrieval model of either kind (``spladekit.model.loading.load_model``: an inference-free
    model's queries are its weight table): the corpus encoded once (evaluation cache) at the document limit,
    queries per batch at the query limit (``max_length`` sets both, as in ``evaluate``), exact search."""
    from spladekit.evaluation.evaluate import encode_corpus
    from spladekit.index import build_index
    from spladekit.model.loading import load_model

    encoder = load_model(str(settings.model), trust_remote_code=settings.trust_remote_code, device=settings.device)
    documents, _ = encode_corpus(
        encoder,
        collection.corpus,
        encoder.side_max_length("document", settings.max_length),
        settings.batch_size,
        cache=True,
        show_progress=show_progress,
    )
    searcher = build_index(documents.matrix, "exact")
    del documents

    def rank(queries: list[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
        vectors = encoder.encode_query(
            queries, batch_size=settings.batch_size, max_length=settings.max_length, show_progress=False
        )
        hits = searcher.search(vectors, k=depth)
        return hits.doc_indices, hits.scores

    return rank


# ----------------------------------------------------------------------------------------- mining
@dataclass(frozen=True)
class Mined:
    query: TrainingQuery
    negatives: tuple[tuple[int, ...], ...]  # corpus rows: one draw per positive (triplets) or one draw (j = 0)
    candidates: int


def draw(candidates: list[int], count: int, seed: int, position: int, j: int) -> tuple[int, ...]:
    """``count`` of ``candidates`` without replacement (all when fewer), seeded by (seed, position, j)."""
    if len(candidates) <= count:
        return tuple(candidates)
    picks = np.random.default_rng([seed, position, j]).choice(len(candidates), size=count, replace=False)
    return tuple(candidates[int(i)] for i in picks)


def mine(
    queries: list[TrainingQuery],
    rank: Ranker,
    n_docs: int,
    settings: MiningSettings,
    per_positive: bool,
    show_progress: bool = True,
) -> Iterator[Mined]:
    """Mined negatives of each query, in order (see the module docstring); ``per_positive``: one draw per
    positive (triplets), else one per query, listed in rank order (hard_negatives)."""
    first, last = settings.rank_range
    depth = min(last, n_docs)
    with tqdm(total=len(queries), desc=f"mining ({settings.system})", unit="query", disable=not show_progress) as bar:
        for start in range(0, len(queries), QUERY_BATCH):
            batch = queries[start : start + QUERY_BATCH]
            rows, scores = rank([query.text for query in batch], depth)
            for query, hits, values in zip(batch, rows, scores):
                ranked = hits[first - 1 :][(values[first - 1 :] > 0) & (hits[first - 1 :] >= 0)]
                candidates = [int(row) for row in ranked if int(row) not in query.excluded]
                if per_positive:
                    draws = tuple(
                        draw(candidates, settings.negatives, settings.seed, query.position, j)
                        for j in range(1, len(query.positives) + 1)
                    )
                else:
                    rank_order = {row: place for place, row in enumerate(candidates)}
                    chosen = draw(candidates, settings.negatives, settings.seed, query.position, 0)
                    draws = (tuple(sorted(chosen, key=rank_order.__getitem__)),)
                yield Mined(query, draws, len(candidates))
            bar.update(len(batch))


def _tsv_field(text: str) -> str:
    return _LINE_BREAKING.sub(" ", text)


def write_triplets(mined: Iterator[Mined], texts: list[str], wanted: int, stream: IO[str]) -> dict[str, int]:
    """``query<TAB>positive<TAB>negative`` lines, one per negative; returns the counts (``short``: pairs that got
    fewer than ``wanted`` negatives)."""
    counts = {"queries": 0, "pairs": 0, "lines": 0, "queries_without_negatives": 0, "short": 0}
    for item in mined:
        if not item.candidates:
            counts["queries_without_negatives"] += 1
            continue
        counts["queries"] += 1
        query = _tsv_field(item.query.text)
        for positive, negatives in zip(item.query.positives, item.negatives):
            counts["pairs"] += 1
            counts["short"] += len(negatives) < wanted
            positive_text = _tsv_field(texts[positive])
            for negative in negatives:
                stream.write(f"{query}\t{positive_text}\t{_tsv_field(texts[negative])}\n")
                counts["lines"] += 1
    return counts


def write_hard_negatives(
    mined: Iterator[Mined], collection: Collection, wanted: int, system: str, folder: Path
) -> dict[str, int]:
    """``hard-negatives.jsonl``, ``queries.jsonl`` and ``corpus.jsonl`` (the documents named) into ``folder``;
    returns the counts (``short``: queries that got fewer than ``wanted`` negatives)."""
    counts = {"queries": 0, "pairs": 0, "lines": 0, "queries_without_negatives": 0, "short": 0}
    named: set[int] = set()
    corpus_ids = collection.corpus.ids
    with atomic_file(folder / HARD_NEGATIVES_FILE) as lines, atomic_file(folder / QUERIES_FILE) as queries:
        for item in mined:
            if not item.candidates:
                counts["queries_without_negatives"] += 1
                continue
            negatives = item.negatives[0]
            counts["queries"] += 1
            counts["pairs"] += len(item.query.positives)
            counts["short"] += len(negatives) < wanted
            counts["lines"] += 1
            named.update(item.query.positives + negatives)
            record = {
                "qid": item.query.query_id,
                "pos": [corpus_ids[row] for row in item.query.positives],
                "neg": {system: [corpus_ids[row] for row in negatives]},
            }
            lines.write(json.dumps(record, ensure_ascii=False) + "\n")
            queries.write(json.dumps({"_id": item.query.query_id, "text": item.query.text}, ensure_ascii=False) + "\n")
    with atomic_file(folder / CORPUS_FILE) as documents:
        for row in sorted(named):
            documents.write(
                json.dumps({"_id": corpus_ids[row], "text": collection.corpus.texts[row]}, ensure_ascii=False) + "\n"
            )
    return counts


def hard_negatives_data(folder: str | Path) -> list[str]:
    """The ``--set`` assignments that make ``train`` read a mined hard_negatives folder."""
    folder = Path(folder)
    return [
        "data.format=hard_negatives",
        f"data.path={folder / HARD_NEGATIVES_FILE}",
        f"data.queries={folder / QUERIES_FILE}",
        f"data.collection={folder / CORPUS_FILE}",
    ]


def mine_training_data(
    data: str | Path,
    output: str | Path,
    layout: str = TRIPLETS,
    settings: MiningSettings | None = None,
    split: str = "train",
    overwrite: bool = False,
    show_progress: bool = True,
) -> dict:
    """Mine ``data``'s ``split`` into ``output`` (a TSV file for ``triplets``, a folder for ``hard_negatives``);
    returns the settings, counts and timings. Everything is checked before the retrieval; on any error
    nothing is written."""
    settings = settings or MiningSettings()
    settings.check()
    if layout not in FORMATS:
        raise SpladekitError(f"unknown format {layout!r}; choose one of {', '.join(FORMATS)}")
    started = time.perf_counter()
    with open_output(output, folder=layout == HARD_NEGATIVES, overwrite=overwrite) as opened:
        collection = load_training_collection(data, split)
        queries, without_positive = training_queries(collection, split, settings.exclude_judged)
        if settings.model is None:
            rank = bm25_ranker(collection.corpus.texts, settings.k1, settings.b, show_progress)
        else:
            rank = model_ranker(collection, settings, show_progress)
        indexed = time.perf_counter()
        mined = mine(queries, rank, len(collection.corpus), settings, layout == TRIPLETS, show_progress)
        if layout == TRIPLETS:
            with atomic_file(opened.staging) as stream:
                counts = write_triplets(mined, collection.corpus.texts, settings.negatives, stream)
        else:
            counts = write_hard_negatives(mined, collection, settings.negatives, settings.system, opened.staging)
        if not counts["lines"]:
            raise SpladekitError(
                f"{collection.name}: no query has a candidate negative in ranks "
                f"{settings.rank_range[0]}:{settings.rank_range[1]}; nothing written"
            )
        finished = time.perf_counter()
        summary = {
            "data": str(data),
            "split": split,
            "format": layout,
            "output": str(final_path(opened.staging)),
            "system": settings.system,
            "settings": asdict(settings) | {"rank_range": list(settings.rank_range)},
            "documents": len(collection.corpus),
            "queries_without_positive": without_positive,
            **counts,
            "index_seconds": round(indexed - started, 3),
            "mining_seconds": round(finished - indexed, 3),
            "seconds": round(finished - started, 3),
        }
        if layout == HARD_NEGATIVES:
            summary["train_settings"] = hard_negatives_data(output)
            with atomic_file(opened.staging / SUMMARY_FILE) as stream:
                stream.write(json.dumps(summary, indent=2) + "\n")
    if counts["short"]:
        logger.warning(
            "%d %s got fewer than %d negatives (too few candidates in ranks %d:%d)",
            counts["short"],
            "pairs" if layout == TRIPLETS else "queries",
            settings.negatives,
            *settings.rank_range,
        )
    if counts["queries_without_negatives"]:
        logger.warning("%d queries had no candidate negative and were left out", counts["queries_without_negatives"])
    return summary


def find_or_mine(data: str | Path, folder: str | Path, show_progress: bool = False) -> Path:
    """``DATA/triplets-train.tsv`` when ``data`` is a folder holding one; otherwise BM25 triplets mined with the
    default settings from ``data``'s train split into ``folder/triplets-train.tsv`` (quickstart)."""
    shipped = Path(data) / TRIPLETS_FILE
    if shipped.is_file():
        return shipped
    target = Path(folder) / TRIPLETS_FILE
    logger.info("no %s: mining BM25 triplets from the train split of %s", TRIPLETS_FILE, data)
    try:
        mine_training_data(data, target, show_progress=show_progress)
    except SpladekitError as error:
        raise SpladekitError(
            f"no training triplets: none given, no {shipped}, and mining them from the train split failed: {error}"
        ) from None
    return target
