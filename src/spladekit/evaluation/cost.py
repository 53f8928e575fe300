"""The estimated cost of an evaluation (``spladekit evaluate --dry-run``): encode, index and search time and
disk for a collection or a suite, from a short measurement on this machine, without reading a corpus.

What is measured:

* **encoding**: the model encodes a sample of documents and of queries (``sample`` each) with the run's
  token limits and batch size: documents/s, queries/s, the average number of active terms (nnz) per
  document and query (after ``max_active_dims`` pruning). The sample is the first lines of a local
  collection's ``corpus.jsonl`` / queries file, else English texts made of spladekit's built-in diagnosis
  pairs (:data:`spladekit.data.samples.SAMPLE_PAIRS`): documents of ``SYNTHETIC_DOCUMENT_WORDS`` words
  (several of its one-sentence documents joined: an assumption of the order of an MS MARCO passage; many
  BEIR documents are longer and cut at the token limit, so their encoding estimate is low) and its queries.
* **index and search**: the backend builds two indexes of synthetic documents shaped like the sample (nnz
  per document around the sample's mean, terms drawn with the sample's term frequencies, weights resampled
  from the sample's), of ``synthetic_docs / 4`` and ``synthetic_docs`` documents; each is saved into a
  temporary folder (deleted) to measure its size and answers the encoded sample queries with ``k`` hits.

What is extrapolated: build time, index size and search time per query are each fitted as
``fixed + per_posting × P`` through the two builds (P = documents × mean nnz per document; the fixed part
matters for approximate backends, e.g. Seismic's per-term summaries) and evaluated at the collection's
P. Linear growth is exact search's (it traverses every posting of the query's terms); approximate
backends grow more slowly, so for them the search figure is pessimistic. Vector disk is the CSR of
``Vectors.save``: 8 bytes per stored weight (float32 value + int32 column) + the row pointers + the ids
(``ids.json``). These are rough estimates from a tiny sample on a possibly busy machine, to size a job.

Counts (documents, queries) come from the local folder (its ``corpus.jsonl`` line count and the judged
queries of ``qrels/<split>.tsv``) or from ir_datasets' metadata (shipped with the package: nothing is
downloaded); a Hugging Face dataset without a local copy has unknown counts and is left out of the totals.
"""

from __future__ import annotations

import io
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import json_records, numbered_lines
from spladekit.common.scratch import scratch_folder
from spladekit.common.sources import is_local
from spladekit.common.sparse import check_max_active_dims, keep_top_weights
from spladekit.data.collections import is_hf_dataset_id, resolve_ir_dataset_id
from spladekit.data.jsonl import corpus_from_records
from spladekit.data.samples import SAMPLE_PAIRS
from spladekit.data.suites import SUITES
from spladekit.data.trec import read_qrels
from spladekit.index import build_index, check_backend
from spladekit.model.loading import RetrievalModel

DEFAULT_SAMPLE = 64
DEFAULT_SYNTHETIC_DOCS = 10_000
SYNTHETIC_DOCUMENT_WORDS = 64
COSTS = ("build_seconds", "index_bytes", "search_seconds_per_query")


@dataclass(frozen=True)
class Workload:
    """One collection to evaluate: its counts (``None`` when unknown) and, when local, its files."""

    name: str
    documents: int | None
    queries: int | None
    counted_from: str
    corpus_file: Path | None = None
    queries_file: Path | None = None


def _line_count(path: Path) -> int:
    """Non-blank lines, read in binary chunks (no JSON parsing)."""
    with open(path, "rb") as stream:
        return sum(1 for line in stream if line.strip())


def local_workload(folder: Path, split: str, name: str | None = None) -> Workload:
    """A BEIR folder's counts: corpus lines and the judged queries of ``qrels/<split>.tsv``."""
    corpus = folder / "corpus.jsonl"
    if not corpus.is_file():
        raise InputError("not a BEIR folder: no corpus.jsonl (--dry-run counts local BEIR folders)", folder)
    qrels = folder / "qrels" / f"{split}.tsv"
    if not qrels.is_file():
        raise InputError(f"no split {split!r} (no qrels/{split}.tsv)", folder)
    queries = folder / f"queries-{split}.jsonl"
    return Workload(
        name or folder.name,
        _line_count(corpus),
        len(read_qrels(qrels)),
        "local files",
        corpus,
        queries if queries.is_file() else folder / "queries.jsonl",
    )


def remote_workload(remote: str, split: str, name: str) -> Workload:
    """An ir_datasets id's counts from its metadata; a Hugging Face dataset: unknown."""
    if is_hf_dataset_id(remote):
        return Workload(name, None, None, "unknown (Hugging Face dataset: pass a local copy, e.g. --data-root)")
    import ir_datasets

    dataset = ir_datasets.load(resolve_ir_dataset_id(remote, split))
    documents = dataset.docs_count() if dataset.has_docs() else None
    queries = dataset.queries_count() if dataset.has_queries() else None
    return Workload(name, documents, queries, f"ir_datasets metadata ({remote})")


def workloads(data: str, split: str = "test", data_root: str | Path | None = None) -> list[Workload]:
    """The collections ``data`` names (a suite, a local folder or an ir_datasets / HF id) with their counts."""
    if data in SUITES:
        members = []
        for member, remote in SUITES[data].members:
            if data_root is not None:
                if not (Path(data_root) / member).is_dir():
                    raise InputError(f"suite {data!r} needs a folder {member!r} here", data_root)
                members.append(local_workload(Path(data_root) / member, split, member))
            else:
                members.append(remote_workload(remote, split, member))
        return members
    path = Path(data)
    if path.is_dir():
        return [local_workload(path, split)]
    if is_local(data):
        raise InputError("no such collection folder", path)
    return [remote_workload(data, split, data)]


def _first_texts(path: Path, count: int) -> list[str]:
    """The first ``count`` texts of a JSONL file, through the strict corpus reader."""
    return corpus_from_records(itertools.islice(json_records(numbered_lines(path), path), count), path).texts


def synthetic_texts(count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``count`` documents of about ``SYNTHETIC_DOCUMENT_WORDS`` words (the built-in sample documents in a
    random order, joined) and ``count`` queries (the built-in sample queries, repeated)."""
    rng = np.random.default_rng(seed)
    sentences = [document for _, document in SAMPLE_PAIRS]
    documents = []
    for _ in range(count):
        words: list[str] = []
        for index in itertools.cycle(rng.permutation(len(sentences)).tolist()):
            words += sentences[index].split()
            if len(words) >= SYNTHETIC_DOCUMENT_WORDS:
                break
        documents.append(" ".join(words[:SYNTHETIC_DOCUMENT_WORDS]))
    queries = [SAMPLE_PAIRS[index % len(SAMPLE_PAIRS)][0] for index in range(count)]
    return documents, queries


@dataclass
class EncodingSample:
    """What encoding a sample showed: speeds, the vectors themselves (for the synthetic index)."""

    source: str
    documents_per_second: float
    queries_per_second: float
    documents: sp.csr_matrix
    queries: sp.csr_matrix

    @property
    def document_nnz(self) -> float:
        return float(self.documents.getnnz(axis=1).mean())

    @property
    def query_nnz(self) -> float:
        return float(self.queries.getnnz(axis=1).mean())


def measure_encoding(
    encoder: RetrievalModel,
    documents: list[str],
    queries: list[str],
    source: str,
    max_length: int | None,
    query_max_length: int | None,
    batch_size: int,
    max_active_dims: int | None,
) -> EncodingSample:
    """Encode the sample (documents, then queries), timed; pruned like the evaluation prunes."""
    document_limit = encoder.side_max_length("document", max_length)
    query_limit = encoder.side_max_length("query", query_max_length or max_length)
    encoder.encode_document(
        documents[:2], batch_size=batch_size, max_length=document_limit, show_progress=False
    )  # warm-up: first-call allocations are not encoding speed
    started = time.perf_counter()
    document_vectors = encoder.encode_document(
        documents, batch_size=batch_size, max_length=document_limit, show_progress=False
    )
    document_seconds = time.perf_counter() - started
    started = time.perf_counter()
    query_vectors = encoder.encode_query(
        queries, batch_size=batch_size, max_length=query_limit, show_progress=False, max_active_dims=max_active_dims
    )
    query_seconds = time.perf_counter() - started
    if max_active_dims is not None:
        document_vectors = keep_top_weights(document_vectors, max_active_dims)
    return EncodingSample(
        source,
        len(documents) / max(document_seconds, 1e-9),
        len(queries) / max(query_seconds, 1e-9),
        document_vectors.tocsr(),
        query_vectors.tocsr(),
    )


def synthetic_corpus(sample: sp.csr_matrix, rows: int, seed: int = 0) -> sp.csr_matrix:
    """``rows`` documents like ``sample``: about the sample's mean nnz per row (Poisson draws; a term drawn
    twice in a row is stored once), terms drawn with the sample's term frequencies (plus a small floor for
    every vocabulary id), weights resampled from the sample's stored weights."""
    rng = np.random.default_rng(seed)
    vocabulary = sample.shape[1]
    frequency = np.bincount(sample.indices, minlength=vocabulary).astype(np.float64) + 1e-3
    frequency /= frequency.sum()
    counts = np.clip(rng.poisson(max(float(sample.getnnz(axis=1).mean()), 1.0), size=rows), 1, vocabulary)
    row_of = np.repeat(np.arange(rows), counts)
    terms = rng.choice(vocabulary, size=len(row_of), p=frequency)  # all rows at once: one vectorized draw
    matrix = sp.csr_matrix((np.ones(len(row_of), dtype=np.float32), (row_of, terms)), shape=(rows, vocabulary))
    matrix.sum_duplicates()
    weights = sample.data if sample.nnz else np.ones(1, dtype=np.float32)
    matrix.data = rng.choice(weights, size=matrix.nnz).astype(np.float32)
    return matrix


def measure_backend(
    documents: sp.csr_matrix, queries: sp.csr_matrix, backend: str, params: dict, k: int
) -> dict[str, float]:
    """Build, save (to a scratch folder, then deleted) and search an index of ``documents``, timed."""
    started = time.perf_counter()
    with build_index(documents, backend, **params) as searcher:
        build_seconds = time.perf_counter() - started
        with scratch_folder("cost") as scratch:
            searcher.save(scratch / "index")
            index_bytes = sum(path.stat().st_size for path in (scratch / "index").rglob("*") if path.is_file())
        started = time.perf_counter()
        searcher.search_batches(queries, k=min(k, documents.shape[0]), show_progress=False)
        search_seconds = time.perf_counter() - started
    return {
        "build_seconds": build_seconds,
        "index_bytes": float(index_bytes),
        "search_seconds_per_query": search_seconds / max(queries.shape[0], 1),
        "postings": float(documents.nnz),
    }


def vector_bytes(documents: int, nnz_per_document: float, id_chars: float = 8.0) -> int:
    """Bytes of a vectors folder: CSR (float32 value + int32 column per weight, row pointers of int32 or,
    past 2**31 weights, int64) + ids.json (each id, quotes, comma and space)."""
    weights = documents * nnz_per_document
    pointer = 4 if weights < 2**31 else 8
    return int(weights * 8 + (documents + 1) * pointer + documents * (id_chars + 4))


def fit_costs(small: dict[str, float], large: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Each cost as (fixed, per posting) through two measurements: the line through both points, its slope
    and intercept kept non-negative (timing noise on a busy machine can tilt a line through two points)."""
    fitted = {}
    for cost in COSTS:
        span = large["postings"] - small["postings"]
        slope = max((large[cost] - small[cost]) / span, 0.0) if span > 0 else large[cost] / max(large["postings"], 1.0)
        fitted[cost] = (max(large[cost] - slope * large["postings"], 0.0), slope)
    return fitted


def _member_row(workload: Workload, sample: EncodingSample, fitted: dict[str, tuple[float, float]]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": workload.name,
        "documents": workload.documents,
        "queries": workload.queries,
        "counted_from": workload.counted_from,
        "sample": sample.source,
        "avg_d_nnz": round(sample.document_nnz, 1),
        "avg_q_nnz": round(sample.query_nnz, 1),
    }
    if workload.documents is None or workload.queries is None:
        return row | {"estimated": False}
    postings = workload.documents * sample.document_nnz

    def at(cost: str) -> float:
        fixed, per_posting = fitted[cost]
        return fixed + per_posting * postings

    encode_docs = workload.documents / sample.documents_per_second
    encode_queries = workload.queries / sample.queries_per_second
    index = at("build_seconds")
    search = workload.queries * at("search_seconds_per_query")
    return row | {
        "estimated": True,
        "encode_docs_seconds": round(encode_docs, 1),
        "encode_queries_seconds": round(encode_queries, 1),
        "index_seconds": round(index, 1),
        "search_seconds": round(search, 1),
        "total_seconds": round(encode_docs + encode_queries + index + search, 1),
        "vectors_bytes": vector_bytes(workload.documents, sample.document_nnz),
        "index_bytes": int(at("index_bytes")),
    }


TOTALED = (
    "documents",
    "queries",
    "encode_docs_seconds",
    "encode_queries_seconds",
    "index_seconds",
    "search_seconds",
    "total_seconds",
    "vectors_bytes",
    "index_bytes",
)


def estimate_evaluation(
    encoder: RetrievalModel,
    data: str,
    split: str = "test",
    data_root: str | Path | None = None,
    backend: str = "exact",
    backend_params: dict | None = None,
    k: int = 1000,
    max_length: int | None = None,
    query_max_length: int | None = None,
    batch_size: int = 32,
    max_active_dims: int | None = None,
    sample: int = DEFAULT_SAMPLE,
    synthetic_docs: int = DEFAULT_SYNTHETIC_DOCS,
) -> dict[str, Any]:
    """Estimated encode / index / search time and disk of evaluating ``encoder`` on ``data`` (see the module).

    Writes nothing but a temporary index folder (removed); reads at most ``sample`` lines of a local corpus
    and queries file besides counting the corpus lines.
    """
    params = check_backend(backend, backend_params)
    check_max_active_dims(max_active_dims)
    if sample < 1 or synthetic_docs < 1:
        raise SpladekitError("sample and synthetic_docs must be at least 1")
    members = workloads(data, split, data_root)
    machine_started = time.perf_counter()
    samples: dict[str, EncodingSample] = {}
    for workload in members:
        if workload.corpus_file is not None and workload.queries_file is not None:
            key = str(workload.corpus_file)
            documents = _first_texts(workload.corpus_file, sample)
            queries = _first_texts(workload.queries_file, sample)
            source = f"first {len(documents)} documents / {len(queries)} queries of the local files"
        else:
            key = "synthetic"
            if key in samples:
                continue
            documents, queries = synthetic_texts(sample)
            source = (
                f"{sample} documents of {SYNTHETIC_DOCUMENT_WORDS} words / queries made of spladekit's "
                "built-in sample pairs"
            )
        samples[key] = measure_encoding(
            encoder, documents, queries, source, max_length, query_max_length, batch_size, max_active_dims
        )
    pooled_documents = sp.vstack([item.documents for item in samples.values()]).tocsr()
    pooled_queries = sp.vstack([item.queries for item in samples.values()]).tocsr()
    corpus = synthetic_corpus(pooled_documents, synthetic_docs)
    small = measure_backend(corpus[: max(synthetic_docs // 4, 1)], pooled_queries, backend, params, k)
    large = measure_backend(corpus, pooled_queries, backend, params, k)
    fitted = fit_costs(small, large)
    rows = [
        _member_row(workload, samples[str(workload.corpus_file) if workload.corpus_file else "synthetic"], fitted)
        for workload in members
    ]
    known = [row for row in rows if row["estimated"]]
    total: dict[str, Any] = {key: sum(row[key] for row in known) for key in TOTALED} if known else {}
    return {
        "data": data,
        "split": split,
        "backend": backend,
        "backend_params": params,
        "k": k,
        "batch_size": batch_size,
        "max_active_dims": max_active_dims,
        "members": rows,
        "total": total,
        "estimate_covers": f"{len(known)}/{len(rows)}",
        "measurement": {
            "sample": sample,
            "synthetic_docs": [corpus[: max(synthetic_docs // 4, 1)].shape[0], synthetic_docs],
            "synthetic_avg_d_nnz": round(large["postings"] / synthetic_docs, 1),
            "synthetic_build_seconds": [round(small["build_seconds"], 3), round(large["build_seconds"], 3)],
            "synthetic_index_bytes": [int(small["index_bytes"]), int(large["index_bytes"])],
            "synthetic_search_ms_per_query": [
                round(1000 * small["search_seconds_per_query"], 3),
                round(1000 * large["search_seconds_per_query"], 3),
            ],
            "fitted_fixed_and_per_posting": {cost: list(fitted[cost]) for cost in COSTS},
            "seconds": round(time.perf_counter() - machine_started, 1),
        },
    }


def estimate_table(estimate: dict[str, Any]) -> str:
    """The estimate as a readable table (rich): one row per collection, and the total for a suite."""
    from rich.console import Console
    from rich.table import Table

    def duration(seconds: float | None) -> str:
        if seconds is None:
            return "?"
        return (
            f"{seconds:.0f} s"
            if seconds < 120
            else f"{seconds / 60:.0f} min"
            if seconds < 7200
            else f"{seconds / 3600:.1f} h"
        )

    def size(count: float | None) -> str:
        return "?" if count is None else f"{count / 1e9:.2f} GB" if count >= 1e8 else f"{count / 1e6:.1f} MB"

    table = Table(title=f"evaluate --dry-run: {estimate['data']} ({estimate['backend']}, k={estimate['k']})")
    for column in (
        "collection",
        "docs",
        "queries",
        "d nnz",
        "encode docs",
        "encode queries",
        "index",
        "search",
        "vectors disk",
        "index disk",
    ):
        table.add_column(column, justify="left" if column == "collection" else "right")
    rows = estimate["members"] + (
        [{"name": "total", **estimate["total"], "estimated": True}]
        if len(estimate["members"]) > 1 and estimate["total"]
        else []
    )
    for row in rows:
        table.add_row(
            row["name"],
            "?" if row.get("documents") is None else f"{row['documents']:,}",
            "?" if row.get("queries") is None else f"{row['queries']:,}",
            str(row.get("avg_d_nnz", "")),
            duration(row.get("encode_docs_seconds")),
            duration(row.get("encode_queries_seconds")),
            duration(row.get("index_seconds")),
            duration(row.get("search_seconds")),
            size(row.get("vectors_bytes")),
            size(row.get("index_bytes")),
        )
    buffer = io.StringIO()
    Console(file=buffer, width=160, color_system=None).print(table)
    measurement = estimate["measurement"]
    notes = [
        f"measured in {measurement['seconds']} s: encoding "
        f"{', '.join(sorted({row['sample'] for row in estimate['members']}))}; "
        f"{estimate['backend']} indexes of {' and '.join(f'{n:,}' for n in measurement['synthetic_docs'])} "
        f"synthetic documents (~{measurement['synthetic_avg_d_nnz']} nnz): built in "
        f"{' and '.join(map(str, measurement['synthetic_build_seconds']))} s, "
        f"{' and '.join(map(str, measurement['synthetic_search_ms_per_query']))} ms/query; "
        "index and search fitted as fixed + per-posting cost",
        f"covers {estimate['estimate_covers']} collections",
    ]
    return buffer.getvalue().rstrip() + "\n" + "\n".join(notes)
