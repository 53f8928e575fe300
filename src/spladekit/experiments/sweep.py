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

import copy
import json
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

from spladekit.common.atomic import OutputBusy, atomic_file, build_once
from spladekit.common.devices import resolve_device
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import expect, read_json
from spladekit.common.schema import MAX_SEED, MIN_TOKEN_LIMIT, build_dataclass, declared
from spladekit.common.sources import is_local, is_local_model
from spladekit.data.suites import SUITES
from spladekit.data.training import load_training_set
from spladekit.evaluation.evaluate import evaluate_data
from spladekit.evaluation.result import EvaluationResult
from spladekit.experiments.inflate import inflate
from spladekit.model.backbone import MLMHead, check_model_folder, remote_code_hint
from spladekit.model.diagnosis import diagnose
from spladekit.model.encoder import SparseEncoder
from spladekit.model.loading import load_model
from spladekit.training.checkpoint import checkpoints
from spladekit.training.config import apply_override, config_from_dict, read_yaml
from spladekit.training.loop import train
from spladekit.vectors.encoding import ShardSelection

log = logging.getLogger("spladekit")

RUN_FILE = "run.json"
BASELINES = ("untouched", "bm25")
BASELINES_DIR = "baselines"
EVALUATION_FILE = "evaluation.json"
PLAN_FILE = "plan.json"
# A backbone name becomes a folder (backbones/<name>/) and part of run names (<name>__k<k>__<mode>).
SAFE_NAME = r"(?!\.{1,2}$)(?!.*__)[A-Za-z0-9._-]+"
SAFE_NAME_WORDS = "a name of letters, digits, '.', '_' and '-' (not '.' or '..', no '__')"


@dataclass
class BackboneSpec:
    name: str = declared(
        "", "names the backbone's folder and runs; required", pattern=SAFE_NAME, pattern_words=SAFE_NAME_WORDS
    )
    id: str = declared("", "hub id or local folder; required")
    trust_remote_code: bool = declared(False, "run the model's own code from the hub (only for backbones you trust)")
    inflate: float | None = declared(
        None,
        "simulate a high-norm head: W_head x inflate before training (null: the backbone as it is)",
        minimum=0,
        exclusive=True,
    )
    inflate_mode: Literal["tied", "untie", "transform", "positions"] = declared(
        "tied",
        "what inflate multiplies: the shared matrix (inputs too), a head copy, the MLM transform output (tie kept) "
        "or the position embeddings",
    )
    rescale_bias: bool = declared(False, "divide the head bias by k too (the bias-division ablation)")
    lr_scale: bool = declared(False, "rescale.lr_scale: what the rescaling divided by k learns at lr / k")
    k: list[float | Literal["auto"]] | None = declared(
        None, "this backbone's k grid (null or []: the sweep's)", minimum=0, exclusive=True, unique=True
    )
    modes: list[Literal["tied", "untie", "auto"]] | None = declared(
        None, "this backbone's rescale modes (null or []: the sweep's)", unique=True
    )
    set: list[str] | None = declared(
        None, "recipe overrides for this backbone only, as `spladekit train --set` (e.g. one variant per FLOPS lambda)"
    )


@dataclass
class SweepEvaluation:
    data: list[str] = declared([], "collection folders, names or suites (as `spladekit evaluate --data`)")
    split: str = declared("test", "the qrels split")
    max_length: int | None = declared(256, "document token limit (null: the model's)", minimum=MIN_TOKEN_LIMIT)
    batch_size: int = declared(32, "texts per encoding batch", minimum=1)
    data_root: str | None = declared(None, "local folder holding a suite's collections (offline suites)")


@dataclass
class SweepConfig:
    name: str = declared("sweep", "the sweep's name (in plan.json and the report)")
    recipe: dict = declared({}, "the shared `spladekit train` config: every key but backbone and rescale")
    backbones: list = declared([], "backbones to train, each a mapping of the backbones[].* keys; at least one")
    k: list[float | Literal["auto"]] = declared(
        [1.0],
        "the k grid: W_head <- W_head / k (1: no rescaling, run once per backbone; auto: diagnose's recommended_k)",
        minimum=0,
        exclusive=True,
        min_items=1,
        unique=True,
    )
    modes: list[Literal["tied", "untie", "auto"]] = declared(
        ["tied"], "rescale modes (auto: the mode rule, per k)", min_items=1, unique=True
    )
    seeds: list[int] | None = declared(
        None,
        "training seeds, each run once per seed (null: the recipe's seed, once)",
        minimum=0,
        maximum=MAX_SEED,
        min_items=1,
        unique=True,
    )
    baselines: list[Literal["untouched", "bm25"]] = declared(
        list(BASELINES), "rows next to the trained runs: the untrained backbone, BM25", unique=True
    )
    evaluation: SweepEvaluation = field(default_factory=SweepEvaluation)


@dataclass(frozen=True)
class Cell:
    """One training run of the grid."""

    backbone: str
    k: Union[float, str]  # a number or "auto"
    mode: str  # tied | untie | none (k = 1)
    seed: Union[int, None] = None  # None: the recipe's seed (a sweep without `seeds`)

    @property
    def name(self) -> str:
        k = self.k if isinstance(self.k, str) else f"{self.k:g}"
        return f"{self.backbone}__k{k}__{self.mode}" + ("" if self.seed is None else f"__s{self.seed}")


# ------------------------------------------------------------------------------------------- config
def load_sweep(path: str | Path) -> SweepConfig:
    """Read and check a sweep file (unknown keys name the closest existing one)."""
    path = Path(path)
    values = read_yaml(path, "sweep file")
    source = str(path)
    if not isinstance(values, dict) or not isinstance(values.get("recipe", {}), dict):
        raise InputError("a sweep file is a mapping with a 'recipe' mapping (a `spladekit train` config)", source)
    recipe = values.pop("recipe", {}) or {}
    sweep = build_dataclass(SweepConfig, values, "", source)
    sweep.recipe = recipe
    for key in ("backbone", "rescale"):
        if key in sweep.recipe:
            raise InputError(
                f"recipe.{key} is set per run by the sweep; move it to 'backbones' / 'k' / 'modes'", source
            )
    if not sweep.backbones:
        raise InputError("'backbones' must list at least one backbone", source)
    specs = []
    for index, item in enumerate(sweep.backbones):
        spec = build_dataclass(BackboneSpec, item, f"backbones[{index}].", source)
        if not spec.name or not spec.id:
            raise InputError(f"backbones[{index}]: 'name' and 'id' are required", source)
        spec.k, spec.modes = spec.k or None, spec.modes or None
        for assignment in spec.set or []:
            if str(assignment).startswith(("backbone.", "rescale.")):
                raise InputError(
                    f"backbones[{index}].set: {assignment!r}: backbone and rescale are set by the sweep", source
                )
        specs.append(spec)
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise InputError(f"backbone names must be unique, got {names}", source)
    sweep.backbones = specs
    # The recipe (with each backbone's overrides) must be a valid training config once a backbone is filled in.
    for spec in specs:
        config_from_dict(_run_values(sweep, spec, Cell(spec.name, 1.0, "none"), spec.id, source), source)
    return sweep


def plan(sweep: SweepConfig) -> list[Cell]:
    """Every run of the grid, k = 1 once per backbone (no rescaling: the mode does not apply), once per seed."""
    cells: list[Cell] = []
    seeds: list[int | None] = list(sweep.seeds) if sweep.seeds else [None]
    for spec in sweep.backbones:
        for k in spec.k or sweep.k:
            modes = ["none"] if k == 1.0 else (spec.modes or sweep.modes)
            cells.extend(Cell(spec.name, k, mode, seed) for mode in modes for seed in seeds)
    return list(dict.fromkeys(cells))


def _run_values(sweep: SweepConfig, spec: BackboneSpec, cell: Cell, backbone_path: str, source: str = "sweep") -> dict:
    """The training config of one cell: the shared recipe, the backbone's ``set`` overrides, backbone and k."""
    values = copy.deepcopy(sweep.recipe)
    for assignment in spec.set or []:
        apply_override(values, assignment, f"{source}: backbone {spec.name!r} set")
    values["backbone"] = {
        **values.get("backbone", {}),
        "id": backbone_path,
        "trust_remote_code": spec.trust_remote_code,
    }
    rescale: dict[str, object] = {"k": None if cell.k == 1.0 else cell.k}
    if cell.mode != "none":
        rescale |= {"mode": cell.mode, "rescale_bias": spec.rescale_bias, "lr_scale": spec.lr_scale}
    values["rescale"] = rescale
    if cell.seed is not None:
        values["seed"] = cell.seed
    return values


# ------------------------------------------------------------------------------------------- dry run
def hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connection to the Hugging Face endpoint succeeds (seconds, instead of the hub client's retries)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _backbone_check(spec: BackboneSpec, online: bool) -> tuple[str, int | None]:
    """('ok' | 'not checked: …', body parameter count or None) without loading any weights.

    The body count leaves out embedding tables (lookups, no matmul) and the vocabulary projection
    (counted separately by :func:`estimate_step_flops`)."""
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM

    local = is_local_model(spec.id)
    if local:
        check_model_folder(Path(spec.id).expanduser())
    try:
        config = AutoConfig.from_pretrained(
            spec.id, trust_remote_code=spec.trust_remote_code, local_files_only=not (local or online)
        )
    except (OSError, ValueError) as error:
        if local:
            raise SpladekitError(f"{spec.id}: {str(error).splitlines()[0]}") from None
        reason = "hub unreachable, not in the local cache" if not online else str(error).splitlines()[0][:100]
        return f"not checked ({reason})", None
    try:
        with torch.device("meta"):
            model = AutoModelForMaskedLM.from_config(config, trust_remote_code=spec.trust_remote_code)
        not_matmul = {
            id(p) for module in model.modules() if isinstance(module, torch.nn.Embedding) for p in module.parameters()
        } | {id(MLMHead.of(model).weight)}
        return "ok", sum(p.numel() for p in model.parameters() if id(p) not in not_matmul)
    except Exception as error:
        return f"ok (size unknown: {type(error).__name__})", None


def _data_check(sweep: SweepConfig) -> list[str]:
    """Problems with the training data and the evaluation datasets (nothing is downloaded)."""
    problems = []
    data = sweep.recipe.get("data", {})
    fmt, path = data.get("format", "triplets"), data.get("path", "")
    if fmt in ("triplets", "id_triplets", "hard_negatives") and not Path(path).exists():
        problems.append(f"recipe.data.path: {path}: no such file")
    if fmt == "ir_datasets":
        import ir_datasets

        if path not in ir_datasets.registry:
            problems.append(f"recipe.data.path: {path!r} is not an ir_datasets id")
    for item in sweep.evaluation.data:
        item = str(item)
        if item in SUITES:
            root = sweep.evaluation.data_root
            if root is not None and not Path(root).is_dir():
                problems.append(f"evaluation.data_root: {root}: no such folder")
        elif is_local(item):
            if not (Path(item) / "corpus.jsonl").is_file():
                problems.append(f"evaluation.data: {item}: not a BEIR folder (no corpus.jsonl)")
        elif item not in SUITES and "/" not in item:
            problems.append(f"evaluation.data: {item!r} is neither a suite ({', '.join(SUITES)}) nor a folder or id")
    return problems


def _machine_flops_per_second() -> float:
    """Measured fp32 matmul throughput of this machine (one 1024³ product, best of 3)."""
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = math.inf
    for _ in range(3):
        began = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - began)
    return 2 * 1024**3 / best


def estimate_step_flops(parameters: int, vocab: int, hidden: int, recipe: dict) -> float:
    """≈ training FLOPs per step: 6·params·tokens (body without embeddings, forward + backward) +
    2·tokens·H·V (head forward; the fused head's backward is sparse, see pooling.py)."""
    data, opt = recipe.get("data", {}), recipe.get("optimization", {})
    batch = opt.get("batch_size", 8)
    tokens = batch * (
        data.get("query_max_length", 32) + (1 + data.get("negatives", 1)) * data.get("doc_max_length", 128)
    )
    return 6 * parameters * tokens + 2 * tokens * hidden * vocab


def dry_run(sweep: SweepConfig, output: str | Path | None = None) -> dict:
    """Validate everything without training; return the plan with a rough cost estimate."""
    problems = _data_check(sweep)
    checks, estimates = {}, {}
    throughput = _machine_flops_per_second() * 0.25  # training reaches a fraction of peak matmul speed
    online = any(not is_local_model(spec.id) for spec in sweep.backbones) and hub_reachable()
    for spec in sweep.backbones:
        try:
            status, parameters = _backbone_check(spec, online)
        except SpladekitError as error:
            problems.append(str(error))
            continue
        checks[spec.name] = status
        if parameters:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(
                spec.id, trust_remote_code=spec.trust_remote_code, local_files_only=not online
            )
            text = config.get_text_config()
            hidden = int(
                getattr(text, "embedding_size", None)
                or getattr(text, "hidden_size", None)
                or getattr(text, "dim", None)
                or 768
            )
            recipe = _run_values(sweep, spec, Cell(spec.name, 1.0, "none"), spec.id)
            flops = estimate_step_flops(parameters, text.vocab_size, hidden, recipe)
            estimates[spec.name] = recipe.get("optimization", {}).get("steps", 1000) * flops / throughput
    cells = plan(sweep)
    rows: list[dict[str, Any]] = [
        {
            "run": cell.name,
            "backbone": cell.backbone,
            "k": cell.k,
            "mode": cell.mode,
            "backbone_check": checks.get(cell.backbone, "failed"),
            "estimated_train_seconds": None if cell.backbone not in estimates else round(estimates[cell.backbone]),
        }
        for cell in cells
    ]
    known = [row["estimated_train_seconds"] for row in rows if row["estimated_train_seconds"] is not None]
    return {
        "name": sweep.name,
        "runs": rows,
        "problems": problems,
        "estimated_total_train_hours_on_this_machine": round(sum(known) / 3600, 2) if known else None,
        "estimate_covers_runs": f"{len(known)}/{len(rows)}",
        "output": None if output is None else str(output),
    }


# ------------------------------------------------------------------------------------------- running
def _write_json(path: Path, payload: dict) -> None:
    with atomic_file(path) as stream:
        stream.write(json.dumps(payload, indent=2, default=str) + "\n")


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
        recipe = config_from_dict(_run_values(sweep, spec, Cell(spec.name, "auto", "auto"), path), "sweep recipe")
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
                _write_json(report_path, report)
            except OutputBusy:  # another worker is writing the same report: its copy is used once written
                time.sleep(1)
    return path, read_head_report(report_path)


def evaluate_model(
    model: str | Path, sweep: SweepConfig, trust_remote_code: bool, device: str = "auto"
) -> dict[str, EvaluationResult]:
    """A model (folder or hub id) on every evaluation dataset or suite of the sweep, keyed by its name, encoded
    on ``device`` (:func:`spladekit.common.devices.resolve_device`; the cell's training device)."""
    encoder = load_model(model, trust_remote_code=trust_remote_code, device=device)  # either kind (model.kind)
    evaluation = sweep.evaluation
    results = {}
    for data in evaluation.data:
        result = evaluate_data(
            encoder,
            data,
            split=evaluation.split,
            data_root=evaluation.data_root,
            max_length=evaluation.max_length,
            batch_size=evaluation.batch_size,
            show_progress=False,
        )
        results[result.name] = result
    return results


# run.json: the keys a report and a resumed sweep read, with their JSON types (the first five are required).
RUN_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "run": str,
    "backbone": str,
    "k": (float, str),
    "mode": str,
    "status": str,
    "backbone_id": (str, type(None)),
    "inflate": (float, type(None)),
    "inflate_mode": (str, type(None)),
    "set": (list, type(None)),
    "initial_head_norm": (float, type(None)),
    "auto_k": (float, type(None)),
    "initial_median_pair_score": (float, type(None)),
    "seconds": (float, type(None)),
    "seed": (int, type(None)),
    "baseline": (str, type(None)),
}
# backbones/<name>.diagnose.json: the numbers a run record copies from it.
HEAD_REPORT_NUMBERS = ("frobenius_norm", "recommended_k", "median_pair_score")


def read_run_record(path: Path) -> dict:
    """A ``run.json``: a JSON object with ``run``, ``backbone``, ``k`` (a number or ``"auto"``), ``mode`` and
    ``status``, every known value of its type; anything else is an :class:`InputError` naming the file."""
    record = read_json(path, dict)
    for key, kinds in RUN_RECORD_TYPES.items():
        if key in record:
            expect(record[key], kinds, repr(key), path)
        elif key in ("run", "backbone", "k", "mode", "status"):
            raise InputError(f"no {key!r} in the run record", path)
    if isinstance(record["k"], str) and record["k"] != "auto":
        raise InputError(f"'k' must be a number or 'auto', got {record['k']!r}", path)
    for item in record.get("set") or []:
        expect(item, str, "a 'set' entry", path)
    return record


def read_head_report(path: Path) -> dict:
    """A ``backbones/<name>.diagnose.json`` written by an earlier attempt, with the numbers runs copy."""
    report = read_json(path, dict)
    for key in HEAD_REPORT_NUMBERS:
        expect(report.get(key), float, repr(key), path)
    return report


def read_evaluation(run_dir: Path) -> dict[str, EvaluationResult]:
    """A run's ``evaluation.json`` ({name: result}); empty when the run has not been evaluated."""
    path = run_dir / EVALUATION_FILE
    if not path.is_file():
        return {}
    payload = read_json(path, dict)
    return {name: EvaluationResult.from_dict(result, path, f"{name}.") for name, result in payload.items()}


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
    config = config_from_dict(_run_values(sweep, spec, cell, path), f"{cell.name} (sweep recipe)")
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
    _write_json(record_path, record | {"status": "evaluating"})
    results = evaluate_model(run_dir / "model", sweep, spec.trust_remote_code, device)
    _write_json(run_dir / EVALUATION_FILE, {name: result.to_dict() for name, result in results.items()})
    record |= {"status": "done", "seconds": round(time.perf_counter() - began, 1)}
    _write_json(record_path, record)
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
    _write_json(
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


def baseline_plan(sweep: SweepConfig) -> list[tuple[str, BackboneSpec | None]]:
    """(baseline name, its backbone or None for BM25) for every baseline the sweep asks for."""
    backbones = [spec.name for spec in sweep.backbones]
    untouched = dict(zip(baseline_names(["untouched"], backbones), sweep.backbones))
    return [(name, untouched.get(name)) for name in baseline_names(sweep.baselines, backbones)]


def baseline_names(baselines: Iterable[str], backbones: Iterable[str]) -> list[str]:
    """The names (folders under ``baselines/``) of the baselines asked for, in plan order: each backbone untouched,
    then BM25. The report derives them from an older ``plan.json`` that does not list them."""
    asked = set(baselines)
    return [f"{name}__untouched" for name in backbones if "untouched" in asked] + (["bm25"] if "bm25" in asked else [])


def check_only(sweep: SweepConfig, only: list[str] | None) -> None:
    """Each ``--only`` part must be in the name of a planned run or baseline: a misspelt one ran nothing, exit 0."""
    names = [cell.name for cell in plan(sweep)] + [name for name, _ in baseline_plan(sweep)]
    unmatched = [part for part in only or [] if not any(part in name for name in names)]
    if unmatched:
        raise SpladekitError(
            f"--only {', '.join(map(repr, unmatched))} matches no run or baseline of the plan "
            f"({', '.join(names[:4])}{', …' if len(names) > 4 else ''})"
        )


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
    _write_json(folder / EVALUATION_FILE, {key: result.to_dict() for key, result in results.items()})
    record["status"] = "done"
    _write_json(record_path, record)
    return record
