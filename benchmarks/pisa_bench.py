"""PISA (each query algorithm) vs exact: build seconds, index bytes, queries per second (one thread),
recall@k against exact search, and how many queries' top-k equal brute force over the quantized vectors
(``round(w × scale)``, ties by row: what PISA promises).

The collection is synthetic, ``search_bench.zipf_rows`` (Zipf term ids, Gamma(2, 0.5) weights, ~120
distinct terms per document, ~30 per query), or real: ``--vectors`` and ``--query-vectors`` (folders
written by ``spladekit encode``). PISA is built from row blocks (``build_from_blocks``, the sharded-folder
path); its index bytes are the files of its saved folder, exact's its saved ``postings.npz``.

    python benchmarks/pisa_bench.py --docs 100000 --queries 500
    python benchmarks/pisa_bench.py --vectors DOCS --query-vectors QUERIES

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from search_bench import recall_at_k, timed, zipf_rows
from spladekit.common.sparse import best_first, quantize
from spladekit.index import ExactSearcher, PisaSearcher
from spladekit.index.pisa import ALGORITHMS
from spladekit.vectors.artifact import Vectors


def quantized_top_k(documents, queries, scale: float, k: int) -> list[list[int]]:
    """Brute force over the quantized vectors, integer arithmetic, best first, ties by row."""
    scores = (quantize(queries, scale).astype(np.int64) @ quantize(documents, scale).astype(np.int64).T).tocsr()
    top = []
    for i in range(scores.shape[0]):
        rows = scores.indices[scores.indptr[i] : scores.indptr[i + 1]].astype(np.int64)
        top.append(rows[best_first(rows, scores.data[scores.indptr[i] : scores.indptr[i + 1]], k)].tolist())
    return top


def folder_bytes(searcher, folder: Path) -> int:
    searcher.save(folder)
    return sum(item.stat().st_size for item in folder.iterdir() if item.name not in ("manifest.json", "ids.json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--vocab", type=int, default=30_522)
    parser.add_argument("--block", type=int, default=10_000, help="rows per block fed to build_from_blocks")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--vectors", type=Path, help="a vectors folder instead of the synthetic documents")
    parser.add_argument("--query-vectors", type=Path, help="a vectors folder instead of the synthetic queries")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    if args.vectors and args.query_vectors:
        documents, queries = Vectors.load(args.vectors).matrix, Vectors.load(args.query_vectors).matrix
        args.docs, args.queries = documents.shape[0], queries.shape[0]
    else:
        rng = np.random.default_rng(0)
        permutation = rng.permutation(args.vocab)
        documents = zipf_rows(args.docs, args.vocab, 170, rng, permutation)
        queries = zipf_rows(args.queries, args.vocab, 35, rng, permutation)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        exact, seconds = timed(ExactSearcher.build, documents)
        reference, search_seconds = timed(exact.search, queries, args.k)
        rows.append(
            {
                "method": "exact",
                "build_s": seconds,
                "bytes": folder_bytes(exact, Path(scratch) / "exact"),
                "qps": args.queries / search_seconds,
                "recall@k": 1.0,
            }
        )
        blocks = (documents[start : start + args.block] for start in range(0, args.docs, args.block))
        pisa, seconds = timed(PisaSearcher.build_from_blocks, blocks)
        size = folder_bytes(pisa, Path(scratch) / "pisa")
        promised = quantized_top_k(documents, queries, pisa.params["scale"], args.k)
        for algorithm in ALGORITHMS:
            started = time.perf_counter()
            found = pisa.search(queries, args.k, algorithm=algorithm)
            search_seconds = time.perf_counter() - started
            rows.append(
                {
                    "method": f"pisa {algorithm}",
                    "build_s": seconds,
                    "bytes": size,
                    "qps": args.queries / search_seconds,
                    "recall@k": recall_at_k(found.doc_indices, reference.doc_indices),
                    "equal_quantized": sum(
                        row[row >= 0].tolist() == want for row, want in zip(found.doc_indices, promised)
                    ),
                }
            )
    load = os.getloadavg()
    print(
        f"{args.docs:,} documents ({documents.nnz / args.docs:.0f} terms each), {args.queries} queries "
        f"({queries.nnz / args.queries:.0f} terms), load average {load[0]:.2f}"
    )
    print(
        "| method | build (s) | index MB | q/s (1 thread) | recall@k vs exact | top-k = quantized brute force |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    for row in rows:
        equal = f"{row['equal_quantized']}/{args.queries}" if "equal_quantized" in row else ""
        print(
            f"| {row['method']} | {row['build_s']:.2f} | {row['bytes'] / 1e6:.1f} | {row['qps']:.1f} | "
            f"{row['recall@k']:.4f} | {equal} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "load": load, "args": vars(args)}, indent=2, default=str))


if __name__ == "__main__":
    main()
