"""The pre-registered contrasts of docs/results/lr-scale.md, across this sweep and the head-only inflation grid.

Each side is a configuration (a run name without ``__s<seed>``) in one sweep folder; its finished seeds are
averaged per query (spladekit.experiments.report.query_values, stats.seed_mean) and the two sides are compared with
the report's paired randomization test (stats.paired_test) over the judged queries both evaluated.

    python docs/results/lr-scale/contrasts.py > docs/results/lr-scale/contrasts.md
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spladekit.experiments.report import query_values
from spladekit.experiments.stats import paired_test, seed_mean

HERE = Path("docs/results/lr-scale")
GRID = Path("docs/results/head-only-inflation")
CONTRASTS = [  # (prediction, A, B), each side (folder, configuration)
    ("P8", (HERE, "tinyT-x8-lrs__k8__untie"), (GRID, "tiny__k1__none")),
    ("P8b", (HERE, "tinyT-x8-lrs__k8__untie"), (GRID, "tinyT-x8__k8__untie")),
    ("P9", (HERE, "tinyU__k1__none"), (GRID, "tiny__k1__none")),
    ("P8 vs tinyU", (HERE, "tinyT-x8-lrs__k8__untie"), (HERE, "tinyU__k1__none")),
    ("P10", (HERE, "tiny-lrs__k16__tied"), (GRID, "tiny__k16__tied")),
    ("P11", (HERE, "tiny__k4__tied"), (HERE, "tiny-lrs__k4__tied")),
]


def seeds(folder: Path, configuration: str) -> list[Path]:
    """The finished runs of ``configuration`` (their run.json says done)."""
    runs = sorted((folder / "runs").glob(f"{configuration}__s*"))
    return [run for run in runs if '"status": "done"' in (run / "run.json").read_text()]


def main() -> None:
    print("| prediction | A | B | seeds A, B | mean A | mean B | A − B (pooled) | 95 % CI | p |")
    print("|---|---|---|---|---|---|---|---|---|")
    for prediction, (folder_a, a), (folder_b, b) in CONTRASTS:
        runs_a, runs_b = seeds(folder_a, a), seeds(folder_b, b)
        if not runs_a or not runs_b:
            print(f"| {prediction} | {a} | {b} | {len(runs_a)}, {len(runs_b)} | not run | | | | |")
            continue
        values_a = seed_mean(query_values(run) for run in runs_a)
        values_b = seed_mean(query_values(run) for run in runs_b)
        test = paired_test(values_a, values_b, a, b)
        assert test is not None
        print(
            f"| {prediction} | {a} | {b} | {len(runs_a)}, {len(runs_b)} | {np.mean(list(values_a.values())):.4f} "
            f"| {np.mean(list(values_b.values())):.4f} | {test.mean_difference:+.4f} "
            f"| [{test.ci_low:+.4f}, {test.ci_high:+.4f}] | {test.p_value:.4f} |"
        )


if __name__ == "__main__":
    main()
