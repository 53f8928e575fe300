"""BM25 mining throughput as the corpus grows, for an estimate of MS MARCO-scale mining (an estimate, not a run).

Corpus: SciFact abstracts cut into passages of ``--words`` words (MS MARCO passages average ~56 words),
repeated until there are N passages, for each N of ``--sizes``; queries: the SciFact train queries, repeated
to ``--queries``. Each size runs in a fresh subprocess (peak RSS = ``ru_maxrss`` of that process) and times
``spladekit.evaluation.bm25.bm25_ranker`` (tokenize + index) and the ranking of the queries (depth ``--depth``), in
query batches of ``mining.QUERY_BATCH`` as ``mine`` does. Per-query ranking cost grows with the corpus
(bm25s scores every document of the postings it touches and selects the top k over all documents), so
the estimate fits ``seconds per query = a + b · N`` and ``index seconds = c · N`` on the measured sizes and
evaluates them at N = 8.8M passages, 500k queries.

    python benchmarks/mining_bench.py --output mining-bench.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


def passages(count: int, words: int) -> list[str]:
    from spladekit.data.jsonl import read_corpus

    pieces = []
    for text in read_corpus(SCIFACT / "corpus.jsonl").texts:
        tokens = text.split()
        pieces += [" ".join(tokens[start : start + words]) for start in range(0, len(tokens), words)]
    return [pieces[i % len(pieces)] for i in range(count)]


def measure(size: int, queries: int, words: int, depth: int) -> dict:
    from spladekit.evaluation.bm25 import bm25_ranker
    from spladekit.training.mining import QUERY_BATCH, load_training_collection, training_queries

    collection = load_training_collection(SCIFACT, "train")
    texts = [query.text for query in training_queries(collection, "train", False)[0]]
    texts = [texts[i % len(texts)] for i in range(queries)]
    corpus = passages(size, words)
    started = time.perf_counter()
    rank = bm25_ranker(corpus, 0.9, 0.4, show_progress=False)
    indexed = time.perf_counter()
    for start in range(0, len(texts), QUERY_BATCH):
        rank(texts[start : start + QUERY_BATCH], depth)
    ranked = time.perf_counter()
    return {
        "passages": size,
        "queries": queries,
        "index_seconds": indexed - started,
        "seconds_per_query": (ranked - indexed) / queries,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="25000,100000,200000")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--words", type=int, default=56)
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.queries, args.words, args.depth)))
        return
    rows = []
    for size in map(int, args.sizes.split(",")):
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                str(size),
                "--queries",
                str(args.queries),
                "--words",
                str(args.words),
                "--depth",
                str(args.depth),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    sizes = np.array([row["passages"] for row in rows], dtype=float)
    per_query = np.polyfit(sizes, [row["seconds_per_query"] for row in rows], 1)  # b, a
    per_passage = float(np.sum([row["index_seconds"] for row in rows]) / sizes.sum())
    rss = np.polyfit(sizes, [row["peak_rss_mb"] for row in rows], 1)
    msmarco, train_queries = 8_841_823, 502_939
    estimate = {
        "index_hours": per_passage * msmarco / 3600,
        "mining_hours": float(np.polyval(per_query, msmarco)) * train_queries / 3600,
        "peak_rss_gb": float(np.polyval(rss, msmarco)) / 1024,
        "note": "linear extrapolation from the measured sizes on this machine; an estimate, not a run",
    }
    result = {"rows": rows, "msmarco_estimate": estimate}
    print(json.dumps(estimate, indent=2))
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
