"""The fix × platform table of docs/results/head-fixes.md, from the committed outputs only (nothing is trained or
evaluated): per arm, the five-collection nDCG@10 with its seeds × queries 95 % interval, FLOPS, the trained and the
untrained vectors' shape, the training collapse detector, and the exact engine's latency (s13).

    nice -n 19 .venv/bin/python docs/results/head-fixes/table.py > docs/results/head-fixes/table.md

Sources: each run's ``evaluation.json`` (nDCG@10 per query, FLOPS, nnz), ``initial_head.json`` (before training),
``metrics.jsonl`` (the collapse detector), ``trained/<run>.diagnose.json`` (``spladekit diagnose`` of the trained
model on the 64 registered pairs) and ``latency/<run>/tuning.json`` (``spladekit tune-index``), as registered in
PREDICTIONS.md. The interval is :func:`spladekit.experiments.stats.seed_query_bootstrap` of the arm against a
constant 0, i.e. of the arm's own equal-weight mean.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from restats import runs  # noqa: E402  (docs/results/restats.py)

from spladekit.experiments.report import query_values  # noqa: E402
from spladekit.experiments.stats import equal_weight_mean, seed_mean, seed_query_bootstrap  # noqa: E402

HERE = Path("docs/results/head-fixes")
ARMS = [  # (arm, configuration, platform, its untrained start in untrained.json)
    ("none (k = 1)", "tinyT-x8__k1__none", 1, "none (k = 1)"),
    ("tied, auto-k (= 2)", "tinyT-x8__kauto__tied", 1, "tied k = 2 (auto-k)"),
    ("untie, auto-k (= 8)", "tinyT-x8__kauto__untie", 1, "untie k = 8 (auto-k)"),
    ("untie + lr_scale", "tinyT-x8-lrs__kauto__untie", 1, "untie k = 8 (auto-k)"),
    ("logit_shift 24.73", "tinyT-x8-shift__k1__none", 1, "logit_shift 24.73"),
    ("position_top_k 12", "tinyT-x8-topk12__k1__none", 1, "position_top_k 12"),
    ("SPARSEUP: shift 15 + top-k 12", "tinyT-x8-sparseup__k1__none", 1, "SPARSEUP: shift 15 + top-k 12"),
    ("df_flops", "tinyT-x8-dfflops__k1__none", 1, "none (k = 1)"),
    ("none (k = 1)", "tinyT-x8-lr5e-4__k1__none", 2, "none (k = 1)"),
    ("tied k = 8", "tinyT-x8-lr5e-4__k8__tied", 2, "tied k = 8"),
    ("untie k = 8", "tinyT-x8-lr5e-4__k8__untie", 2, "untie k = 8 (auto-k)"),
]


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def collection_mean(run: Path, key: str) -> float:
    """The equal-weight mean over the evaluated collections of one number of ``evaluation.json``."""
    return statistics.fmean(member[key] for member in read(run / "evaluation.json").values())


def shape(report: dict) -> str:
    return f"{report['avg_q_nnz']:.1f} / {report['avg_d_nnz']:.1f}, cos {report['mean_cosine']:.3f}"


def collapses(run: Path) -> list[str]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return sorted({record["collapse"] for record in records if record.get("collapse")})


def latency(run: Path) -> str:
    path = HERE / "latency" / run.name / "tuning.json"
    if not path.is_file():
        return "—"
    tuning = read(path)
    point = tuning["points"][0]  # the one registered Seismic point (secondary)
    return f"{tuning['exact_us_per_query']:.1f} (Seismic {point['us_per_query']:.1f} at recall@10 {point['recall']:.3f})"


def untrained(start: str) -> str:
    path = HERE / "untrained.json"
    starts = read(path) if path.is_file() else {}
    return f"{starts[start]['mean']:.4f}" if start in starts else "—"


def arm_row(label: str, configuration: str, platform: int, start: str) -> str | None:
    found = runs(HERE, configuration)
    if not found:
        return None
    per_seed = [query_values(run) for run in found]
    mean = equal_weight_mean(seed_mean(per_seed))
    zero = [{unit: 0.0 for unit in per_seed[0]}]
    low, high = seed_query_bootstrap(per_seed, zero)
    seeds = ", ".join(f"{equal_weight_mean(values):.4f}" for values in per_seed)
    flops = statistics.fmean(collection_mean(run, "flops") for run in found)
    nnz = (
        f"{statistics.fmean(collection_mean(run, 'avg_q_nnz') for run in found):.1f} / "
        f"{statistics.fmean(collection_mean(run, 'avg_d_nnz') for run in found):.1f}"
    )
    initial = read(found[0] / "initial_head.json")
    trained = [HERE / "trained" / f"{run.name}.diagnose.json" for run in found]
    trained_shape = "; ".join(shape(read(path)) for path in trained if path.is_file()) or "—"
    flagged = [collapses(run) for run in found]
    detector = f"{sum(bool(kinds) for kinds in flagged)}/{len(found)}" + (
        f" ({', '.join(sorted({kind for kinds in flagged for kind in kinds}))})" if any(flagged) else ""
    )
    s13 = next((run for run in found if run.name.endswith("__s13")), None)
    return (
        f"| {platform} | {label} | {len(found)} | {untrained(start)} | **{mean:.4f}** [{low:.4f}, {high:.4f}] | {seeds} "
        f"| {flops:.3f} | {nnz} "
        f"| {initial['median_pair_score']:.2f}: {shape(initial)} | {trained_shape} | {detector} "
        f"| {latency(s13) if s13 is not None and platform == 1 else '—'} |"
    )


def main() -> None:
    print("# head-fixes: one row per arm\n")
    print(
        "Produced by `nice -n 19 .venv/bin/python docs/results/head-fixes/table.py > docs/results/head-fixes/table.md` "
        "from the committed outputs. nDCG@10 trained: the five-collection equal-weight mean over seeds, with its seeds × "
        "queries 95 % bootstrap interval; per seed: each seed's mean; untrained: the arm's starting function "
        "(`untrained.py`, not registered). FLOPS and nnz: the trained vectors on the five "
        "collections (equal-weight mean, seeds averaged). Shapes are `q nnz / d nnz, mean cosine of documents` on "
        "the 64 registered SciFact training pairs: before training (with its median pair score) and after "
        "(`spladekit diagnose` of each seed's trained model). Detector: seeds whose training collapse detector "
        "fired (the kinds it named). Latency: the exact engine, one thread, SciFact's 1,109 queries on its 5,183 "
        "documents, best of 5 passes, seed 13 (platform 1 only, as registered); in brackets the one registered Seismic "
        "point (query_cut 20, heap_factor 1.0; secondary, not predicted).\n"
    )
    print(
        "| platform | arm | seeds | nDCG@10 untrained | nDCG@10 trained [95 % CI] | per seed | FLOPS | trained q / d "
        "nnz | before training: median pair score: shape | after training: shape per seed | detector | exact µs/query |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    missing = []
    for label, configuration, platform, start in ARMS:
        line = arm_row(label, configuration, platform, start)
        if line is None:
            missing.append(configuration)
        else:
            print(line)
    if missing:
        print(f"\nNot run yet: {', '.join(missing)}")


if __name__ == "__main__":
    main()
