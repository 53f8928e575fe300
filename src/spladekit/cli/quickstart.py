"""quickstart: diagnose → rescale (auto-k) → short training → evaluate → plots and a summary table."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from spladekit.cli.app import app, emit
from spladekit.cli.options import DEVICE, JSON_FLAG, TRUST_REMOTE_CODE, doc_max_length_option, option


@app.command()
def quickstart(
    backbone: Optional[str] = typer.Option(
        None,
        help="Hub id or folder of a masked-LM model. Default: "
        "../shared/models/splade-tiny-msmarco when a `shared` folder is beside "
        "the repository, else google/bert_uncased_L-2_H-128_A-2 from the hub.",
    ),
    data: Optional[str] = typer.Option(
        None,
        "--train-data",
        help="Collection to train on (its triplets-train.tsv, else triplets "
        "mined from its train split), and to evaluate on unless --eval-data: BEIR "
        "folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv), ir_datasets id or HF "
        "dataset id. Default: ../shared/data/scifact when a `shared` folder is beside "
        "the repository, else beir/scifact (ir_datasets).",
    ),
    eval_data: Optional[str] = typer.Option(
        None,
        help="Collection evaluated before and after training (whole: "
        "every document, every judged query of --split), same kinds as --train-data. "
        "Default: --train-data when given; with neither, ../shared/data/cranfield "
        "when a `shared` folder is beside the repository, else cranfield "
        "(ir_datasets).",
    ),
    max_length: Optional[int] = doc_max_length_option(
        detail="Here: the evaluated collection's documents, its queries too (as evaluate's --doc-max-length without "
        "--query-max-length); the encoding time is proportional to the tokens encoded. Default: the model's limit."
    ),
    output: Path = option(
        Path("runs/quickstart"),
        "--output",
        "-o",
        detail="Here: a folder for diagnose.json, train/ (model, metrics, plots), summary.json and summary.md.",
    ),
    steps: int = typer.Option(100, min=1, help="Training steps (batch 8, CPU-friendly)."),
    triplets: Optional[Path] = typer.Option(
        None,
        help="Training triplets TSV (query<TAB>positive<TAB>negative…); "
        "default: DATA/triplets-train.tsv, else mined from DATA's train split "
        "(BM25, `spladekit mine` defaults) into OUTPUT/triplets-train.tsv.",
    ),
    split: str = option("test", "--split", detail="Here: of the evaluated collection."),
    config: Optional[Path] = typer.Option(
        None,
        help="Base training YAML (e.g. configs/train-example.yaml); "
        "backbone, data, steps and auto-k are set by the quickstart.",
    ),
    overwrite: bool = option(False, "--overwrite"),
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    progress: bool = typer.Option(
        True,
        "--progress/--no-progress",
        help="Announce each stage and show progress bars on encoding, training and search (on stderr).",
    ),
    device: str = DEVICE,
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Also train the backbone as it is (no rescaling; the same seed, data and steps), evaluate it, and "
        "plot both runs' loss and sparsity on one figure (OUTPUT/compare.png).",
    ),
    as_json: bool = JSON_FLAG,
) -> None:
    """Diagnose a backbone, rescale its head (auto-k), train briefly, evaluate before/after, write a summary."""
    from spladekit.experiments.quickstart import quickstart as run_quickstart

    def say(line: str) -> None:
        if progress:
            typer.echo(line, err=True)

    summary = run_quickstart(
        backbone,
        data,
        output,
        steps=steps,
        triplets=triplets,
        split=split,
        config=config,
        trust_remote_code=trust_remote_code,
        overwrite=overwrite,
        show_progress=progress,
        say=say,
        eval_data=eval_data,
        max_length=max_length,
        device=device,
        compare=compare,
    )
    plots = "".join(f"\n  {path}" for path in summary["plot_files"]) or f" {summary['plots']} (none written)"
    emit(
        summary,
        as_json,
        None,
        f"{summary['table']}\n\nrecommended k {summary['recommended_k']:g}, trained "
        f"with k {summary['k'] or 1:g}; summary in {output / 'summary.md'}, model in {summary['model']}\n"
        f"plots:{plots}" + (f"\ncomparison plot: {summary['compare_plot']}" if summary.get("compare_plot") else ""),
    )
