"""Effectiveness parity of ``optimization.length_groups`` and ``optimization.packing`` (issue 27): the same training
with one padded batch per side, with the batch cut into length groups, and with its texts packed into rows, then
the models evaluated on one collection.

Trains ``--config`` (with ``--set`` overrides) once per value of ``--groups`` (a number of length groups, or
``packed``), each from the same seed, evaluates
every model on ``--data`` (nothing cached), and reports nDCG@10 (and the collection's other measures), a paired
randomization test over queries against the first value, the training wall time, and how far the trained
weights and the vectors of the first ``--sample`` documents are from the first value's. With ``--dropout both``
each value is trained with dropout off (the backbone's forward is then deterministic: only float rounding
separates the runs) and on (the default: the masks are another draw, so the runs differ as two seeds do).

    python benchmarks/length_groups_parity.py --config configs/train-example.yaml \
        --set backbone.id=../shared/models/splade-tiny-msmarco \
        --set data.path=../shared/data/scifact/triplets-train.tsv --set optimization.steps=200 \
        --data ../shared/data/scifact --groups 1,4,packed --dropout both --work /tmp/lgp --output parity.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def weight_distance(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """The largest |a − b| over every parameter, relative to the largest |a| of that parameter."""
    worst = 0.0
    for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        if x.is_floating_point():
            worst = max(worst, float((x - y).abs().max() / x.abs().max().clamp_min(1e-12)))
    return worst


def layout(value: str) -> tuple[str, list[str]]:
    """A ``--groups`` value's run name and config overrides: ``packed``, or a number of length groups."""
    if value == "packed":
        return "packed", ["optimization.packing=true"]
    if not value.isdigit():
        raise SystemExit(f"length_groups_parity.py: --groups: expected numbers or 'packed', got {value!r}")
    return f"groups{value}", [f"optimization.length_groups={value}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, type=Path, help="a `spladekit train` config")
    parser.add_argument("--set", action="append", default=[], help="config override KEY=VALUE (repeatable)")
    parser.add_argument("--data", required=True, help="evaluation collection (folder, ir_datasets or HF id)")
    parser.add_argument("--split", default="test")
    parser.add_argument(
        "--groups", default="1,4,packed", help="length_groups values or 'packed'; the first is the reference"
    )
    parser.add_argument("--dropout", choices=("on", "off", "both"), default="both")
    parser.add_argument("--max-length", type=int, default=256, help="evaluation document token limit")
    parser.add_argument("--sample", type=int, default=256, help="documents whose vectors are compared")
    parser.add_argument("--work", required=True, type=Path, help="folder for the training runs (created)")
    parser.add_argument("--output", type=Path, help="also write the results as JSON")
    args = parser.parse_args()

    from spladekit import SparseEncoder
    from spladekit.common.errors import SpladekitError
    from spladekit.data.collections import load_collection
    from spladekit.evaluation.evaluate import evaluate
    from spladekit.experiments.stats import paired_test
    from spladekit.training import load_config, train

    layouts = dict(layout(value) for value in args.groups.split(","))
    dropouts = {"on": [True], "off": [False], "both": [False, True]}[args.dropout]
    try:  # every bad argument is one line naming it, before any training
        configs = {
            (dropout, n): load_config(args.config, [*args.set, *overrides, f"backbone.dropout={str(dropout).lower()}"])
            for dropout in dropouts
            for n, overrides in layouts.items()
        }
        collection = load_collection(args.data, split=args.split)
        if args.work.exists():
            raise SpladekitError(f"--work {args.work} exists; give a new folder")
    except SpladekitError as error:
        raise SystemExit(f"length_groups_parity.py: {error}") from None
    sample = list(collection.corpus.texts[: args.sample])
    report: dict = {"command": " ".join(sys.argv), "torch": torch.__version__, "runs": {}}
    for dropout in dropouts:
        reference = None
        for n in layouts:
            name = f"dropout-{'on' if dropout else 'off'}__{n}"
            started = time.perf_counter()
            run = train(configs[dropout, n], args.work / name)
            seconds = time.perf_counter() - started
            model = SparseEncoder.from_pretrained(run.model).eval()
            result = evaluate(model, collection, max_length=args.max_length, cache=False, show_progress=False)
            vectors = model.encode(sample, max_length=args.max_length, show_progress=False).toarray()
            row = {
                "train_seconds": round(seconds, 1),
                "metrics": result.metrics,
                "efficiency": result.efficiency,
                "per_query": result.per_query,
            }
            if reference is None:
                reference = (name, model, result, vectors)
            else:
                first, first_model, first_result, first_vectors = reference
                test = paired_test(result.per_query["nDCG@10"], first_result.per_query["nDCG@10"], name, first)
                row["against"] = first
                row["paired_test_ndcg10"] = test.to_dict() if test else None
                row["max_relative_weight_difference"] = weight_distance(first_model, model)
                row["max_abs_vector_difference"] = float(np.abs(vectors - first_vectors).max())
                both = (vectors > 0) | (first_vectors > 0)
                row["nonzero_jaccard"] = float(((vectors > 0) & (first_vectors > 0)).sum() / max(both.sum(), 1))
            report["runs"][name] = row
            print(f"{name}: {json.dumps(result.metrics)}; trained in {seconds:.0f} s", file=sys.stderr)
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    print("| run | nDCG@10 | RR@10 | R@1000 | FLOPS | train s | Δ nDCG@10 vs first (p) | weights | vectors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in report["runs"].items():
        metrics, test = row["metrics"], row.get("paired_test_ndcg10")
        delta = f"{test['mean_difference']:+.4f} (p = {test['p_value']:.2f})" if test else "—"
        weights = f"{row['max_relative_weight_difference']:.1e}" if "against" in row else "—"
        vectors = f"{row['max_abs_vector_difference']:.1e}" if "against" in row else "—"
        print(
            f"| {name} | {metrics['nDCG@10']:.4f} | {metrics['RR@10']:.4f} | {metrics['R@1000']:.4f} | "
            f"{row['efficiency']['flops']:.2f} | {row['train_seconds']} | {delta} | {weights} | {vectors} |"
        )


if __name__ == "__main__":
    main()
