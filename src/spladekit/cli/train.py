"""train: fine-tune a backbone into a SPLADE model from a YAML config."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from spladekit.cli.app import app


@app.command()
def train(
    config: Path = typer.Argument(..., help="YAML training config (see configs/train-example.yaml and docs/training.md)."),
    output: Path = typer.Option(..., "--output", "-o", help="Run folder: model/, metrics.jsonl, config.yaml "
                                "(fully resolved), plots/, checkpoints/."),
    overrides: list[str] | None = typer.Option(None, "--set", help="Override a config key, e.g. "
                                                  "--set optimization.lr=1e-4 (repeatable; value parsed as YAML)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --output from its newest checkpoint "
                                "(same config; only logging.* may change)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete an existing --output folder and start afresh."),
    stop_on_collapse: bool = typer.Option(False, "--stop-on-collapse", help="Stop (exit 2) when the collapse "
                                          "detector fires, instead of only warning (= logging.stop_on_collapse)."),
) -> None:
    """Train a SPLADE model (InfoNCE or distillation + FLOPS/L1). Several processes: torchrun --nproc_per_node N -m spladekit train …"""
    from spladekit.errors import SpladekitError
    from spladekit.train import load_config
    from spladekit.train import train as run_training

    if resume and overwrite:
        raise SpladekitError("--resume and --overwrite exclude each other")
    settings = load_config(config, list(overrides or []) + (["logging.stop_on_collapse=true"] if stop_on_collapse else []))
    logging.getLogger("spladekit").setLevel(logging.INFO)
    run_training(settings, output, resume=resume, overwrite=overwrite)
    typer.echo(f"trained {settings.optimization.steps} steps -> {output / 'model'}")
