"""Search benchmark: spladekit's exact index (before/after), scipy brute force and any registered backend, side
by side in one run, on a synthetic SPLADE-like collection.

Collection: term ids drawn from a Zipf law (P(rank r) ∝ 1/r over a random permutation of the vocabulary;
duplicates merged, so rows hold fewer active terms than drawn: ~124 of 170 draws per document, ~30 of 35
per query), weights Gamma(2, 0.5) (positive, mean 1).

Methods (every one returns the top-k by the rules of spladekit.index.exact: score descending, ties by lower
row, no zero scores):

* ``exact before``: the algorithm spladekit used until issue 13 (scipy ``Q @ P`` per batch of queries, then a
  Python loop taking each query's top-k from the sparse score row); kept here only, as the baseline.
* ``exact``: :class:`spladekit.index.ExactSearcher` (dense accumulator per query, threads).
* ``scipy brute force``: ``(D @ Qᵀ)ᵀ`` per batch of queries, densified, the same top-k selection.
* any other name of ``spladekit.index.BACKENDS`` given in ``--backends`` (seismic, bmp, pisa, …), built
  with its defaults and the ``--param BACKEND:NAME=VALUE`` given; a name not registered is reported as
  skipped.

Reported per method: build seconds, structure MiB (the index files the backend saves; brute force: the
document CSR), queries/s with 1 thread and with all threads (``--threads``; backends with a
``num_threads``/``threads`` search parameter) with the CPU seconds per wall-clock second of each run (1 thread: the
share of a core the machine left us; above 1 with threads: they really ran at once), recall@k against ``exact``
and whether the top-k is
identical to it. The slow baselines (before, brute force) run on the first ``--slow-queries`` queries.

Several sizes (``--docs 1000000,2000000,4000000``) print the measured growth and a *linear extrapolation*
to ``--extrapolate-to`` documents (MS MARCO: 8.8M passages, 6,980 dev queries), labelled as such. Before
building, the peak memory of the exact path is estimated and printed.

    python benchmarks/search_bench.py --docs 1000000 --queries 200

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.common.sparse import best_first
from spladekit.index import BACKENDS, ExactSearcher, Searcher, SearchResult
from spladekit.index.exact import available_cores, top_k

GIB = 2**30
THREAD_PARAMS = ("num_threads", "threads")


def zipf_probabilities(vocab: int) -> np.ndarray:
    p = 1.0 / np.arange(1, vocab + 1)
    return p / p.sum()


def zipf_rows(
    rows: int, vocab: int, draws: int, rng: np.random.Generator, permutation: np.ndarray, chunk: int = 50_000
) -> sp.csr_matrix:
    """rows × vocab float32 CSR with ``draws`` Zipf-distributed term draws per row (merged duplicates).

    Written chunk by chunk into arrays sized for ``rows × draws`` entries: the tail that merged duplicates
    leave unused is never touched, so it takes no memory, and no second copy of the matrix is made."""
    cdf = np.cumsum(zipf_probabilities(vocab))
    data, indices = np.empty(rows * draws, np.float32), np.empty(rows * draws, np.int32)
    indptr = np.zeros(rows + 1, np.int64)
    filled = 0
    for start in tqdm(range(0, rows, chunk), desc="generating", unit="chunk", leave=False):
        n = min(chunk, rows - start)
        terms = permutation[np.minimum(np.searchsorted(cdf, rng.random((n, draws))), vocab - 1)]
        weights = rng.gamma(2.0, 0.5, size=(n, draws)).astype(np.float32)
        block = sp.coo_matrix(
            (weights.ravel(), (np.repeat(np.arange(n), draws), terms.ravel())), shape=(n, vocab)
        ).tocsr()
        block.sum_duplicates()
        data[filled : filled + block.nnz], indices[filled : filled + block.nnz] = block.data, block.indices
        indptr[start + 1 : start + n + 1] = filled + block.indptr[1:]
        filled += block.nnz
    return sp.csr_matrix((data[:filled], indices[:filled], indptr), shape=(rows, vocab))


def expected_nnz(vocab: int, draws: int) -> float:
    """Expected distinct terms of a row: Σ_v 1 − (1 − p_v)^draws."""
    return float(np.sum(1 - (1 - zipf_probabilities(vocab)) ** draws))


def memory_estimate(
    docs: int, vocab: int, nnz_per_doc: float, threads: int, before_batch: int, brute_batch: int
) -> dict[str, float]:
    """Bytes (GiB) of the big arrays alive at once. Documents D and postings P = Dᵀ: float32 weights + int32
    ids per entry; exact search: an accumulator and its partition copy (float32, n_docs) per thread; exact
    before: a score row (int32 + float32) per query of the batch for every document sharing a term (at most
    all); brute force: the sparse batch of scores and its dense copy."""
    matrix = docs * nnz_per_doc * 8 + (docs + vocab) * 8
    parts = {
        "documents D": matrix,
        "postings P": matrix,
        "exact search": threads * 2 * docs * 4,
        "exact before (extra)": before_batch * docs * 8,
        "brute force (extra, without P)": brute_batch * docs * 12,
    }
    return {name: value / GIB for name, value in parts.items()}


def before_search(postings: sp.csr_matrix, queries: sp.csr_matrix, k: int, batch: int) -> SearchResult:
    """spladekit's exact search until issue 13: ``S = Q · P`` by scipy per batch of queries, then per query
    the top-k of its sparse score row (``best_first``)."""
    hits = []
    for start in range(0, queries.shape[0], batch):
        scores = (queries[start : start + batch] @ postings).tocsr()
        for i in range(scores.shape[0]):
            low, high = scores.indptr[i], scores.indptr[i + 1]
            rows, values = scores.indices[low:high].astype(np.int64), scores.data[low:high]
            order = best_first(rows, values, k)
            hits.append((rows[order], values[order]))
    return SearchResult.from_hits(hits, k)


def brute_force_search(documents: sp.csr_matrix, queries: sp.csr_matrix, k: int, batch: int) -> SearchResult:
    """Every document scored against a batch of queries by scipy, ``(D @ Qᵀ)ᵀ`` densified, then the top-k."""
    doc_indices = np.full((queries.shape[0], k), -1, np.int64)
    scores = np.zeros((queries.shape[0], k), np.float32)
    for start in range(0, queries.shape[0], batch):
        dense = (documents @ queries[start : start + batch].T).toarray().T
        for i, row in enumerate(dense):
            rows, values = top_k(np.ascontiguousarray(row), k)
            doc_indices[start + i, : len(rows)], scores[start + i, : len(rows)] = rows, values
    return SearchResult(doc_indices, scores)


def recall_at_k(found: np.ndarray, reference: np.ndarray) -> float:
    return float(
        np.mean([len(set(f[f >= 0]) & set(r[r >= 0])) / max((r >= 0).sum(), 1) for f, r in zip(found, reference)])
    )


def timed(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - started


def timed_parallel(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """Like :func:`timed`, plus the CPU seconds of every thread of the process per wall-clock second: above
    1 only when threads ran at the same time (the GIL was released), whatever the machine's load."""
    cpu = time.process_time()
    value, seconds = timed(function, *args, **kwargs)
    return value, seconds, (time.process_time() - cpu) / seconds


def saved_mib(searcher: Searcher) -> float:
    """The size of the files the backend saves for its index."""
    with tempfile.TemporaryDirectory() as folder:
        searcher.write_files(Path(folder))
        return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file()) / 2**20


def compare(reference: SearchResult, result: SearchResult) -> dict[str, Any]:
    n = result.doc_indices.shape[0]
    return {
        "recall": recall_at_k(result.doc_indices, reference.doc_indices[:n]),
        "identical": bool(
            np.array_equal(result.doc_indices, reference.doc_indices[:n])
            and np.array_equal(result.scores, reference.scores[:n])
        ),
    }


def thread_param(backend: type[Searcher]) -> str | None:
    return next((p.name for p in backend.declared_params if p.role == "search" and p.name in THREAD_PARAMS), None)


def run_size(docs: int, args: argparse.Namespace, backend_params: dict[str, dict[str, str]]) -> list[dict]:
    """Every method at one collection size; one row per method."""
    before_batch = max(1, min(args.before_batch, GIB // (8 * docs)))  # ≤ 1 GiB of sparse scores per batch
    estimate = memory_estimate(
        docs, args.vocab, expected_nnz(args.vocab, args.doc_draws), args.threads, before_batch, args.brute_batch
    )
    print(
        f"\n## {docs:,} documents\nestimated memory (GiB): "
        + ", ".join(f"{name} {value:.2f}" for name, value in estimate.items())
        + f"; peak of the exact path ≈ {sum(list(estimate.values())[:3]):.2f}"
        + f", with exact before {sum(list(estimate.values())[:4]):.2f}",
        flush=True,
    )
    rng = np.random.default_rng(args.seed)
    permutation = rng.permutation(args.vocab)
    documents = zipf_rows(docs, args.vocab, args.doc_draws, rng, permutation)
    queries = zipf_rows(args.queries, args.vocab, args.query_draws, rng, permutation)
    slow = queries[: args.slow_queries]
    print(
        f"collection: {docs:,} docs, avg nnz {documents.nnz / docs:.1f}; {queries.shape[0]} queries, avg nnz "
        f"{queries.nnz / queries.shape[0]:.1f}; vocab {args.vocab:,}; load average {os.getloadavg()}",
        flush=True,
    )

    rows = []
    exact, build = timed(ExactSearcher.build, documents)
    size = saved_mib(exact)
    reference, one, cpu_one = timed_parallel(exact.search, queries, k=args.k, num_threads=1)
    result, everyone, cpu = timed_parallel(exact.search, queries, k=args.k, num_threads=args.threads)
    rows.append(
        {
            "method": "exact",
            "build_s": build,
            "mib": size,
            "qps_1": queries.shape[0] / one,
            "cpu_per_wall_1": cpu_one,
            "qps_all": queries.shape[0] / everyone,
            "cpu_per_wall": cpu,
            **compare(reference, result),
        }
    )
    if "before" in args.baselines:
        result, seconds = timed(before_search, exact.postings, slow, args.k, before_batch)
        rows.append(
            {
                "method": f"exact before (query batch {before_batch})",
                "build_s": build,
                "mib": size,
                "qps_1": slow.shape[0] / seconds,
                "qps_all": None,
                "cpu_per_wall": None,
                **compare(reference, result),
            }
        )
    del exact
    if "brute" in args.baselines:
        result, seconds = timed(brute_force_search, documents, slow, args.k, args.brute_batch)
        rows.append(
            {
                "method": f"scipy brute force (D @ Qᵀ, query batch {args.brute_batch})",
                "build_s": 0.0,
                "mib": sum(a.nbytes for a in (documents.data, documents.indices, documents.indptr)) / 2**20,
                "qps_1": slow.shape[0] / seconds,
                "qps_all": None,
                "cpu_per_wall": None,
                **compare(reference, result),
            }
        )

    for name in args.backends:
        if name == "exact":
            continue
        if name not in BACKENDS:
            print(f"{name}: skipped, not registered in spladekit.index.BACKENDS ({', '.join(BACKENDS)})")
            continue
        backend, params = BACKENDS[name], backend_params.get(name, {})
        searcher, build = timed(backend.build, documents, **backend.check_params(params))
        size = saved_mib(searcher)
        threads = thread_param(backend)
        everyone = cpu = cpu_one = None
        if threads is None:
            result, one = timed(searcher.search, queries, k=args.k)
        else:
            result, one, cpu_one = timed_parallel(searcher.search, queries, k=args.k, **{threads: 1})
            _, everyone, cpu = timed_parallel(searcher.search, queries, k=args.k, **{threads: args.threads})
        label = f"{name} ({', '.join(f'{key}={value}' for key, value in params.items())})" if params else name
        rows.append(
            {
                "method": label,
                "build_s": build,
                "mib": size,
                "qps_1": queries.shape[0] / one,
                "cpu_per_wall_1": cpu_one,
                "qps_all": None if everyone is None else queries.shape[0] / everyone,
                "cpu_per_wall": cpu,
                **compare(reference, result),
            }
        )
        del searcher
    print_table(rows, args)
    return rows


def print_table(rows: list[dict], args: argparse.Namespace) -> None:
    print(
        f"\n| method | build (s) | structure (MiB) | queries/s (1 thread; CPU/wall) | queries/s ({args.threads} "
        f"threads; CPU/wall) | recall@{args.k} vs exact | same top-k as exact |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        everyone = "—" if row["qps_all"] is None else f"{row['qps_all']:,.1f} ({row['cpu_per_wall']:.2f})"
        one = f"{row['qps_1']:,.1f}" + ("" if row.get("cpu_per_wall_1") is None else f" ({row['cpu_per_wall_1']:.2f})")
        print(
            f"| {row['method']} | {row['build_s']:.1f} | {row['mib']:,.0f} | {one} | {everyone} | "
            f"{row['recall']:.3f} | {'yes' if row['identical'] else 'no'} |"
        )
    exact, before = rows[0], next((row for row in rows if row["method"].startswith("exact before")), None)
    if before is not None:
        print(
            f"\nexact vs exact before: ×{exact['qps_1'] / before['qps_1']:.1f} with 1 thread, "
            f"×{exact['qps_all'] / before['qps_1']:.1f} with {args.threads} threads (before: 1 thread)"
        )


def print_growth(sizes: list[int], results: list[list[dict]], args: argparse.Namespace) -> None:
    """Measured values per size, their growth between consecutive sizes, and a least-squares line
    y = a + b·n_docs through them evaluated at ``--extrapolate-to`` (seconds per query extrapolated, then
    inverted to queries/s)."""
    target = args.extrapolate_to
    print(f"\n## growth with the collection size (measured at {', '.join(f'{n:,}' for n in sizes)} documents)")
    print(
        f"\n| method | quantity | {' | '.join(f'{n:,}' for n in sizes)} | growth per size step | "
        f"LINEAR EXTRAPOLATION to {target:,} (not measured) |"
    )
    print(f"|---|---|{'---:|' * len(sizes)}---|---:|")
    for index, row in enumerate(results[0]):
        series = [rows[index] for rows in results]
        for key, label, invert in (
            ("build_s", "build (s)", False),
            ("mib", "structure (MiB)", False),
            ("qps_1", "queries/s, 1 thread", True),
            ("qps_all", f"queries/s, {args.threads} threads", True),
        ):
            values = [entry[key] for entry in series]
            if any(value is None for value in values):
                continue
            fitted = [1 / value for value in values] if invert else values  # s/query grows ~linearly
            slope, intercept = np.polyfit(sizes, fitted, 1)
            projected = intercept + slope * target
            shown = "— (no growth to fit)" if projected <= 0 else f"{1 / projected if invert else projected:,.1f}"
            growth = ", ".join(f"×{b / a:.2f}" if a else "—" for a, b in zip(values, values[1:]))
            print(
                f"| {row['method']} | {label} | {' | '.join(f'{value:,.1f}' for value in values)} | {growth} | "
                f"{shown} |"
            )
        if row["qps_all"] is not None:
            seconds_per_query = np.polyfit(sizes, [1 / entry["qps_all"] for entry in series], 1)
            total = (seconds_per_query[1] + seconds_per_query[0] * target) * args.extrapolate_queries
            shown = "— (no growth to fit)" if total <= 0 else f"{total / 60:,.1f} min"
            print(
                f"| {row['method']} | {args.extrapolate_queries:,} queries, {args.threads} threads "
                f"(extrapolated) | {' | '.join('' for _ in sizes)} | | {shown} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--docs",
        default="1000000",
        help="documents; several sizes comma-separated "
        "(e.g. 1000000,2000000,4000000) print the growth and a linear extrapolation",
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--slow-queries",
        type=int,
        default=50,
        help="queries (the first ones) for the slow baselines: exact before, brute force",
    )
    parser.add_argument(
        "--backends",
        default="exact,seismic",
        help="comma-separated names from spladekit.index.BACKENDS (exact always runs: the reference)",
    )
    parser.add_argument("--baselines", default="before,brute", help="comma-separated: before, brute (or none)")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="BACKEND:NAME=VALUE",
        help="a build parameter of a backend, e.g. seismic:n_postings=3500 (repeatable)",
    )
    parser.add_argument("--threads", type=int, default=available_cores(), help="the 'all threads' count")
    parser.add_argument(
        "--before-batch",
        type=int,
        default=64,
        help="queries per sparse product in exact before (capped at 1 GiB of scores)",
    )
    parser.add_argument("--brute-batch", type=int, default=16, help="queries per brute-force product")
    parser.add_argument("--vocab", type=int, default=30_522)
    parser.add_argument("--doc-draws", type=int, default=170, help="term draws per document (~124 distinct)")
    parser.add_argument("--query-draws", type=int, default=35, help="term draws per query (~30 distinct)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extrapolate-to", type=int, default=8_800_000, help="documents (MS MARCO: 8.8M)")
    parser.add_argument("--extrapolate-queries", type=int, default=6_980, help="queries (MS MARCO dev: 6,980)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    sizes = [int(size) for size in args.docs.split(",")]
    args.backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    args.baselines = [name.strip() for name in args.baselines.split(",") if name.strip() not in ("", "none")]
    backend_params: dict[str, dict[str, str]] = {}
    for item in args.param:
        backend, _, assignment = item.partition(":")
        name, _, value = assignment.partition("=")
        backend_params.setdefault(backend, {})[name] = value

    print(
        f"memory estimate at {args.extrapolate_to:,} documents (GiB): "
        + ", ".join(
            f"{name} {value:.2f}"
            for name, value in memory_estimate(
                args.extrapolate_to,
                args.vocab,
                expected_nnz(args.vocab, args.doc_draws),
                args.threads,
                max(1, min(args.before_batch, GIB // (8 * args.extrapolate_to))),
                args.brute_batch,
            ).items()
        )
    )
    results = [run_size(docs, args, backend_params) for docs in sizes]
    if len(sizes) > 1:
        print_growth(sizes, results, args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\npeak RSS of the whole run: {peak:.1f} GiB; load average at the end {os.getloadavg()}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "sizes": sizes, "rows": results, "peak_rss_gib": peak},
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
