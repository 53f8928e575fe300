"""The registered contrasts of docs/results/head-fixes/PREDICTIONS.md, with the statistics of
``spladekit.experiments.stats`` (equal-weight five-collection difference, stratified sign-flip p, seeds × queries
95 % bootstrap interval, Holm over this page's family, TOST only at the margins registered on the page).
Written with the predictions, before any run; reads committed per-query outputs only.

    nice -n 19 .venv/bin/python docs/results/head-fixes/verdicts.py > docs/results/head-fixes/verdicts.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from restats import HEADER, row, runs  # noqa: E402  (docs/results/restats.py)

from spladekit.experiments.report import query_values  # noqa: E402
from spladekit.experiments.stats import contrast, with_holm  # noqa: E402

HERE = Path("docs/results/head-fixes")
GRID = Path("docs/results/head-only-inflation")  # code b039121

NONE, TIED, UNTIE = "tinyT-x8__k1__none", "tinyT-x8__kauto__tied", "tinyT-x8__kauto__untie"
LRS, SHIFT, TOPK = "tinyT-x8-lrs__kauto__untie", "tinyT-x8-shift__k1__none", "tinyT-x8-topk12__k1__none"
SPARSEUP, DF = "tinyT-x8-sparseup__k1__none", "tinyT-x8-dfflops__k1__none"
HI = "tinyT-x8-lr5e-4"

# (claim, A, B, TOST margin registered on the page or None); a bare name is a run of this folder
FAMILY = [
    ("H0 anchor", NONE, (GRID, NONE), 0.01),
    ("H1", TIED, NONE, None),
    ("H2", UNTIE, NONE, None),
    ("H3", LRS, UNTIE, None),
    ("H4a", SHIFT, NONE, None),
    ("H4b", LRS, SHIFT, None),
    ("H5", TOPK, NONE, 0.02),
    ("H6a", SPARSEUP, NONE, None),
    ("H6b", LRS, SPARSEUP, None),
    ("H7", DF, NONE, 0.02),
    ("H3b lrs vs tied", LRS, TIED, None),
    ("L1", f"{HI}__k8__tied", f"{HI}__k1__none", None),
    ("L2", f"{HI}__k8__untie", f"{HI}__k1__none", None),
]


def arm(spec):
    return spec if isinstance(spec, tuple) else (HERE, spec)


def main() -> None:
    tests, missing = [], []
    for claim, a, b, margin in FAMILY:
        (folder_a, name_a), (folder_b, name_b) = arm(a), arm(b)
        runs_a, runs_b = runs(folder_a, name_a), runs(folder_b, name_b)
        if not runs_a or not runs_b:
            missing.append(claim)
            continue
        test = contrast(
            [query_values(r) for r in runs_a], [query_values(r) for r in runs_b], name_a, name_b, margin=margin
        )
        tests.append((claim, test))
    adjusted = with_holm([test for _, test in tests])  # one family: every contrast this page reports
    print(f"# head-fixes: registered contrasts\n\n{HEADER}")
    for (claim, _), test in zip(tests, adjusted):
        print(row("head-fixes", claim, test))
    if missing:
        print(f"\nNot computed (runs missing): {', '.join(missing)}")
    (HERE / "verdicts.json").write_text(
        json.dumps([{"claim": c} | t.to_dict() for (c, _), t in zip(tests, adjusted)], indent=1, default=float) + "\n"
    )


if __name__ == "__main__":
    main()
