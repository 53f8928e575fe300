"""Quickstart: diagnose → rescale (auto-k) → short training → evaluate → plots and a summary table.

A thin composition of the pipeline's Python APIs (``diagnosis.diagnose``, ``train.train`` with
``rescale.k: auto``, ``evaluate.evaluate``, ``model_card``); it adds no logic of its own beyond
choosing short-run settings and saying what happens. Five stages, each announced in one line (diagnose →
evaluate before → train → evaluate after → plots and summary), with the head diagnosis and the chosen k
explained in one line each, and progress bars on encoding, training and search.

The training data (``data``: its triplets, or triplets mined from its train split) and the evaluated collection
(``eval_data``, default ``data``) are separate, so that a short demo can train on one collection and evaluate
before/after on a smaller, complete one: the cost of each evaluation is proportional to the number of corpus
tokens it encodes (the SPLADE head's H × V product per token dominates a small backbone's cost).

With no backbone and no data it uses the offline copies in the ``shared`` folder beside the repository when
they are there, and otherwise the public defaults :data:`DEFAULT_BACKBONE` (Hugging Face hub),
:data:`DEFAULT_DATA` and :data:`DEFAULT_EVAL_DATA` (ir_datasets), downloaded into those libraries' caches on
first use. Output folder:

* ``diagnose.json``  the untouched backbone's head report (norms, tying, recommended k);
* ``triplets-train.tsv`` only when no triplets were given or found in the data folder: BM25 triplets
                     mined from its train split (``spladekit.training.mining.find_or_mine``);
* ``train/``         the training run (``model/``, ``metrics.jsonl``, ``config.yaml`` with the resolved k,
                     ``plots/``, ``checkpoints/``), the model card listing recipe and evaluation;
* ``summary.json``   both evaluations (backbone as is vs. trained) and the settings;
* ``summary.md``     the same as a markdown table;
* ``run.trec``       the trained model's run on the split;
* ``explain/``       why three sample queries retrieve their top document: ``query-<id>.html`` pages and
                     ``summary.md`` / ``summary.json`` (``spladekit.evaluation.explain.explain_run``).

The folder is written as a whole: everything goes into a staging folder beside it, renamed to the
output's name only when the last file is written (``spladekit.common.atomic.open_output``). A run that fails
half-way leaves nothing under that name (the staging is removed; a ``kill -9`` leaves a hidden
``.NAME.partial`` that the next run removes), so a rerun is never blocked by it, and with ``overwrite``
the previous folder is replaced only by a complete new one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path

from spladekit.common.atomic import atomic_file, final_path, open_output
from spladekit.common.devices import resolve_device
from spladekit.common.sources import shared_folder
from spladekit.data.collections import load_collection
from spladekit.data.training import load_training_set
from spladekit.evaluation.evaluate import evaluate
from spladekit.evaluation.explain import explain_run
from spladekit.evaluation.result import EvaluationResult
from spladekit.evaluation.run import Run
from spladekit.model.card import write_model_card
from spladekit.model.diagnosis import AUTO_K_TOLERANCE, REFERENCE_PAIR_SCORE, HeadReport, diagnose
from spladekit.model.encoder import SparseEncoder
from spladekit.model.loading import load_model
from spladekit.model.rescaling import RescaleRecord, resolve_rescale
from spladekit.training import TrainConfig, load_config, train
from spladekit.training.config import validate
from spladekit.training.loop import recipe
from spladekit.training.mining import find_or_mine
from spladekit.training.monitors import write_comparison_plot
from spladekit.training.setup import resolved_config

logger = logging.getLogger("spladekit")

# The public defaults, used when no ``shared`` folder is beside the repository (see README "Quickstart
# defaults"): Google's BERT-tiny miniature (2 layers, hidden 128; Turc et al. 2019), released with the MLM head
# it was pre-trained with; SciFact from BEIR through ir_datasets for the training triplets (its train split), and
# the complete Cranfield collection (1,400 documents, 225 queries: a fifth of SciFact's tokens) evaluated.
DEFAULT_BACKBONE = "google/bert_uncased_L-2_H-128_A-2"
DEFAULT_DATA = "beir/scifact"
DEFAULT_EVAL_DATA = "cranfield"
SHARED_BACKBONE = ("models", "splade-tiny-msmarco")
SHARED_DATA = ("data", "scifact")
SHARED_EVAL_DATA = ("data", "cranfield")
TRIPLETS_FILE = "triplets-train.tsv"
STAGES = 5
SUMMARY_KEYS = ("flops", "avg_q_nnz", "avg_d_nnz")


def short_run(
    base: TrainConfig,
    backbone: str,
    triplets: Path,
    steps: int,
    trust_remote_code: bool,
    progress: bool = False,
    source: str | None = None,
) -> TrainConfig:
    """``base`` (read from ``source``, or the defaults) made a short run of ``backbone`` on ``triplets``: auto k and
    mode, warm-ups scaled to the number of steps, then checked against the schema's ranges."""
    replace = dataclasses.replace
    config = replace(
        base,
        backbone=replace(base.backbone, id=str(backbone), trust_remote_code=trust_remote_code),
        rescale=replace(base.rescale, k="auto", mode="auto"),
        data=replace(base.data, path=str(triplets)),
        optimization=replace(base.optimization, steps=steps, warmup_steps=max(1, steps // 10)),
        regularizer=replace(base.regularizer, warmup_steps=max(1, steps // 2)),
        logging=replace(base.logging, every=max(1, min(10, steps // 5)), checkpoint_every=steps, progress=progress),
    )
    validate(config, source)
    return config


def _row(label: str, result: EvaluationResult) -> str:
    cells = [f"{result.metrics[m]:.4f}" for m in result.measures]
    cells += [f"{result.efficiency[key]:.1f}" for key in SUMMARY_KEYS]
    return "| " + " | ".join([label, *cells]) + " |"


def summary_table(
    before: EvaluationResult,
    after: EvaluationResult,
    rescaling: RescaleRecord,
    steps: int,
    as_is: EvaluationResult | None = None,
) -> str:
    header = ["model", *after.measures, "FLOPS", "query nnz", "doc nnz"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        _row("backbone as is (k = 1, before this training)", before),
    ]
    if as_is is not None:  # --compare: the same training without the fix
        lines.append(_row(f"trained as is (k = 1, {steps} steps)", as_is))
    lines.append(_row(f"trained ({rescaling.describe()}, {steps} steps)", after))
    return "\n".join(lines)


def default_assets() -> tuple[str, str, str]:
    """(backbone, training data, evaluation data) for a quickstart given none: each the offline copy in the
    ``shared`` folder beside the repository when it is there (:func:`spladekit.common.sources.shared_folder`), else
    the public default :data:`DEFAULT_BACKBONE` (hub), :data:`DEFAULT_DATA`, :data:`DEFAULT_EVAL_DATA`
    (ir_datasets)."""
    shared = shared_folder()
    found = []
    for local, public in (
        (SHARED_BACKBONE, DEFAULT_BACKBONE),
        (SHARED_DATA, DEFAULT_DATA),
        (SHARED_EVAL_DATA, DEFAULT_EVAL_DATA),
    ):
        folder = shared.joinpath(*local) if shared is not None else None
        found.append(str(folder) if folder is not None and folder.is_dir() else public)
    return found[0], found[1], found[2]


def explain_diagnosis(report: HeadReport) -> str:
    """The head diagnosis in one line: tying, scale, the initial score against a trained SPLADE's."""
    fresh = (
        f"; {len(report.fresh_keys)} head weight(s) not in the checkpoint, freshly initialized"
        if report.fresh_keys
        else ""
    )
    return (
        f"head {report.head_param} ({'tied to' if report.tied else 'separate from'} the input embeddings), "
        f"mean row norm {report.mean_row_norm:.2f}; before training, a query and its relevant document score "
        f"{report.median_pair_score:.1f} (median), a trained SPLADE ~{REFERENCE_PAIR_SCORE:g}{fresh}"
    )


def explain_k(report: HeadReport) -> str:
    """Why auto-k and the mode rule chose what they chose, in one line."""
    scores = ", ".join(f"{float(k):g}: {score:.1f}" for k, score in report.scores_by_k.items())
    limit = AUTO_K_TOLERANCE * REFERENCE_PAIR_SCORE
    k = report.recommended_k
    why_k = (
        f"k = {k:g}, the smallest k that brings the median score to <= {limit:g}"
        if report.scores_by_k.get(f"{k:g}", limit + 1) <= limit
        else f"k = {k:g}, the largest candidate (none reaches {limit:g})"
    )
    if report.recommended_mode == "untie":
        why_mode = (
            f"mode untie: dividing the tied matrix by {k:g} would leave the word embeddings smaller than "
            f"the position embeddings (ratio {report.word_position_ratio:.2f})"
        )
    else:
        why_mode = "mode tied (the paper's: one matrix, divided once)"
    return f"auto-k: {why_k} (score by k: {scores}); {why_mode}"


def quickstart(
    backbone: str | None,
    data: str | Path | None,
    output: str | Path,
    steps: int = 100,
    triplets: str | Path | None = None,
    split: str = "test",
    config: str | Path | None = None,
    trust_remote_code: bool = False,
    overwrite: bool = False,
    show_progress: bool = False,
    say: Callable[[str], None] = logger.info,
    eval_data: str | Path | None = None,
    max_length: int | None = None,
    device: str = "auto",
    compare: bool = False,
) -> dict:
    """Run the whole pipeline on ``backbone`` (hub id or folder), training on ``triplets`` (default
    ``DATA/triplets-train.tsv``, else BM25 triplets mined from the train split of ``data``: folder, ir_datasets
    or HF id) and evaluating before/after on the ``split`` of ``eval_data`` (same kinds; default ``data``) with
    documents cut to ``max_length`` tokens (default: the model's limit); ``config`` = base training YAML.
    ``None`` for backbone, data and eval_data: :func:`default_assets` (with ``data`` given, eval_data defaults
    to it). Each stage is announced through ``say`` (one line each); ``show_progress`` shows progress bars on
    the long steps. Every stage runs on ``device`` (:func:`spladekit.common.devices.resolve_device`).

    ``compare``: also train the backbone as it is (no rescaling; the same seed, data and steps) into ``train-as-is/``,
    evaluate it too, and plot both runs' loss and document sparsity on one figure (``compare.png``): the
    collapse and its fix, for this backbone."""
    resolve_device(device)  # before any work
    defaults = default_assets()
    backbone = backbone or defaults[0]
    eval_data = eval_data or data or defaults[2]
    data = data or defaults[1]
    # checked before any work; data.path is set once the triplets are found or mined
    settings = short_run(
        load_config(config, partial=True),
        backbone,
        Path(triplets or TRIPLETS_FILE),
        steps,
        trust_remote_code,
        show_progress,
        None if config is None else str(config),
    )
    output = Path(output)
    with open_output(output, folder=True, overwrite=overwrite) as opened:
        summary = _quickstart(
            backbone,
            data,
            eval_data,
            opened.staging,
            settings,
            triplets,
            split,
            max_length,
            trust_remote_code,
            show_progress,
            say,
            device,
            compare,
        )
    return summary


def _quickstart(
    backbone: str,
    data: str | Path,
    eval_data: str | Path,
    output: Path,
    settings: TrainConfig,
    triplets: str | Path | None,
    split: str,
    max_length: int | None,
    trust_remote_code: bool,
    show_progress: bool,
    say: Callable[[str], None],
    device: str,
    compare: bool = False,
) -> dict:
    """The pipeline, written into ``output`` (the staging folder); paths recorded in files are final ones."""
    say(
        f"[0/{STAGES}] loading {eval_data} ({split}) to evaluate on, training triplets from {triplets or data}, "
        f"and {backbone}"
    )
    collection = load_collection(eval_data, split)  # first: a bad id or folder fails before any other work
    triplets = Path(triplets) if triplets is not None else find_or_mine(data, output, show_progress)
    settings = dataclasses.replace(settings, data=dataclasses.replace(settings.data, path=str(triplets)))
    steps = settings.optimization.steps
    encoder = SparseEncoder.from_pretrained(backbone, trust_remote_code=trust_remote_code, device=device)

    say(f"[1/{STAGES}] diagnose: the MLM head's scale, and the k that brings it to a trained SPLADE's")
    # once, on the training pairs that `rescale.k: auto` would diagnose: the k explained is the k trained with
    pairs = load_training_set(settings.data).pairs(settings.rescale.auto_pairs)
    report = diagnose(encoder, pairs, settings.data.doc_max_length, mode=settings.rescale.mode)
    rescaling = resolve_rescale(
        encoder,
        settings.rescale.k,
        settings.rescale.mode,
        settings.rescale.rescale_bias,
        pairs,
        settings.data.doc_max_length,
        report=report,
    )
    settings = resolved_config(settings, rescaling)
    with atomic_file(output / "diagnose.json") as stream:
        stream.write(json.dumps(report.to_dict(), indent=2) + "\n")
    say(f"      {explain_diagnosis(report)}")
    say(f"      {explain_k(report)}")

    say(
        f"[2/{STAGES}] evaluate before: the backbone as it is (k = 1, before this training) on "
        f"{len(collection.corpus)} "
        f"documents, {len(collection.qrels)} judged queries"
    )
    # the backbone as loaded is the same model on every run: its corpus vectors come from the evaluation
    # cache after the first run (keyed by the weights' and the corpus' hashes, see spladekit.evaluation.evaluate)
    before = evaluate(encoder, collection, max_length=max_length, cache=True, show_progress=show_progress)
    say(f"      {_metrics_line(before)}")

    say(
        f"[3/{STAGES}] train: {steps} steps of {settings.optimization.batch_size} triplets from {triplets}, head "
        f"divided by auto-k"
    )
    run = train(settings, output / "train", device=device)
    # either kind (model.kind in --config)
    trained = load_model(run.model, trust_remote_code=trust_remote_code, device=device)
    as_is = None
    if compare:
        say(f"      --compare: the same {steps} steps (seed, data) with the backbone as it is (k = 1)")
        unchanged = dataclasses.replace(settings.rescale, k=None, mode="tied")
        as_is_run = train(dataclasses.replace(settings, rescale=unchanged), output / "train-as-is", device=device)
        as_is_model = load_model(as_is_run.model, trust_remote_code=trust_remote_code, device=device)
        as_is = evaluate(as_is_model, collection, max_length=max_length, cache=False, show_progress=show_progress)
        say(f"      trained as is: {_metrics_line(as_is)}")

    say(f"[4/{STAGES}] evaluate after: the trained model ({rescaling.describe()})")
    after = evaluate(
        trained,
        collection,
        max_length=max_length,
        cache=False,
        show_progress=show_progress,
        run_path=output / "run.trec",
    )
    say(f"      {_metrics_line(after)}")
    explain_run(
        trained, collection, Run.read(output / "run.trec"), output / "explain", model_name=str(final_path(run.model))
    )

    say(f"[5/{STAGES}] plots and summary")
    # the card again: this evaluation happened after training (the training wrote the card without it)
    training = recipe(run.config, run.initial_head) | {"training data": str(final_path(triplets))}
    write_model_card(run.model, trained, training=training, evaluation=[after])
    table = summary_table(before, after, rescaling, steps, as_is)
    plots = final_path(run.output / "plots")
    compared = None
    if as_is is not None:
        drawn = write_comparison_plot(
            {"as is (k = 1)": output / "train-as-is", rescaling.describe(): run.output}, output / "compare.png"
        )
        compared = None if drawn is None else str(final_path(drawn))
    summary = {
        "backbone": str(backbone),
        "data": str(data),
        "eval_data": str(eval_data),
        "split": split,
        "recommended_k": report.recommended_k,
        "k": rescaling.k,
        "mode": rescaling.mode,
        "steps": steps,
        "model": str(final_path(run.model)),
        "plots": str(plots),
        "plot_files": [str(plots / path.name) for path in sorted((run.output / "plots").glob("*.png"))],
        "before": before.to_dict(),
        "after": after.to_dict(),
        **({} if as_is is None else {"as_is": as_is.to_dict(), "compare_plot": compared}),
    }
    with atomic_file(output / "summary.json") as stream:
        stream.write(json.dumps(summary, indent=2, default=str) + "\n")
    with atomic_file(output / "summary.md") as stream:
        stream.write(
            f"# spladekit quickstart: {backbone}, trained on {final_path(triplets)}, evaluated on "
            f"{collection.name} ({split})\n\n{table}\n\n"
            f"Training curves: `{summary['plots']}`. Model: `{summary['model']}` (see its README.md).\n"
        )
    return summary | {"table": table}


def _metrics_line(result: EvaluationResult) -> str:
    metrics = ", ".join(f"{name} {result.metrics[name]:.4f}" for name in result.measures)
    efficiency = result.efficiency
    return f"{metrics}; {efficiency['avg_d_nnz']:.0f} terms per document, {efficiency['avg_q_nnz']:.0f} per query"
