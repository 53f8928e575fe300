"""sweep, report: backbone × k grids and their paper-style tables."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from spladekit.cli.app import app, emit
from spladekit.cli.core import checked_device
from spladekit.cli.options import DEVICE, JSON_FLAG, option
from spladekit.common.errors import SpladekitError


@app.command()
def sweep(
    config: Path = typer.Argument(
        ...,
        help="Sweep YAML: recipe, backbones, k grid, modes, evaluation "
        "(see configs/mini-repro.yaml and docs/experiments.md; every key: `spladekit keys sweep`).",
    ),
    output: Path = option(
        ..., "--output", "-o", detail="Here: the sweep folder (created; re-running it resumes, no --resume needed)."
    ),
    dry_run: bool = option(False, "--dry-run", detail="Here: backbones, data and suites checked; nothing trained."),
    only: Optional[list[str]] = typer.Option(
        None, "--only", help="Run only the runs whose name contains this (repeatable), e.g. --only tiny__k4."
    ),
    device: str = DEVICE,
    shard: Optional[str] = option(
        None, "--shard", detail="Here: only the cells (and baselines) at plan positions I modulo N."
    ),
    devices: Optional[str] = typer.Option(
        None,
        "--devices",
        help="Run the grid on several devices side by side, one worker process per device (0,1,2,3 = "
        "cuda:0…cuda:3; cpu,cpu = two CPU workers); their logs go to OUTPUT/workers/. Not with --shard/--device.",
    ),
    as_json: bool = JSON_FLAG,
) -> None:
    """Train and evaluate every backbone × k × mode of CONFIG with one shared recipe (resumable)."""
    from rich.console import Console
    from rich.table import Table

    from spladekit.experiments.sweep import run_on_devices, run_sweep
    from spladekit.experiments.sweep_config import check_only, load_sweep
    from spladekit.experiments.sweep_cost import dry_run as plan_sweep
    from spladekit.vectors.encoding import parse_shard

    settings = load_sweep(config)
    # every option is checked before any work, --dry-run included (it validates the run, so it must refuse what the
    # run would refuse)
    selection = parse_shard(shard)
    checked_device(device)
    workers = None
    if devices is not None:
        if shard is not None or device != "auto":
            raise SpladekitError("--devices starts one worker per device: give it without --shard and --device")
        names = [item.strip() for item in devices.split(",") if item.strip()]
        if not names:
            raise SpladekitError(f"--devices must list at least one device, got {devices!r}")
        workers = [checked_device(f"cuda:{name}" if name.isdigit() else name) for name in names]
    check_only(settings, only)
    if dry_run:
        result = plan_sweep(settings, output)
        table = Table(title=f"sweep {result['name']}: {len(result['runs'])} runs")
        for column in ("run", "backbone check", "est. train time"):
            table.add_column(column)
        for row in result["runs"]:
            seconds = row["estimated_train_seconds"]
            table.add_row(row["run"], row["backbone_check"], "?" if seconds is None else f"{seconds / 60:.0f} min")
        console = Console(width=150)
        if not as_json:
            console.print(table)
            console.print(
                f"estimated total training: {result['estimated_total_train_hours_on_this_machine']} h on this "
                f"machine (covers {result['estimate_covers_runs']} runs; evaluation not included)"
            )
            for problem in result["problems"]:
                console.print(f"[red]problem:[/red] {problem}")
        else:
            typer.echo(json.dumps(result, indent=2))
        if result["problems"]:
            raise SpladekitError(f"{config}: {len(result['problems'])} problem(s) found by --dry-run")
        return
    if workers is not None:
        logs = run_on_devices(config, output, workers, only)
        emit(
            {"workers": [str(path) for path in logs]},
            as_json,
            None,
            f"{len(logs)} worker(s) finished in {output} (logs: {logs[0].parent}); next: spladekit report {output}",
        )
        return
    records = run_sweep(settings, output, only=only, device=device, shard=selection)
    emit(
        {"runs": records}, as_json, None, f"{len(records)} run(s) finished in {output}; next: spladekit report {output}"
    )


@app.command()
def report(
    directory: Path = typer.Argument(..., help="A sweep folder written by `spladekit sweep`."),
    contrast: list[str] = typer.Option(
        [],
        "--contrast",
        help="Also test configuration A against B, written A:B "
        "(names as in the report's configuration table, e.g. tiny__k16__untie:tiny__k16__tied, "
        "or a baseline such as bm25), with a third field, the margin (A, B, MARGIN joined by colons), "
        "to add an equivalence test (TOST) within ±MARGIN, "
        "a margin stated before the runs; repeatable.",
    ),
    as_json: bool = JSON_FLAG,
) -> None:
    """Build results.csv, results.md (paper-style table, best k per backbone, auto-k check, paired tests over
    queries) and plots/*.png."""
    from spladekit.experiments.report import build_report

    command = " ".join(["spladekit", *map(shlex.quote, sys.argv[1:])])
    result = build_report(directory, command=command, contrasts=contrast)
    emit(result, as_json, None, (Path(directory) / "results.md").read_text())
