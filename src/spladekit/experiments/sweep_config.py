"""A sweep file: its schema (backbones × k × modes × seeds, one recipe, the evaluation), the plan of runs it gives,
and the training config of each run (:func:`run_values`). A sweep folder's layout:
:mod:`spladekit.experiments.sweep`."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Union

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.schema import MAX_SEED, MIN_TOKEN_LIMIT, build_dataclass, declared
from spladekit.training.config import apply_override, config_from_dict, read_yaml

log = logging.getLogger("spladekit")

BASELINES = ("untouched", "bm25")
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
        config_from_dict(run_values(sweep, spec, Cell(spec.name, 1.0, "none"), spec.id, source), source)
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


def run_values(sweep: SweepConfig, spec: BackboneSpec, cell: Cell, backbone_path: str, source: str = "sweep") -> dict:
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
