"""Quickstart: diagnose → rescale (auto-k) → short training → evaluate → plots and a summary table.

A thin composition of the pipeline's Python APIs (``diagnosis.diagnose``, ``train.train`` with
``rescale.k: auto``, ``evaluate.evaluate``, ``model_card``); it adds no logic of its own beyond
choosing short-run settings. Output folder:

* ``diagnose.json``  the untouched backbone's head report (norms, tying, recommended k);
* ``triplets-train.tsv`` only when no triplets were given or found in the data folder: BM25 triplets
                     mined from its train split (``spladekit.mining.find_or_mine``);
* ``train/``         the training run (``model/``, ``metrics.jsonl``, ``config.yaml`` with the resolved k,
                     ``plots/``, ``checkpoints/``), the model card listing recipe and evaluation;
* ``summary.json``   both evaluations (backbone as is vs. trained) and the settings;
* ``summary.md``     the same as a markdown table;
* ``run.trec``       the trained model's run on the split;
* ``explain/``       why three sample queries retrieve their top document: ``query-<id>.html`` pages and
                     ``summary.md`` / ``summary.json`` (``spladekit.explain.explain_run``).

The folder is written as a whole: everything goes into a staging folder beside it, renamed to the
output's name only when the last file is written (``spladekit.atomic.open_output``). A run that fails
half-way leaves nothing under that name (the staging is removed; a ``kill -9`` leaves a hidden
``.NAME.partial`` that the next run removes), so a rerun is never blocked by it, and with ``overwrite``
the previous folder is replaced only by a complete new one.
"""

from __future__ import annotations

import json
from pathlib import Path

from spladekit.atomic import atomic_file, final_path, open_output
from spladekit.data.collections import load_collection
from spladekit.diagnosis import diagnose
from spladekit.encoder import SparseEncoder
from spladekit.evaluate import evaluate
from spladekit.evaluation_result import EvaluationResult
from spladekit.explain import explain_run
from spladekit.head import head_norms
from spladekit.mining import find_or_mine
from spladekit.model_card import write_model_card
from spladekit.model_loading import load_model
from spladekit.rescaling import RescaleRecord, apply_rescale
from spladekit.run import Run
from spladekit.train import load_config, train

SUMMARY_KEYS = ("flops", "avg_q_nnz", "avg_d_nnz")


def training_overrides(backbone: str, triplets: Path, steps: int, trust_remote_code: bool) -> list[str]:
    """``--set`` assignments for a short run: auto k and mode, warm-ups scaled to the number of steps."""
    warmup = max(1, steps // 10)
    return [
        f"backbone.id={json.dumps(str(backbone))}",
        f"backbone.trust_remote_code={str(trust_remote_code).lower()}",
        "rescale.k=auto",
        "rescale.mode=auto",
        f"data.path={json.dumps(str(triplets))}",
        f"optimization.steps={steps}",
        f"optimization.warmup_steps={warmup}",
        f"regularizer.warmup_steps={max(1, steps // 2)}",
        f"logging.every={max(1, min(10, steps // 5))}",
        f"logging.checkpoint_every={steps}",
        "logging.progress=false",
    ]


def _row(label: str, result: EvaluationResult) -> str:
    cells = [f"{result.metrics[m]:.4f}" for m in result.measures]
    cells += [f"{result.efficiency[key]:.1f}" for key in SUMMARY_KEYS]
    return "| " + " | ".join([label, *cells]) + " |"


def summary_table(before: EvaluationResult, after: EvaluationResult, rescaling: RescaleRecord, steps: int) -> str:
    header = ["model", *after.measures, "FLOPS", "query nnz", "doc nnz"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
             _row("backbone as is (k = 1, untrained)", before),
             _row(f"trained ({rescaling.describe()}, {steps} steps)", after)]
    return "\n".join(lines)


def quickstart(
    backbone: str,
    data: str | Path,
    output: str | Path,
    steps: int = 100,
    triplets: str | Path | None = None,
    split: str = "test",
    config: str | Path | None = None,
    trust_remote_code: bool = False,
    overwrite: bool = False,
    show_progress: bool = False,
) -> dict:
    """Run the whole pipeline on ``backbone`` with the BEIR folder ``data`` (train on ``triplets``, default
    ``data/triplets-train.tsv``, else BM25 triplets mined from data's train split; evaluate on ``split``);
    ``config`` = base training YAML."""
    output = Path(output)
    with open_output(output, folder=True, overwrite=overwrite) as opened:
        summary = _quickstart(backbone, data, opened.staging, steps, triplets, split, config, trust_remote_code,
                              show_progress)
    return summary


def _quickstart(backbone: str, data: str | Path, output: Path, steps: int, triplets: str | Path | None, split: str,
                config: str | Path | None, trust_remote_code: bool, show_progress: bool) -> dict:
    """The pipeline, written into ``output`` (the staging folder); paths recorded in files are final ones."""
    triplets = Path(triplets) if triplets is not None else find_or_mine(data, output, show_progress)
    settings = load_config(config, training_overrides(backbone, triplets, steps, trust_remote_code))
    collection = load_collection(data, split)

    encoder = SparseEncoder.from_pretrained(backbone, trust_remote_code=trust_remote_code)
    report = diagnose(encoder)
    with atomic_file(output / "diagnose.json") as stream:
        stream.write(json.dumps(report.to_dict(), indent=2) + "\n")
    before = evaluate(encoder, collection, cache=False, show_progress=show_progress)

    run = train(settings, output / "train")
    initial_norms = head_norms(apply_rescale(encoder, run.rescale).model)  # the head training started from
    trained = load_model(run.model, trust_remote_code=trust_remote_code)  # either kind (model.kind in --config)
    after = evaluate(trained, collection, cache=False, show_progress=show_progress, run_path=output / "run.trec")
    explain_run(trained, collection, Run.read(output / "run.trec"), output / "explain",
                model_name=str(final_path(run.model)))

    resolved = run.config
    recipe = {"loss": resolved.loss.name, "regularizer": resolved.regularizer.name,
              "lambda_q": resolved.regularizer.lambda_q, "lambda_d": resolved.regularizer.lambda_d,
              "steps": steps, "batch_size": resolved.optimization.batch_size, "lr": resolved.optimization.lr,
              "triplets": str(final_path(triplets)), "rescale_k": run.rescale.k, "rescale_mode": run.rescale.mode}
    write_model_card(run.model, trained, training=recipe | {"initial_head_norms": initial_norms},
                     evaluation=[after])
    table = summary_table(before, after, run.rescale, steps)
    summary = {"backbone": str(backbone), "data": str(data), "split": split, "recommended_k": report.recommended_k,
               "k": run.rescale.k, "mode": run.rescale.mode, "steps": steps, "model": str(final_path(run.model)),
               "plots": str(final_path(run.output / "plots")), "before": before.to_dict(), "after": after.to_dict()}
    with atomic_file(output / "summary.json") as stream:
        stream.write(json.dumps(summary, indent=2, default=str) + "\n")
    with atomic_file(output / "summary.md") as stream:
        stream.write(f"# spladekit quickstart: {backbone} on {collection.name} ({split})\n\n{table}\n\n"
                     f"Training curves: `{summary['plots']}`. Model: `{summary['model']}` (see its README.md).\n")
    return summary | {"table": table}
