"""Turn a sweep folder into the paper-style table (CSV + markdown) and plots (PNG).

Rows are backbone × k × mode. Columns follow the seed paper's tables — MS MARCO dev MRR@10, DL19
nDCG@10, BEIR-13 and NanoBEIR mean nDCG@10 — when those suites were evaluated, then one nDCG@10 column
per other evaluated collection and their mean (``mean nDCG@10``), retrieval FLOPS and average nnz
(means over the evaluated collections), and the final training loss. The *primary* effectiveness used
to pick each backbone's best k is the first present of NanoBEIR, BEIR-13, the mean over collections.

Baseline rows (``baselines/``: each untouched backbone, BM25) follow the runs. A sweep with several
``seeds`` has one row per run and one *configuration* per backbone × k × mode × recipe overrides: its
mean ± std over seeds picks the best k. Each claimed contrast is compared (:mod:`spladekit.experiments.stats`):
per backbone, its best configuration against no rescaling (k = 1), against the untouched backbone and against
BM25, and tied against untie at every k that ran both. The primary statistic is the equal-weight difference
of the mean over collections (what the tables print), with a sign-flip test stratified by collection, a
seed × query bootstrap interval, Holm's correction across the report's tests and, where ``--contrast
A:B:MARGIN`` states a margin, a TOST of equivalence; the query-pooled test is a secondary column.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import expect, read_json
from spladekit.experiments.stats import Contrast, Unit, contrast, with_holm
from spladekit.experiments.sweep_records import (
    BASELINES_DIR,
    PLAN_FILE,
    RUN_FILE,
    read_evaluation,
    read_run_record,
)
from spladekit.training.monitors import read_metrics

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SUITE_COLUMNS = (
    ("msmarco-dev", "RR@10", "MS MARCO dev MRR@10"),
    ("dl19", "nDCG@10", "DL19 nDCG@10"),
    ("beir13", "nDCG@10", "BEIR-13 nDCG@10"),
    ("nanobeir", "nDCG@10", "NanoBEIR nDCG@10"),
)
SUITE_NAMES = tuple(suite for suite, _, _ in SUITE_COLUMNS)
PRIMARY = ("NanoBEIR nDCG@10", "BEIR-13 nDCG@10", "mean nDCG@10")
LOSS_NUMBERS = ("step", "loss")  # what the report reads from each metrics.jsonl record


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def run_folders(directory: Path) -> list[Path]:
    """The trained runs' folders, then the baselines' (every one holding a ``run.json``)."""
    return [
        path.parent for folder in ("runs", BASELINES_DIR) for path in sorted((directory / folder).glob(f"*/{RUN_FILE}"))
    ]


def collect(directory: str | Path) -> list[dict]:
    """One row per run folder with a ``run.json`` (unfinished runs are listed with their status), the
    baselines last.

    Every file is read strictly (``read_run_record``, ``EvaluationResult.from_dict``, ``read_metrics``):
    a damaged one is an error naming it, before anything is written."""
    directory = Path(directory)
    if not run_folders(directory):
        if (directory / PLAN_FILE).is_file():  # a sweep whose workers have not finished starting anything
            raise SpladekitError(f"{directory}: no run or baseline of {PLAN_FILE} has started yet: nothing to report")
        raise SpladekitError(f"{directory}: no runs/*/{RUN_FILE}: not a sweep folder (see `spladekit sweep`)")
    rows = []
    for run_dir in run_folders(directory):
        record = read_run_record(run_dir / RUN_FILE)
        evaluation = read_evaluation(run_dir)
        metrics = read_metrics(run_dir, numbers=LOSS_NUMBERS)
        row = {
            key: record.get(key)
            for key in (
                "run",
                "baseline",
                "backbone",
                "backbone_id",
                "k",
                "mode",
                "seed",
                "inflate",
                "status",
                "initial_head_norm",
                "auto_k",
            )
        }
        row["configuration"] = configuration_name(row)
        row["set"] = " ".join(record["set"]) if record.get("set") else None  # the backbone's recipe overrides
        for suite, measure, column in SUITE_COLUMNS:
            row[column] = evaluation[suite].metrics.get(measure) if suite in evaluation else None
        collections = {name: result for name, result in evaluation.items() if name not in SUITE_NAMES}
        for name, result in collections.items():
            row[f"{name} nDCG@10"] = result.metrics.get("nDCG@10")
        row["mean nDCG@10"] = _mean([result.metrics.get("nDCG@10") for result in collections.values()])
        row["FLOPS"] = _mean([result.efficiency.get("flops") for result in evaluation.values()])
        row["avg q nnz"] = _mean([result.efficiency.get("avg_q_nnz") for result in evaluation.values()])
        row["avg d nnz"] = _mean([result.efficiency.get("avg_d_nnz") for result in evaluation.values()])
        row["final loss"] = metrics[-1]["loss"] if metrics else None
        row["loss std (last half)"] = _loss_roughness(metrics)
        rows.append(row)
    return rows


def configuration_name(row: dict) -> str:
    """A run's name without its seed: the runs of one configuration share it."""
    name = str(row["run"])
    return name.rsplit("__s", 1)[0] if row.get("seed") is not None and name.endswith(f"__s{row['seed']}") else name


def query_values(run_dir: Path) -> dict[Unit, float]:
    """One value per judged query of every evaluated collection (a suite's members one by one): nDCG@10
    where the collection measures it, else its first measure (RR@10 for MS MARCO dev)."""
    values: dict[Unit, float] = {}
    for name, result in read_evaluation(run_dir).items():
        for collection, member in (result.members or {name: result}).items():
            measure = "nDCG@10" if "nDCG@10" in member.per_query else next(iter(member.per_query), None)
            values |= {(collection, query): value for query, value in member.per_query.get(measure or "", {}).items()}
    return values


def configurations(rows: list[dict]) -> list[dict]:
    """One row per configuration (runs sharing everything but the seed): the mean of every number over its
    finished seeds, ``seeds`` (how many) and ``<primary> std``."""
    metric = primary_metric(rows)
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["configuration"], []).append(row)
    result = []
    for name, members in grouped.items():
        finished = [row for row in members if metric is not None and row.get(metric) is not None] or members
        merged = dict(finished[0]) | {"run": name, "seed": None, "seeds": len(finished)}
        for key, value in finished[0].items():
            if isinstance(value, float) and key not in ("k", "inflate", "auto_k", "initial_head_norm"):
                merged[key] = _mean(row.get(key) for row in finished)
        if metric is not None:
            scores = [row[metric] for row in finished if row.get(metric) is not None]
            merged[f"{metric} std"] = float(np.std(scores, ddof=1)) if len(scores) > 1 else None
        result.append(merged)
    return result


def parse_contrast(text: str) -> tuple[str, str, float | None]:
    """``"A:B"`` or ``"A:B:MARGIN"`` (two configuration or baseline names; an equivalence margin stated before the
    runs, e.g. 0.01) → ``(A, B, margin or None)``."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise InputError(
            f"--contrast {text!r}: expected A:B or A:B:MARGIN, two configuration names (a run's name without "
            "its __s<seed>, or a baseline's name) and optionally an equivalence margin"
        )
    a, b = parts[0], parts[1]
    if a == b:
        raise InputError(f"--contrast {text!r}: a configuration against itself tests nothing")
    margin = None
    if len(parts) == 3:
        try:
            margin = float(parts[2])
        except ValueError:
            margin = math.nan
        if not (math.isfinite(margin) and margin > 0):
            raise InputError(f"--contrast {text!r}: the equivalence margin {parts[2]!r} is not a positive number")
    return a, b, margin


def paired_tests(
    directory: Path,
    rows: list[dict],
    summary: dict,
    contrasts: Iterable[tuple[str, str] | tuple[str, str, float | None]] = (),
) -> list[Contrast]:
    """The report's claims, compared (:func:`spladekit.experiments.stats.contrast`, each configuration's seeds
    kept apart): per backbone its best configuration against k = 1, the untouched backbone and BM25; tied against
    untie at each k that ran both; then every ``contrasts`` pair asked for (e.g. an experiment's pre-registered
    predictions, with its stated equivalence margin), in order. Holm's correction runs over all of them."""
    runs_of: dict[str, list[Path]] = {}
    for row in rows:
        if row.get("status") == "done":
            folder = BASELINES_DIR if row.get("baseline") else "runs"
            runs_of.setdefault(row["configuration"], []).append(directory / folder / row["run"])
    values = {name: [query_values(path) for path in paths] for name, paths in runs_of.items()}
    configs = [row for row in configurations(rows) if not row.get("baseline")]
    pairs: list[tuple[str, str]] = []
    for backbone, item in summary.items():
        best = item["best_run"]
        pairs += [(best, row["run"]) for row in configs if row["backbone"] == backbone and row["mode"] == "none"]
        pairs += [(best, name) for name in (f"{backbone}__untouched", "bm25")]
    by_setting: dict[tuple, dict[str, str]] = {}
    for row in configs:
        by_setting.setdefault((row["backbone"], row["k"], row.get("set")), {})[row["mode"]] = row["run"]
    pairs += [(modes["tied"], modes["untie"]) for modes in by_setting.values() if {"tied", "untie"} <= modes.keys()]
    margins: dict[tuple[str, str], float | None] = {}
    for item in contrasts:
        margins[(item[0], item[1])] = item[2] if len(item) > 2 else None
    asked = list(margins)
    pairs = [pair for pair in pairs if pair[::-1] not in asked] + asked  # an asked pair keeps the order it was asked in
    tests = []
    for a, b in dict.fromkeys(pairs):
        if a != b and a in values and b in values:
            test = contrast(values[a], values[b], a, b, margin=margins.get((a, b)))
            if test is not None:
                tests.append(test)
    return with_holm(tests)


def _loss_roughness(metrics: list[dict]) -> float | None:
    """Standard deviation of the logged loss over the second half of training (smoothness)."""
    losses = [m["loss"] for m in metrics[len(metrics) // 2 :]]
    if len(losses) < 2:
        return None
    mean = sum(losses) / len(losses)
    return math.sqrt(sum((x - mean) ** 2 for x in losses) / (len(losses) - 1))


def _columns(rows: list[dict]) -> list[str]:
    columns = []
    seeded = any(row["configuration"] != row["run"] for row in rows)  # else the column repeats `run`
    for row in rows:
        for key, value in row.items():
            if (
                key not in columns
                and (value is not None or key in ("run", "backbone", "k", "mode"))
                and (key != "configuration" or seeded)
            ):
                columns.append(key)
    return columns


def primary_metric(rows: list[dict]) -> str | None:
    return next((column for column in PRIMARY if any(row.get(column) is not None for row in rows)), None)


def best_k(rows: list[dict]) -> dict[str, dict]:
    """Per backbone: the finished run with the highest primary metric, the ranking of k, and auto-k."""
    metric = primary_metric(rows)
    summary = {}
    configs = [row for row in configurations(rows) if not row.get("baseline")]
    for backbone in dict.fromkeys(row["backbone"] for row in configs):
        runs = [row for row in configs if row["backbone"] == backbone and row.get(metric) is not None]
        if not runs:
            continue
        ranked = sorted(runs, key=lambda row: -row[metric])
        ks = list(dict.fromkeys(row["k"] for row in ranked))
        auto = ranked[0].get("auto_k")
        summary[backbone] = {
            "best_run": ranked[0]["run"],
            "best_k": ranked[0]["k"],
            "best_mode": ranked[0]["mode"],
            metric: ranked[0][metric],
            "k_ranking": ks,
            "auto_k": auto,
            # None when auto-k's value was not part of the runs (nothing to compare)
            "auto_k_in_best_two": (float(auto) in [float(k) for k in ks[:2] if k != "auto"])
            if auto is not None and float(auto) in [float(k) for k in ks if k != "auto"]
            else None,
            "initial_head_norm": ranked[0].get("initial_head_norm"),
        }
    return summary


def _format(value: object, column: str = "") -> str:
    if value is None:
        return ""
    if column in ("k", "inflate", "auto_k", "best_k") and isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def markdown(
    rows: list[dict],
    summary: dict,
    command: str | None,
    tests: list[Contrast] | None = None,
    missing: Sequence[dict] = (),
    planned: int = 0,
) -> str:
    columns = _columns(rows)
    out = io.StringIO()
    out.write("# Sweep results\n\n")
    if command:
        out.write(f"Produced by: `{command}`\n\n")
    if missing:
        verb = "has" if len(missing) == 1 else "have"
        out.write(f"**Partial grid: {len(missing)} of the {planned} planned runs {verb} no result:**\n\n")
        for item in missing:
            status = "not run" if item["status"] is None else f"{item['status']}, unfinished"
            out.write(f"- {'baseline ' if item['baseline'] else ''}{item['run']}: {status}\n")
        out.write("\n")
    out.write("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
    for row in rows:
        out.write("| " + " | ".join(_format(row.get(column), column) for column in columns) + " |\n")
    metric = primary_metric(rows)
    if summary:
        out.write(f"\n## Best k per backbone (by {metric})\n\n")
        # best_k() summarizes runs only when there is a primary metric
        out.write(
            "| backbone | initial head norm | best k | mode | "
            + cast(str, metric)
            + " | k ranking | auto-k | auto-k in best two |\n"
        )
        out.write("|---|---|---|---|---|---|---|---|\n")
        for backbone, item in summary.items():
            out.write(
                f"| {backbone} | {_format(item['initial_head_norm'])} | {_format(item['best_k'], 'k')} | "
                f"{item['best_mode']} | "
                f"{_format(item[metric])} | {', '.join(_format(k, 'k') for k in item['k_ranking'])} | "
                f"{_format(item['auto_k'], 'k')} | "
                f"{item['auto_k_in_best_two']} |\n"
            )
    configs = configurations(rows)
    if metric and len(configs) < len(rows):
        out.write(
            f"\n## Configurations (mean ± std of {metric} over seeds)\n\n"
            f"| configuration | seeds | {metric} |\n|---|---|---|\n"
        )
        for row in configs:
            spread = row.get(f"{metric} std")
            out.write(
                f"| {row['run']} | {row['seeds']} | {_format(row.get(metric))}"
                f"{'' if spread is None else f' ± {spread:.4f}'} |\n"
            )
    if tests:
        out.write(
            "\n## Paired tests over queries (equal weight per collection)\n\n"
            "Per query nDCG@10 (RR@10 where that is the collection's measure). **mean A, mean B, A − B**: the mean "
            "over collections of each collection's mean (equal weights; seeds averaged), the quantity the tables "
            "print. **p**: sign-flip test of that difference, stratified by collection (two-sided, 9,999 "
            "resamples); **Holm**: p corrected across this report's tests. **95 % CI**: bootstrap over seeds × "
            "queries (seeds resampled per configuration, queries within collection). **TOST**: equivalence "
            "within the stated margin (p; only for `--contrast A:B:MARGIN`); no difference is claimed without "
            "it. **pooled**: the secondary test of the query-pooled mean difference (queries weighted by "
            "collection size, seeds averaged).\n\n"
            "| A | B | queries | seeds A, B | mean A | mean B | A − B | 95 % CI (seeds × queries) | p | Holm | "
            "TOST | pooled A − B | pooled p |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        )
        for test in tests:
            equivalence = "" if test.margin is None else f"±{test.margin:g}: {test.tost_p_value:.4f}"
            holm_p = "" if test.p_holm is None else f"{test.p_holm:.4f}"
            out.write(
                f"| {test.a} | {test.b} | {test.units} | {test.seeds_a}, {test.seeds_b} | {test.mean_a:.4f} | "
                f"{test.mean_b:.4f} | {test.mean_difference:+.4f} | [{test.ci_low:+.4f}, {test.ci_high:+.4f}] | "
                f"{test.p_value:.4f} | {holm_p} | {equivalence} | {test.pooled_difference:+.4f} | "
                f"{test.pooled_p_value:.4f} |\n"
            )
    out.write(
        "\n![loss curves](plots/loss_curves.png)\n![effectiveness vs FLOPS](plots/effectiveness_vs_flops.png)\n"
        "![head norm vs best k](plots/head_norm_vs_best_k.png)\n"
    )
    return out.getvalue()


def _save(figure: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    with atomic_file(path, "wb") as stream:
        figure.savefig(stream, format="png", dpi=110)
    plt.close(figure)
    return path


def _legend(axis: Axes) -> None:
    """The axis' legend, when something on it has a label (matplotlib warns about an empty one)."""
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=7)


def plot(directory: Path, rows: list[dict], summary: dict) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = directory / "plots"
    plots.mkdir(exist_ok=True)
    rows = [row for row in rows if not row.get("baseline")]  # no training curve, no k
    backbones = list(dict.fromkeys(row["backbone"] for row in rows))
    written = []

    # one panel per trained backbone; one empty panel while only baselines have finished (a partly run grid)
    panels = max(1, len(backbones))
    figure, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.6), squeeze=False)
    for axis, backbone in zip(axes[0], backbones):
        for row in rows:
            if row["backbone"] != backbone:
                continue
            metrics = read_metrics(directory / "runs" / row["run"], numbers=LOSS_NUMBERS)
            if metrics:
                axis.plot(
                    [m["step"] for m in metrics],
                    [m["loss"] for m in metrics],
                    label=f"k={_format(row['k'], 'k')} {row['mode']}",
                )
        axis.set_title(backbone)
        axis.set_xlabel("step")
        axis.set_ylabel("training loss")
        axis.set_yscale("symlog")
        _legend(axis)
    written.append(_save(figure, plots / "loss_curves.png"))

    metric = primary_metric(rows)
    figure, axis = plt.subplots(figsize=(6, 4.2))
    for backbone in backbones:
        points = [
            row for row in rows if row["backbone"] == backbone and row.get(metric) is not None and row.get("FLOPS")
        ]
        axis.scatter([row["FLOPS"] for row in points], [row[metric] for row in points], label=backbone)
        for row in points:
            axis.annotate(
                f"k={_format(row['k'], 'k')}{'' if row['mode'] in ('none', 'tied') else ' u'}",
                (row["FLOPS"], row[metric]),
                fontsize=7,
            )
    # Recipe variants of one backbone (`set`, e.g. a λ sweep): join each k/mode's points into a trade-off curve.
    curves: dict[tuple, list[dict]] = {}
    for row in rows:
        if row.get("set") and row.get(metric) is not None and row.get("FLOPS"):
            curves.setdefault((row.get("backbone_id"), row.get("inflate"), row["k"], row["mode"]), []).append(row)
    for (_, _, k, mode), points in curves.items():
        if len(points) > 1:
            points.sort(key=lambda row: row["FLOPS"])
            axis.plot(
                [row["FLOPS"] for row in points],
                [row[metric] for row in points],
                linestyle=":",
                linewidth=1,
                label=f"k={_format(k, 'k')} {mode} across recipes",
            )
    axis.set_xscale("log")
    axis.set_xlabel("retrieval FLOPS (Σ_v p_q(v)·p_d(v), mean over collections)")
    axis.set_ylabel(metric or "effectiveness")
    _legend(axis)
    written.append(_save(figure, plots / "effectiveness_vs_flops.png"))

    figure, axis = plt.subplots(figsize=(5.5, 4))
    for backbone, item in summary.items():
        if item["initial_head_norm"] is None or item["best_k"] == "auto":
            continue
        axis.scatter(item["initial_head_norm"], float(item["best_k"]), marker="o", label=f"{backbone} best k")
        if item["auto_k"] is not None:
            axis.scatter(item["initial_head_norm"], float(item["auto_k"]), marker="x", color="black")
    axis.set_xscale("log")
    axis.set_yscale("log", base=2)
    axis.set_xlabel("initial ‖W_head‖_F")
    axis.set_ylabel("k (o: best, x: auto-k)")
    _legend(axis)
    written.append(_save(figure, plots / "head_norm_vs_best_k.png"))
    return written


def planned_runs(directory: Path) -> tuple[list[str], list[str]]:
    """(baselines, trained runs) that ``plan.json`` lists; both empty for a folder without a plan."""
    plan_path = directory / PLAN_FILE
    if not plan_path.is_file():
        return [], []
    plan = read_json(plan_path, dict)
    runs = expect(plan.get("runs"), list, "'runs'", plan_path)
    baselines = expect(plan.get("baselines"), list, "'baselines'", plan_path)
    for name in [*baselines, *runs]:
        expect(name, str, "a planned run", plan_path)
    return baselines, runs


def unfinished_runs(rows: list[dict], baselines: list[str], runs: list[str]) -> list[dict]:
    """Every planned run (:func:`planned_runs`) without a finished result (a partly run grid: workers still
    running, some failed, a baseline never run), the baselines first: ``{"run", "baseline", "status"}`` (status:
    that of its ``run.json``, None when it never started)."""
    status = {row["run"]: row.get("status") for row in rows}
    return [
        {"run": name, "baseline": name in baselines, "status": status.get(name)}
        for name in [*baselines, *runs]
        if status.get(name) != "done"
    ]


def build_report(directory: str | Path, command: str | None = None, contrasts: Iterable[str] = ()) -> dict:
    """Write ``results.csv``, ``results.md`` and ``plots/*.png`` into the sweep folder; ``contrasts`` (``"A:B"``,
    or ``"A:B:MARGIN"`` with an equivalence margin) are tested on top of the report's own pairs. A contrast naming
    a configuration with no finished run is refused before anything is written."""
    directory = Path(directory)
    pairs = [parse_contrast(text) for text in contrasts]
    rows = collect(directory)
    known = {row["configuration"] for row in rows if row.get("status") == "done"}
    missing = sorted({name for pair in pairs for name in pair[:2]} - known)
    if missing:
        raise InputError(
            f"--contrast names {', '.join(missing)}: no finished run of that configuration in "
            f"{directory} (finished: {', '.join(sorted(known)) or 'none'})"
        )
    summary = best_k(rows)
    tests = paired_tests(directory, rows, summary, pairs)
    baselines, runs = planned_runs(directory)
    unfinished = unfinished_runs(rows, baselines, runs)
    columns = _columns(rows)
    with atomic_file(directory / "results.csv") as stream:
        writer = csv.DictWriter(stream, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    with atomic_file(directory / "results.md") as stream:
        stream.write(markdown(rows, summary, command, tests, unfinished, len(baselines) + len(runs)))
    plots = plot(directory, rows, summary)
    return {
        "rows": len(rows),
        "csv": str(directory / "results.csv"),
        "markdown": str(directory / "results.md"),
        "plots": [str(p) for p in plots],
        "best": summary,
        "paired_tests": [test.to_dict() for test in tests],
        "missing_runs": [item["run"] for item in unfinished],  # the baselines first
        "missing_baselines": [item["run"] for item in unfinished if item["baseline"]],
    }
