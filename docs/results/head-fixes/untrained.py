"""The untrained starting function of each head-fixes arm (docs/results/head-fixes/PREDICTIONS.md): the
"untrained vs trained" column of docs/results/head-fixes.md. Not a registered prediction; added after the runs,
as ratio-041/untrained.py was.

Each start is built as its sweep run starts (spladekit.experiments.inflate, the head options, then the rescaling)
and evaluated, untrained, on the sweep's five collections with its evaluation settings. Arms that share a start
share its row: df_flops starts as none (k = 1) does; untie + lr_scale and untie k = 8 at lr 5e-4 start as untie
auto-k (= 8); none at lr 5e-4 as none.

    nice -n 19 .venv/bin/python docs/results/head-fixes/untrained.py configs/head-fixes.yaml \
        docs/results/head-fixes/untrained.json

Resumable: the starts already in the output file are kept, the others evaluated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spladekit import SparseEncoder, apply_rescale
from spladekit.experiments.inflate import inflate
from spladekit.experiments.sweep import evaluate_encoder, load_sweep
from spladekit.model.head_options import HeadOptions
from spladekit.model.rescaling import RescaleRecord

MODEL = "../shared/models/splade-tiny-msmarco"
# start: (head options, k, mode); every start is tinyT-x8 (the transform LayerNorm × 8)
STARTS = {
    "none (k = 1)": (HeadOptions(), 1.0, "tied"),
    "tied k = 2 (auto-k)": (HeadOptions(), 2.0, "tied"),
    "untie k = 8 (auto-k)": (HeadOptions(), 8.0, "untie"),
    "logit_shift 24.73": (HeadOptions(logit_shift=24.73), 1.0, "tied"),
    "position_top_k 12": (HeadOptions(position_top_k=12), 1.0, "tied"),
    "SPARSEUP: shift 15 + top-k 12": (HeadOptions(logit_shift=15.0, position_top_k=12), 1.0, "tied"),
    "tied k = 8": (HeadOptions(), 8.0, "tied"),
}


def main(sweep_file: str, output: str) -> None:
    evaluation = load_sweep(sweep_file).evaluation
    results = json.loads(Path(output).read_text()) if Path(output).is_file() else {}  # resumes: done starts kept
    for name, (head, k, mode) in STARTS.items():
        if name in results:
            continue
        encoder = SparseEncoder.from_pretrained(MODEL, head=head)
        inflate(encoder.model, 8.0, "transform")
        if k != 1.0:
            apply_rescale(encoder, RescaleRecord(k, mode))
        evaluated = evaluate_encoder(encoder, evaluation, cache=False)
        scores = {name: result.metrics["nDCG@10"] for name, result in evaluated.items()}
        results[name] = {**scores, "mean": sum(scores.values()) / len(scores)}
        print(name, json.dumps(results[name]), flush=True)
        Path(output).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
