"""The untrained starting function of arms A–C of docs/results/ratio-041/PREDICTIONS.md (R3's "from an untrained
< 0.10"; the audit's "untrained.py rows for A–C").

Each configuration is built exactly as its sweep run starts (spladekit.experiments.inflate, then the rescaling)
and evaluated, untrained, on the sweep's five collections with its evaluation settings (as
docs/results/lr-scale/untrained.py, whose tiny tied k = 4 row, 0.058, is the tied twin's).

    nice -n 19 .venv/bin/python docs/results/ratio-041/untrained.py configs/ratio-041.yaml \
        docs/results/ratio-041/untrained.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spladekit import SparseEncoder, apply_rescale, evaluate_data
from spladekit.experiments.inflate import inflate
from spladekit.experiments.sweep import load_sweep
from spladekit.model.rescaling import RescaleRecord

MODEL = "../shared/models/splade-tiny-msmarco"
# name: (inflation factor or None, inflation target, k, mode)
CONFIGURATIONS = {
    "A: tiny, untie k = 4": (None, "", 4.0, "untie"),
    "B: tinyT-x8, tied k = 4": (8.0, "transform", 4.0, "tied"),
    "C: tinyT-x8, untie k = 4": (8.0, "transform", 4.0, "untie"),
}


def main(sweep_file: str, output: str) -> None:
    evaluation = load_sweep(sweep_file).evaluation
    results = {}
    for name, (factor, target, k, mode) in CONFIGURATIONS.items():
        encoder = SparseEncoder.from_pretrained(MODEL)
        if factor is not None:
            inflate(encoder.model, factor, target)
        apply_rescale(encoder, RescaleRecord(k, mode))
        scores = {}
        for data in evaluation.data:
            result = evaluate_data(
                encoder,
                data,
                split=evaluation.split,
                max_length=evaluation.max_length,
                batch_size=evaluation.batch_size,
                show_progress=False,
            )
            scores[result.name] = result.metrics["nDCG@10"]
        results[name] = {**scores, "mean": sum(scores.values()) / len(scores)}
        print(name, json.dumps(results[name]), flush=True)
        Path(output).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
