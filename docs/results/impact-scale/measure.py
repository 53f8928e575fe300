"""How much nDCG@10 / RR@10 / R@1000 integer impacts cost at each scale, per shared collection (issue 46: the
default impact scale of PISA, Anserini and CIFF).

    SPLADEKIT_CACHE=/tmp/bench/cache python docs/results/impact-scale/measure.py \
        --model ../shared/models/splade-tiny-msmarco --data-root ../shared/data \
        --json-out docs/results/impact-scale/drift.json

For every collection: the largest document weight, the largest exact score of a top-1 hit, and the drift of each
measure from exact float32 at each scale (``spladekit.evaluation.fidelity``, target ``impacts``), with the scale
that :func:`spladekit.common.sparse.impact_scale` derives from the document weights.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from spladekit.common.sparse import impact_scale
from spladekit.data.collections import load_collection
from spladekit.evaluation import fidelity as fidelity_module
from spladekit.evaluation.evaluate import encode_corpus
from spladekit.index import ExactSearcher
from spladekit.model.loading import load_model

COLLECTIONS = ("scifact", "trec-dl-2019-subset", "cranfield", "cisi", "vaswani")
SCALES = (50.0, 100.0, 200.0, 300.0, 400.0, 500.0, 750.0, 1000.0, 2000.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data-root", required=True, type=Path)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    encoder = load_model(args.model)
    results = {}
    for name in COLLECTIONS:
        collection = load_collection(args.data_root / name)
        documents = encode_corpus(encoder, collection.corpus, args.max_length, show_progress=False)[0].matrix
        derived = impact_scale(float(documents.data.max()))
        queries = encoder.encode_query(collection.queries.texts, max_length=args.max_length, show_progress=False)
        top_score = float(ExactSearcher.build(documents).search(queries, k=1).scores.max())
        target = dataclasses.replace(fidelity_module.TARGETS["impacts"], sweep=SCALES)  # the derived one is added
        fidelity_module.TARGETS["impacts"] = target
        report = fidelity_module.fidelity(
            encoder, collection, targets=["impacts"], max_length=args.max_length, show_progress=False
        )
        rows = {row["value"]: row["drift"] for row in report.rows}
        results[name] = {
            "documents": documents.shape[0],
            "max_document_weight": float(documents.data.max()),
            "p999_document_weight": float(np.quantile(documents.data, 0.999)),
            "float32": report.reference,
            "max_exact_score": top_score,
            "derived_scale": derived,
            "drift": {f"{value:g}": drift for value, drift in rows.items()},
        }
        print(name, json.dumps(results[name]), flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "see the module docstring", "results": results}, indent=2))


if __name__ == "__main__":
    main()
