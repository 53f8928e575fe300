"""Peak memory of the quickstart's stages, one stage per fresh process (``ru_maxrss``: peak resident set,
which counts torch's CPU allocations, unlike tracemalloc).

Stages: ``load`` (imports + backbone), ``diagnose`` (quickstart's diagnosis on the built-in sample),
``train-start`` (load the training triplets and the backbone, resolve ``rescale.k: auto`` on the first 64
training pairs as the training loop does) and ``train-steps`` (then N training steps). Run from the
repository root with ``../shared`` beside it:

    python benchmarks/quickstart_memory.py --steps 3
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
BACKBONE = SHARED / "models" / "splade-tiny-msmarco"
TRIPLETS = SHARED / "data" / "scifact" / "triplets-train.tsv"
STAGES = ("load", "diagnose", "train-start", "train-steps")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_stage(stage: str, steps: int) -> dict:
    import torch

    from spladekit.data.training import load_training_set
    from spladekit.experiments.quickstart import training_overrides
    from spladekit.model.diagnosis import diagnose
    from spladekit.model.encoder import SparseEncoder
    from spladekit.training import load_config
    from spladekit.training.setup import initial_encoder
    from spladekit.training.step import StepSettings, encode_examples, objective

    if stage in ("load", "diagnose"):
        encoder = SparseEncoder.from_pretrained(BACKBONE)
        if stage == "diagnose":
            diagnose(encoder)
        return {"stage": stage, "peak_mb": round(peak_mb())}
    settings = load_config(None, training_overrides(str(BACKBONE), TRIPLETS, max(steps, 1), False))
    training_set = load_training_set(settings.data)
    encoder, _ = initial_encoder(settings, training_set)
    step_settings = StepSettings.of(settings)
    if stage == "train-steps":
        encoder.train(True)
        for step in range(1, steps + 1):
            q, p, n, _ = encode_examples(encoder, training_set.batch(step, 8, 1, 0), step_settings, torch.device("cpu"))
            objective(q, p, n, None, (1e-4, 1e-4), step_settings)[0].backward()
            encoder.zero_grad()
    return {"stage": stage, "peak_mb": round(peak_mb())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.stage:
        print(json.dumps(run_stage(args.stage, args.steps)))
        return
    for stage in STAGES:
        child = subprocess.run(
            [sys.executable, __file__, "--stage", stage, "--steps", str(args.steps)],
            capture_output=True,
            text=True,
            check=True,
        )
        print(child.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
