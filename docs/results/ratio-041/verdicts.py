"""The registered contrasts of docs/results/ratio-041/PREDICTIONS.md, with the statistics of
``spladekit.experiments.stats`` (equal-weight five-collection difference, stratified sign-flip p, seeds × queries
95 % bootstrap interval, Holm over this page's family, TOST only at the margins registered on the page).
Written with the predictions, before any run; reads committed per-query outputs only.

    nice -n 19 .venv/bin/python docs/results/ratio-041/verdicts.py > docs/results/ratio-041/verdicts.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from restats import HEADER, row, runs  # noqa: E402  (docs/results/restats.py)

from spladekit.experiments.report import query_values  # noqa: E402
from spladekit.experiments.stats import contrast, with_holm  # noqa: E402

HERE = Path("docs/results/ratio-041")
GRID = Path("docs/results/head-only-inflation")  # code b039121
LRS = Path("docs/results/lr-scale")  # code 3f31ff6 / 8787088

# (claim, (folder, configuration) A, (folder, configuration) B, TOST margin registered on the page or None)
FAMILY = [
    ("R1", (HERE, "tiny__k4__untie"), (LRS, "tiny__k4__tied"), 0.01),
    ("R2", (HERE, "tinyT-x8__k4__untie"), (HERE, "tinyT-x8__k4__tied"), 0.01),
    ("R3", (HERE, "tinyT-x8__k4__tied"), (GRID, "tinyT-x8__k2__tied"), None),
    ("R4a", (HERE, "tinyT-x8__k4__untie"), (GRID, "tinyT-x8__k2__untie"), None),
    ("R4b", (HERE, "tinyT-x8__k4__untie"), (GRID, "tinyT-x8__k8__untie"), None),
    ("R5", (HERE, "tinyT-x8-ref__k8__untie@s13"), (GRID, "tinyT-x8__k8__untie@s13"), 0.005),
]
# only if R5 fails (the within-code tied twin, arm E): R1 is then read on this row instead
CONDITIONAL = [("R1 within code", (HERE, "tiny__k4__untie"), (HERE, "tiny__k4__tied"), 0.01)]


def main() -> None:
    tests, missing = [], []
    for claim, (folder_a, a), (folder_b, b), margin in FAMILY + CONDITIONAL:
        runs_a, runs_b = runs(folder_a, a), runs(folder_b, b)
        if not runs_a or not runs_b:
            missing.append(claim)
            continue
        test = contrast([query_values(r) for r in runs_a], [query_values(r) for r in runs_b], a, b, margin=margin)
        tests.append((claim, test))
    adjusted = with_holm([test for _, test in tests])  # one family: every contrast this page reports
    print(f"# ratio-041: registered contrasts\n\n{HEADER}")
    for (claim, _), test in zip(tests, adjusted):
        print(row("ratio-041", claim, test))
    if missing:
        print(f"\nNot computed (runs missing): {', '.join(missing)}")
    (HERE / "verdicts.json").write_text(
        json.dumps([{"claim": c} | t.to_dict() for (c, _), t in zip(tests, adjusted)], indent=1, default=float) + "\n"
    )


if __name__ == "__main__":
    main()
