"""Backends side by side on one real collection, in one run: effectiveness, build and search time.

The corpus is encoded once (``spladekit.evaluation.evaluate``'s cache under ``$SPLADEKIT_CACHE``: the first backend
encodes it, the others read it back), then every backend is evaluated through ``spladekit.evaluation.evaluate`` with
the same vectors: index build seconds, search ms per query (all queries, ``search_batches``), nDCG@10,
RR@10 and recall@k, and how many queries' top-10 and whole top-k (ids in rank order) equal the first backend's (the
reference: ``exact``; ``pisa`` for the backends that score integer impacts, since at one scale it is brute force
over the same quantized vectors, ``tests/index/test_pisa.py``).

    SPLADEKIT_CACHE=/tmp/bench/cache nice -n 10 python benchmarks/backends_scifact.py \\
        --model ../shared/models/splade-tiny-msmarco --data ../shared/data/scifact --split test \\
        --max-length 256 --backends exact,seismic,milvus --k 100 --json /tmp/bench/backends.json

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from spladekit.evaluation.evaluate import evaluate_data
from spladekit.evaluation.run import Run
from spladekit.index import backend_class
from spladekit.model.encoder import SparseEncoder


def agreement(reference: Run, other: Run, depth: int | None = None) -> int:
    """Queries whose ``depth`` best documents (all, when None; ids in rank order) are the same in both runs."""
    return sum(reference.ranking(query)[:depth] == other.ranking(query)[:depth] for query in reference.scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument(
        "--backends", default="exact,seismic,milvus", help="comma-separated; the first is the reference"
    )
    parser.add_argument("--k", type=int, default=100, help="documents per query")
    parser.add_argument("--runs", type=Path, default=Path("backend-runs"), help="folder for the TREC runs")
    parser.add_argument("--json", type=Path, help="write the table as JSON here")
    args = parser.parse_args()

    backends = args.backends.split(",")
    for backend in backends:
        backend_class(backend)  # an unknown name fails before the encoding
    encoder = SparseEncoder.from_pretrained(args.model, max_length=args.max_length)
    rows, runs = [], {}
    for backend in backends:
        result = evaluate_data(
            encoder,
            args.data,
            split=args.split,
            backend=backend,
            k=args.k,
            max_length=args.max_length,
            run_dir=args.runs / backend,
        )
        runs[backend] = Run.read(result.provenance["run"])
        rows.append(
            {
                "backend": backend,
                "params": result.provenance["backend_params"],
                "corpus_cached": result.provenance["corpus_cached"],
                **result.metrics,
                "build_seconds": result.timings["index_seconds"],
                "search_ms_per_query": round(result.efficiency["search_ms_per_query"], 3),
                "top10_equal_to_reference": agreement(runs[backends[0]], runs[backend], 10),
                "run_equal_to_reference": agreement(runs[backends[0]], runs[backend]),
                "queries": result.efficiency["queries"],
                "docs": result.efficiency["docs"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    measures = [name for name in rows[0] if "@" in name and int(name.split("@")[1]) <= args.k]  # R@1000 needs k=1000
    reference = backends[0]
    header = f"| backend | {' | '.join(measures)} | build (s) | search ms/query"
    print(f"\n{header} | top-10 = {reference} | all = {reference} |")
    print("|---|" + "---:|" * (len(measures) + 4))
    for row in rows:
        print(
            f"| {row['backend']} | "
            + " | ".join(f"{row[name]:.4f}" for name in measures)
            + f" | {row['build_seconds']:.2f} | {row['search_ms_per_query']:.2f} | "
            f"{row['top10_equal_to_reference']}/{row['queries']} | {row['run_equal_to_reference']}/{row['queries']} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "load": os.getloadavg(), "args": vars(args)}, indent=2, default=str)
        )


if __name__ == "__main__":
    main()
