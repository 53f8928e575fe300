"""tune-index on a synthetic SPLADE-like collection of any size (the one of benchmarks/search_bench.py: Zipf term ids,
~124 active terms per document and ~30 per query over BERT's 30,522, weights Gamma(2, 0.5)).

    python benchmarks/tune_synthetic.py --docs 1000000 --queries 200 --backend seismic --output tune-1m \\
        [--grid n_postings=2000,4000 --grid query_cut=3,5,8,12 --grid heap_factor=0.6,0.8,1.0]

Writes OUTPUT/tuning.json and OUTPUT/frontier.png, as ``spladekit tune-index`` does (same code:
``spladekit.evaluation.tuning``), without writing the synthetic vectors to disk.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from search_bench import zipf_rows
from spladekit.evaluation.tuning import plot_frontier, tune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--backend", default="seismic")
    parser.add_argument("--grid", action="append", default=[], help="NAME=V1,V2 (default: the backend's grid)")
    parser.add_argument("--vocab", type=int, default=30_522)
    parser.add_argument("--doc-draws", type=int, default=170)
    parser.add_argument("--query-draws", type=int, default=35)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    grid = {name: values.split(",") for name, _, values in (pair.partition("=") for pair in args.grid)} or None
    rng = np.random.default_rng(args.seed)
    permutation = rng.permutation(args.vocab)
    documents = zipf_rows(args.docs, args.vocab, args.doc_draws, rng, permutation)
    queries = zipf_rows(args.queries, args.vocab, args.query_draws, rng, permutation)
    tuning = tune(documents, queries, args.backend, grid)
    args.output.mkdir(parents=True, exist_ok=False)
    report = tuning.to_dict() | {"args": vars(args), "avg_doc_nnz": documents.nnz / args.docs}
    (args.output / "tuning.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    plot_frontier(tuning, args.output / "frontier.png")
    for target, point in tuning.chosen().items():
        print(
            target, None if point is None else (point.us_per_query, round(point.recall, 4), point.build | point.search)
        )


if __name__ == "__main__":
    main()
