"""train: fine-tune a backbone into a SPLADE model from a YAML config; mine: the training data it reads."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

from spladekit.cli.app import app, emit
from spladekit.cli.core import checked_device
from spladekit.cli.options import DEVICE, JSON_FLAG, TRUST_REMOTE_CODE, doc_max_length_option, option


@app.command()
def train(
    config: Path = typer.Argument(
        ..., help="YAML training config (see configs/train-example.yaml and docs/training.md)."
    ),
    output: Path = option(
        ...,
        "--output",
        "-o",
        detail="Here: the run folder: model/, metrics.jsonl, config.yaml (fully resolved), plots/, checkpoints/.",
    ),
    overrides: list[str] | None = typer.Option(
        None,
        "--set",
        help="Override a config key, e.g. --set optimization.lr=1e-4 (repeatable; value parsed as YAML); "
        "`spladekit keys train` lists every key.",
    ),
    resume: bool = option(
        False, "--resume", detail="Here: from its newest checkpoint (same config; only logging.* may change)."
    ),
    overwrite: bool = option(
        False,
        "--overwrite",
        detail="Here: the old run is set aside once the config, data and backbone load, deleted when the new run "
        "completes, put back if it fails.",
    ),
    stop_on_collapse: bool = typer.Option(
        False,
        "--stop-on-collapse",
        help="Stop (exit 2) when the collapse detector fires, instead of only warning (= logging.stop_on_collapse).",
    ),
    device: str = option(
        "auto",
        "--device",
        detail="Here: under torchrun auto is each process's GPU cuda:LOCAL_RANK. Arithmetic (fp32, bf16, auto): "
        "optimization.precision in the config.",
    ),
) -> None:
    """Train a SPLADE model (InfoNCE or distillation + FLOPS/L1).

    Several processes: torchrun --nproc_per_node N -m spladekit train …"""
    from spladekit.common.errors import SpladekitError
    from spladekit.training import load_config
    from spladekit.training import train as run_training

    if resume and overwrite:
        raise SpladekitError("--resume and --overwrite exclude each other")
    settings = load_config(
        config, list(overrides or []) + (["logging.stop_on_collapse=true"] if stop_on_collapse else [])
    )
    logging.getLogger("spladekit").setLevel(logging.INFO)
    run_training(settings, output, resume=resume, overwrite=overwrite, device=device)
    typer.echo(f"trained {settings.optimization.steps} steps -> {output / 'model'}")


@app.command()
def mine(
    data: str = typer.Argument(
        ...,
        help="Collection with a training split: BEIR folder (corpus.jsonl, queries.jsonl, "
        "qrels/SPLIT.tsv), ir_datasets id (beir/scifact, msmarco-passage) or HF dataset id.",
    ),
    output: Path = option(
        ...,
        "--output",
        "-o",
        detail="Here: triplets: a TSV file; hard_negatives: a folder (hard-negatives.jsonl, queries.jsonl, "
        "corpus.jsonl, mining.json).",
    ),
    layout: str = typer.Option(
        "triplets",
        "--layout",
        help="triplets: TSV query<TAB>positive<TAB>negative of texts, "
        "one line per negative (data.format: triplets); hard_negatives: the sentence-transformers "
        "jsonl {qid, pos, neg: {system: list of ids}} with its queries and documents "
        "(data.format: hard_negatives).",
    ),
    split: str = option("train", "--split", detail="Here: the split to mine (an ir_datasets id must have it)."),
    negatives: int = typer.Option(
        4,
        help="Negatives drawn per (query, positive) pair (triplets) or per query "
        "(hard_negatives); fewer when the rank range holds fewer candidates.",
    ),
    rank_range: str = typer.Option(
        "1:30",
        help="Draw negatives from ranks A to B (written A:B) of the retriever's ranking, "
        "1-based, both included (1:30 = top 30; 10:100 skips the first 9).",
    ),
    exclude_judged: bool = typer.Option(
        False,
        "--exclude-judged",
        help="Also exclude documents judged not relevant (relevance <= 0); judged-relevant ones are always excluded.",
    ),
    seed: int = typer.Option(
        13, help="Seed of the draw (each query's draw depends only on the seed and its position)."
    ),
    model: Optional[str] = option(
        None,
        "--model",
        detail="Here: mine its own negatives (corpus and queries encoded, exact search) instead of BM25's.",
    ),
    k1: float = typer.Option(0.9, help="BM25 k1 (bm25s, Lucene variant)."),
    b: float = typer.Option(0.4, help="BM25 b."),
    max_length: Optional[int] = doc_max_length_option(
        detail="Here: with --model, for queries too (default: each side's own)."
    ),
    batch_size: int = option(32, "--batch-size", min=1, detail="Here: with --model."),
    device: str = DEVICE,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    overwrite: bool = option(False, "--overwrite"),
    as_json: bool = JSON_FLAG,
) -> None:
    """Mine training triplets / hard negatives (BM25 or a SPLADE model) from a collection's train split."""
    from spladekit.training.mining import MiningSettings, mine_training_data, parse_rank_range

    settings = MiningSettings(
        negatives=negatives,
        rank_range=parse_rank_range(rank_range),
        exclude_judged=exclude_judged,
        seed=seed,
        k1=k1,
        b=b,
        model=model,
        max_length=max_length,
        batch_size=batch_size,
        device=checked_device(device),
        trust_remote_code=trust_remote_code,
    )
    summary = mine_training_data(data, output, layout, settings, split=split, overwrite=overwrite)
    train_with = " ".join(f"--set {item}" for item in summary.get("train_settings", [f"data.path={output}"]))
    emit(
        summary,
        as_json,
        None,
        f"mined {summary['lines']} {'lines' if layout == 'triplets' else 'queries'} "
        f"({summary['queries']} queries, {summary['pairs']} positive pairs, {summary['system']} ranks "
        f"{rank_range}) in {summary['seconds']:.1f} s -> {output}\ntrain on it: spladekit train CONFIG --output RUN "
        f"{train_with}",
    )
