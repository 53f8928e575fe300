"""What the derived impact scale costs at build time: PISA and Anserini indexes of one collection at scale 100 and
at the derived scale, built alternately in one process (best of ``--repeats``), with the Anserini search time.

    SPLADEKIT_CACHE=/tmp/bench/cache python docs/results/impact-scale/build_time.py \
        --model ../shared/models/splade-tiny-msmarco --data ../shared/data/scifact
"""

from __future__ import annotations

import argparse
import json
import time

from spladekit.common.sparse import impact_scale
from spladekit.data.collections import load_collection
from spladekit.evaluation.evaluate import encode_corpus
from spladekit.index import AnseriniSearcher, PisaSearcher
from spladekit.model.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    encoder = load_model(args.model)
    collection = load_collection(args.data)
    documents = encode_corpus(encoder, collection.corpus, args.max_length, show_progress=False)[0].matrix
    queries = encoder.encode_query(collection.queries.texts, max_length=args.max_length, show_progress=False)
    derived = impact_scale(float(documents.data.max()))
    best: dict[str, float] = {}
    for _ in range(args.repeats):
        for engine in (PisaSearcher, AnseriniSearcher):
            for scale in (100.0, derived):
                started = time.perf_counter()
                with engine.build(documents, scale=scale) as searcher:
                    built = time.perf_counter()
                    searcher.search(queries, k=1000)
                    searched = time.perf_counter()
                for part, seconds in (("build", built - started), ("search", searched - built)):
                    key = f"{engine.name} {part} scale={scale:g}"
                    best[key] = min(best.get(key, float("inf")), seconds)
    print(json.dumps({"documents": documents.shape[0], "queries": queries.shape[0], "seconds": best}, indent=2))


if __name__ == "__main__":
    main()
