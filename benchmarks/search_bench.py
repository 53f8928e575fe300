"""Search benchmark: spladekit exact index vs scipy brute force vs Seismic, side by side in one run.

Synthetic SPLADE-like collection: term ids drawn from a Zipf law (P(rank r) ∝ 1/r over a random
permutation of the vocabulary; duplicates merged, so rows hold slightly fewer active terms than drawn),
weights Gamma(2, 0.5) (positive, mean 1). Reports, per method: build seconds, structure bytes
(exact: inverted-index arrays; brute force: the document CSR; Seismic: its saved index file), queries
per second (one search thread for every method) and recall@10 against the exact index.

    python benchmarks/search_bench.py --docs 1000000 --queries 200

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.index import ExactSearcher, SeismicSearcher


def zipf_rows(rows: int, vocab: int, draws: int, rng: np.random.Generator, permutation: np.ndarray,
              chunk: int = 50_000) -> sp.csr_matrix:
    """rows × vocab float32 CSR with ``draws`` Zipf-distributed term draws per row (merged duplicates)."""
    p = 1.0 / np.arange(1, vocab + 1)
    cdf = np.cumsum(p / p.sum())
    blocks = []
    for start in tqdm(range(0, rows, chunk), desc="generating", unit="chunk", leave=False):
        n = min(chunk, rows - start)
        terms = permutation[np.minimum(np.searchsorted(cdf, rng.random((n, draws))), vocab - 1)]
        weights = rng.gamma(2.0, 0.5, size=(n, draws)).astype(np.float32)
        block = sp.coo_matrix((weights.ravel(), (np.repeat(np.arange(n), draws), terms.ravel())),
                              shape=(n, vocab)).tocsr()
        block.sum_duplicates()
        blocks.append(block)
    return sp.vstack(blocks, format="csr")


def csr_bytes(matrix: sp.csr_matrix) -> int:
    return matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes


def brute_force_top_k(queries: sp.csr_matrix, documents: sp.csr_matrix, k: int, batch: int = 16) -> np.ndarray:
    """scipy ``Q @ D.T`` densified per batch, then ``argpartition`` + sort (ties: lower row first)."""
    out = np.empty((queries.shape[0], k), dtype=np.int64)
    for start in range(0, queries.shape[0], batch):
        scores = (queries[start : start + batch] @ documents.T).toarray()
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        for i, candidates in enumerate(part):
            out[start + i] = candidates[np.lexsort((candidates, -scores[i, candidates]))]
    return out


def recall_at_k(found: np.ndarray, reference: np.ndarray) -> float:
    return float(np.mean([len(set(f[f >= 0]) & set(r[r >= 0])) / max((r >= 0).sum(), 1)
                          for f, r in zip(found, reference)]))


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--vocab", type=int, default=30_522)
    parser.add_argument("--doc-draws", type=int, default=170, help="term draws per document (~120 distinct)")
    parser.add_argument("--query-draws", type=int, default=35, help="term draws per query (~30 distinct)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-postings", type=int, default=3500, help="Seismic n_postings")
    parser.add_argument("--query-cut", type=int, default=20, help="Seismic query_cut")
    parser.add_argument("--heap-factor", type=float, default=0.7, help="Seismic heap_factor")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    permutation = rng.permutation(args.vocab)
    documents = zipf_rows(args.docs, args.vocab, args.doc_draws, rng, permutation)
    queries = zipf_rows(args.queries, args.vocab, args.query_draws, rng, permutation)
    print(f"collection: {documents.shape[0]:,} docs, avg nnz {documents.nnz / documents.shape[0]:.1f}; "
          f"{queries.shape[0]} queries, avg nnz {queries.nnz / queries.shape[0]:.1f}; vocab {args.vocab:,}")

    rows = []
    exact, build = timed(ExactSearcher.build, documents)
    result, seconds = timed(exact.search, queries, k=args.k)
    exact_top = result.doc_indices
    rows.append({"method": "spladekit exact (inverted index)", "build_s": build,
                 "bytes": csr_bytes(exact.postings), "qps": args.queries / seconds, "recall@10": 1.0})
    del exact

    brute, seconds = timed(brute_force_top_k, queries, documents, args.k)
    rows.append({"method": "scipy brute force Q @ D.T", "build_s": 0.0, "bytes": csr_bytes(documents),
                 "qps": args.queries / seconds, "recall@10": recall_at_k(brute, exact_top)})

    seismic, build = timed(SeismicSearcher.build, documents, n_postings=args.n_postings,
                           query_cut=args.query_cut, heap_factor=args.heap_factor)
    seismic.num_threads = 1
    result, seconds = timed(seismic.search, queries, k=args.k)
    with tempfile.TemporaryDirectory() as folder:
        seismic.write_files(Path(folder))
        size = sum(path.stat().st_size for path in Path(folder).iterdir())
    rows.append({"method": f"Seismic (n_postings={args.n_postings}, query_cut={args.query_cut}, "
                 f"heap_factor={args.heap_factor})", "build_s": build, "bytes": size,
                 "qps": args.queries / seconds, "recall@10": recall_at_k(result.doc_indices, exact_top)})

    print("\n| method | build (s) | structure (MiB) | queries/s (1 thread) | recall@10 vs exact |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['method']} | {row['build_s']:.1f} | {row['bytes'] / 2**20:,.0f} | {row['qps']:.1f} | "
              f"{row['recall@10']:.3f} |")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\npeak RSS of the whole run: {peak:.1f} GiB")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows,
                                         "peak_rss_gib": peak}, indent=2))


if __name__ == "__main__":
    main()
