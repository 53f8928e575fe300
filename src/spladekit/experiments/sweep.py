"""A grid of SPLADE trainings: backbones × k × rescale mode, one shared recipe, then evaluation.

Sweep file (YAML)::

    name: mini-repro
    recipe: {...}                 # a `spladekit train` config (every key but backbone and rescale)
    backbones:
      - {name: tiny, id: ../shared/models/splade-tiny-msmarco}
      - {name: tiny-x8, id: ../shared/models/splade-tiny-msmarco, inflate: 8}   # head × 8 (simulated)
    k: [1, 4, 16, auto]          # default grid; a backbone may set its own `k:` / `modes:`
    modes: [tied, untie]          # or auto: spladekit.model.rescaling picks per k (head.recommend_mode)
    seeds: [0, 1, 2]              # optional: every run once per seed (default: the recipe's seed, once)
    baselines: [untouched, bm25]  # default: both; [] for none
    evaluation: {data: [../shared/data/scifact, dl19], split: test, max_length: 256}

Layout of ``OUTPUT``: ``plan.json``; ``backbones/<name>/`` (simulated inflated-head variants) and
``backbones/<name>.diagnose.json`` (initial head report); ``runs/<backbone>__k<k>__<mode>/`` holding the
training output (``model/``, ``metrics.jsonl``, ``config.yaml``, ``plots/``, ``checkpoints/``),
``evaluation.json`` and ``run.json`` (``status: done`` once finished). Re-running skips finished runs
and resumes interrupted ones from their last checkpoint. k = 1 means "no rescaling", so it is run once
per backbone (mode ``none``). With ``seeds``, run names end in ``__s<seed>`` and the recipe's ``seed`` is
set per run. ``baselines/<backbone>__untouched/`` (the backbone as it is, before any training) and
``baselines/bm25/`` hold ``evaluation.json`` (per-query values included) and ``run.json`` on the same data,
for the report's baseline rows and paired tests (:mod:`spladekit.experiments.stats`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path

from spladekit.common.atomic import OutputBusy, build_once
from spladekit.common.devices import resolve_device
from spladekit.common.errors import SpladekitError
from spladekit.data.training import load_training_set
from spladekit.evaluation.evaluate import evaluate_data
from spladekit.evaluation.result import EvaluationResult
from spladekit.experiments.inflate import inflate
from spladekit.experiments.sweep_config import (
    BackboneSpec,
    Cell,
    SweepConfig,
    SweepEvaluation,
    baseline_plan,
    check_only,
    load_sweep,  # noqa: F401  (also imported from here by registered scripts: docs/results/*/untrained.py)
    plan,
    run_values,
)
from spladekit.experiments.sweep_records import (
    BASELINES_DIR,
    EVALUATION_FILE,
    PLAN_FILE,
    RUN_FILE,
    read_head_report,
    read_run_record,
    write_json,
)
from spladekit.model.backbone import remote_code_hint
from spladekit.model.diagnosis import diagnose
from spladekit.model.encoder import SparseEncoder
from spladekit.model.loading import RetrievalModel, load_model
from spladekit.training.checkpoint import checkpoints
from spladekit.training.config import config_from_dict
from spladekit.training.loop import train
from spladekit.vectors.encoding import ShardSelection

log = logging.getLogger("spladekit")


def prepare_backbone(spec: BackboneSpec, output: Path, sweep: SweepConfig) -> tuple[str, dict]:
    """The folder/id to train from (an inflated variant is built once) and its initial head report, diagnosed on
    what ``rescale.k: auto`` diagnoses in training (:func:`spladekit.training.setup.initial_encoder`): the first
    ``rescale.auto_pairs`` training pairs of this backbone's recipe at its ``doc_max_length``, mode ``auto``; so
    the report's ``auto_k`` is the k an ``auto`` cell trains with (it diagnosed the 12 built-in pairs before)."""
    folder = output / "backbones" / spec.name
    report_path = output / "backbones" / f"{spec.name}.diagnose.json"
    path = spec.id
    if spec.inflate is not None:
        factor = spec.inflate

        def build(staging: Path) -> None:
            encoder = SparseEncoder.from_pretrained(spec.id, trust_remote_code=spec.trust_remote_code)
            inflate(encoder.model, factor, spec.inflate_mode)
            encoder.save(staging)

        # sweep workers (--shard, --devices) whose cells share the variant: one builds it, the others wait
        build_once(folder, lambda target: (target / "config.json").is_file(), build, f"backbone {spec.name}")
        path = str(folder)
    if not report_path.is_file():
        recipe = config_from_dict(run_values(sweep, spec, Cell(spec.name, "auto", "auto"), path), "sweep recipe")
        pairs = load_training_set(recipe.data).pairs(recipe.rescale.auto_pairs)
        # with the recipe's head options: the vectors training diagnoses for auto-k
        encoder = SparseEncoder.from_pretrained(path, trust_remote_code=spec.trust_remote_code, head=recipe.head)
        report = diagnose(encoder, pairs, max_length=recipe.data.doc_max_length, mode="auto").to_dict() | {
            "inflate": spec.inflate,
            "inflate_mode": spec.inflate_mode,
            "source": spec.id,
        }
        while not report_path.is_file():
            try:
                write_json(report_path, report)
            except OutputBusy:  # another worker is writing the same report: its copy is used once written
                time.sleep(1)
    return path, read_head_report(report_path)


def evaluate_model(
    model: str | Path, sweep: SweepConfig, trust_remote_code: bool, device: str = "auto"
) -> dict[str, EvaluationResult]:
    """A model (folder or hub id) on every evaluation dataset or suite of the sweep, keyed by its name, encoded
    on ``device`` (:func:`spladekit.common.devices.resolve_device`; the cell's training device)."""
    encoder = load_model(model, trust_remote_code=trust_remote_code, device=device)  # either kind (model.kind)
    return evaluate_encoder(encoder, sweep.evaluation)


def evaluate_encoder(
    encoder: RetrievalModel, evaluation: SweepEvaluation, cache: bool = True
) -> dict[str, EvaluationResult]:
    """A model in memory on every evaluation dataset or suite of a sweep's ``evaluation``, keyed by its name (what
    each cell's trained model gets; the results pages' ``untrained.py`` scripts evaluate starting points with it)."""
    results = {}
    for data in evaluation.data:
        result = evaluate_data(
            encoder,
            data,
            split=evaluation.split,
            data_root=evaluation.data_root,
            max_length=evaluation.max_length,
            batch_size=evaluation.batch_size,
            cache=cache,
            show_progress=False,
        )
        results[result.name] = result
    return results


# backbones/<name>.diagnose.json: the numbers a run record copies from it.


def run_cell(cell: Cell, sweep: SweepConfig, output: Path, device: str = "auto") -> dict:
    """Train (or resume) and evaluate one cell on ``device``; ``run.json`` says ``done`` only when all of it
    finished."""
    with remote_code_hint(f"set trust_remote_code: true on backbone {cell.backbone!r} in the sweep file"):
        return _run_cell(cell, sweep, output, device)


def _run_cell(cell: Cell, sweep: SweepConfig, output: Path, device: str) -> dict:
    spec = next(spec for spec in sweep.backbones if spec.name == cell.backbone)
    run_dir = output / "runs" / cell.name
    record_path = run_dir / RUN_FILE
    previous = read_run_record(record_path) if record_path.is_file() else {}
    if previous.get("status") == "done":
        log.info("%s: finished earlier, skipped", cell.name)
        return previous
    path, initial = prepare_backbone(spec, output, sweep)
    config = config_from_dict(run_values(sweep, spec, cell, path), f"{cell.name} (sweep recipe)")
    record = {
        "run": cell.name,
        "backbone": cell.backbone,
        "backbone_id": spec.id,
        "inflate": spec.inflate,
        "inflate_mode": spec.inflate_mode,
        "set": spec.set,
        "k": cell.k,
        "mode": cell.mode,
        "status": "training",
        "initial_head_norm": initial["frobenius_norm"],
        "auto_k": initial["recommended_k"],
        "initial_median_pair_score": initial["median_pair_score"],
        "seed": config.seed,
    }
    began = time.perf_counter()
    if not (run_dir / "model" / "config.json").is_file():
        resume = bool(checkpoints(run_dir)) if run_dir.is_dir() else False
        train(config, run_dir, resume=resume, overwrite=not resume, device=device)
    write_json(record_path, record | {"status": "evaluating"})
    results = evaluate_model(run_dir / "model", sweep, spec.trust_remote_code, device)
    write_json(run_dir / EVALUATION_FILE, {name: result.to_dict() for name, result in results.items()})
    record |= {"status": "done", "seconds": round(time.perf_counter() - began, 1)}
    write_json(record_path, record)
    return record


def run_sweep(
    sweep: SweepConfig,
    output: str | Path,
    only: list[str] | None = None,
    device: str = "auto",
    shard: ShardSelection = ShardSelection(),
) -> list[dict]:
    """Run every cell (or those whose name contains one of ``only``), skipping finished ones; each cell trains
    and is evaluated on ``device``, and so are the baselines. ``shard`` (``--shard I/N``, Slurm job arrays):
    only the cells and baselines whose position in the plan is I modulo N, so N workers share a grid with no
    coordinator (a cell's training folder is locked: two workers never run one cell)."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    grid = plan(sweep)
    check_only(sweep, only)
    # plan.json is the whole grid and its baselines, so a report can tell missing runs from runs never planned.
    baselines = [name for name, _ in baseline_plan(sweep)]
    write_json(
        output / PLAN_FILE,
        {"name": sweep.name, "sweep": asdict(sweep), "runs": [c.name for c in grid], "baselines": baselines},
    )

    def wanted(position: int, name: str) -> bool:
        return shard.mine(position) and (not only or any(part in name for part in only))

    cells = [cell for position, cell in enumerate(grid) if wanted(position, cell.name)]
    records = []
    for index, cell in enumerate(cells, start=1):
        log.info("[%d/%d] %s", index, len(cells), cell.name)
        records.append(run_cell(cell, sweep, output, device))
    for position, (name, spec) in enumerate(baseline_plan(sweep), start=len(grid)):
        if wanted(position, name):
            log.info("baseline %s", name)
            run_baseline(name, spec, sweep, output, device)
    return records


def run_on_devices(config: Path, output: Path, devices: list[str], only: list[str] | None = None) -> list[Path]:
    """``sweep --devices``: one ``spladekit sweep --shard I/N --device D`` process per device, side by side
    (each cell's training and evaluation on its worker's device); each worker's output goes to
    ``OUTPUT/workers/worker-I.log``. A worker that fails is an error naming its log, once all have ended."""
    import subprocess
    import sys

    for device in devices:
        resolve_device(device)  # before any worker starts
    logs = output / "workers"
    logs.mkdir(parents=True, exist_ok=True)
    workers = []
    for index, device in enumerate(devices):
        command = [sys.executable, "-m", "spladekit", "sweep", str(config), "--output", str(output)]
        command += ["--shard", f"{index}/{len(devices)}", "--device", device]
        command += [item for part in only or [] for item in ("--only", part)]
        path = logs / f"worker-{index}.log"
        with path.open("w") as stream:
            workers.append((path, subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT)))
    failed = [path for path, process in workers if process.wait() != 0]
    if failed:
        raise SpladekitError(
            f"{len(failed)} of {len(workers)} sweep workers failed; see {', '.join(map(str, failed))} "
            "(finished cells are kept: rerun the same command to resume)"
        )
    return [path for path, _ in workers]


def run_baseline(name: str, spec: BackboneSpec | None, sweep: SweepConfig, output: Path, device: str = "auto") -> dict:
    """Evaluate one baseline into ``baselines/<name>/`` (skipped when done): the backbone as training starts
    from it (an inflated variant included), or BM25."""
    from spladekit.evaluation.baselines import evaluate_bm25_data

    folder = output / BASELINES_DIR / name
    record_path = folder / RUN_FILE
    if record_path.is_file() and read_run_record(record_path).get("status") == "done":
        return read_run_record(record_path)
    evaluation = sweep.evaluation
    if spec is None:
        results = {}
        for data in evaluation.data:
            result = evaluate_bm25_data(data, split=evaluation.split, data_root=evaluation.data_root)
            results[result.name] = result
        record = {"run": name, "backbone": "bm25", "baseline": "bm25", "k": 1.0, "mode": "none"}
    else:
        with remote_code_hint(f"set trust_remote_code: true on backbone {spec.name!r} in the sweep file"):
            path, initial = prepare_backbone(spec, output, sweep)
            results = evaluate_model(path, sweep, spec.trust_remote_code, device)
        record = {
            "run": name,
            "backbone": spec.name,
            "backbone_id": spec.id,
            "baseline": "untouched",
            "inflate": spec.inflate,
            "inflate_mode": spec.inflate_mode,
            "k": 1.0,
            "mode": "none",
            "initial_head_norm": initial["frobenius_norm"],
            "auto_k": initial["recommended_k"],
        }
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / EVALUATION_FILE, {key: result.to_dict() for key, result in results.items()})
    record["status"] = "done"
    write_json(record_path, record)
    return record
