"""Training configuration: one YAML file, ``--set section.key=value`` overrides, a dataclass schema.

Every key is checked against the schema: a key that does not exist is an error naming the closest
existing key (``difflib``), a value of the wrong type or outside its choices is an error naming the key.
The fully resolved configuration (defaults filled in, ``rescale.k/mode: auto`` replaced by the value it
resolved to) is saved with the run as ``config.yaml``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn, Union

import yaml

from spladekit.errors import InputError, SpladekitError


@dataclass
class BackboneConfig:
    id: str = ""  # hub id or local folder of a masked-LM model (or a spladekit model)
    trust_remote_code: bool = False
    dropout: bool = True  # False: run the backbone in eval mode (deterministic forward passes)


@dataclass
class RescaleConfig:
    k: float | Literal["auto"] | None = None  # None: no rescaling; "auto": diagnosis.diagnose's recommended_k
    mode: Literal["tied", "untie", "auto"] = "tied"  # "auto": head.recommend_mode for the k used
    rescale_bias: bool = False
    auto_pairs: int = 64  # training (query, positive) pairs that "auto" diagnoses the head on


@dataclass
class DataConfig:
    format: Literal["triplets", "id_triplets", "hard_negatives", "ir_datasets", "hf"] = "triplets"
    path: str = ""  # TSV file, hard-negatives JSONL, ir_datasets id or HF dataset name/folder
    queries: str | None = None  # id_triplets / hard_negatives: queries (BEIR JSONL or id<TAB>text TSV)
    collection: str | None = None  # id_triplets / hard_negatives: documents (BEIR JSONL or id<TAB>text TSV)
    header: bool = False  # id_triplets: the first line is a header
    columns: int | None = None  # triplet TSVs: use only the first N columns (query, positive, negatives…)
    negative_systems: list | None = None  # hard_negatives: which systems' negatives (None: all)
    hf_config: str | None = None
    split: str = "train"
    teacher: str | None = None  # teacher scores for distillation
    teacher_format: Literal["jsonl", "ce_scores"] = "jsonl"
    negatives: int = 1  # hard negatives per query
    limit: int | None = None  # read at most this many lines / pairs
    query_max_length: int = 32
    doc_max_length: int = 128


@dataclass
class LossConfig:
    name: Literal["infonce", "margin_mse", "kl"] = "infonce"


@dataclass
class RegularizerConfig:
    name: Literal["flops", "l1"] = "flops"
    lambda_q: float = 3e-4
    lambda_d: float = 1e-4
    warmup_steps: int = 100  # T in λ_t = λ·min(1, t/T)²


@dataclass
class OptimizationConfig:
    steps: int = 1000
    batch_size: int = 8  # queries per optimizer step, over all micro-batches and all processes
    accumulation: int = 1  # micro-batches per step (exact: see train/loop.py)
    lr: float = 2e-5
    weight_decay: float = 0.01  # AdamW decay of weight matrices (never of biases / LayerNorm weights)
    decay_embeddings: bool = True  # also decay the input embeddings (= the head when tied)
    warmup_steps: int = 100
    max_grad_norm: float | None = 1.0  # None: no clipping
    bf16: bool = False


@dataclass
class LoggingConfig:
    every: int = 10
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    progress: bool = True
    plots: bool = True
    stop_on_collapse: bool = False
    collapse_patience: int = 5  # consecutive logs before a collapse is declared
    explosion_factor: float = 10.0  # loss > factor × its lowest logged value = explosion


@dataclass
class EvaluationConfig:
    data: str | None = None  # collection folder, ir_datasets / HF id or suite (as `spladekit evaluate --data`)
    split: str = "test"
    every: int | None = None  # also evaluate every N steps (None: only at the end)
    max_length: int | None = None  # token limit (None: data.doc_max_length)
    batch_size: int = 32


@dataclass
class TrainConfig:
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    rescale: RescaleConfig = field(default_factory=RescaleConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    regularizer: RegularizerConfig = field(default_factory=RegularizerConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    seed: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- building and checking
def _all_keys(cls: Any, prefix: str = "") -> list[str]:
    keys = []
    for item in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[item.name]
        keys.append(prefix + item.name)
        if dataclasses.is_dataclass(hint):
            keys.extend(_all_keys(hint, f"{prefix}{item.name}."))
    return keys


def _unknown_key(key: str, source: str | None, candidates: list[str] | None = None) -> SpladekitError:
    close = difflib.get_close_matches(key, _all_keys(TrainConfig) if candidates is None else candidates, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return InputError(f"unknown config key {key!r}{hint}", source)


def _options(hint: Any) -> tuple:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _coerce(value: Any, hint: Any, key: str, source: str | None) -> Any:
    """``value`` as the type ``hint`` allows (YAML gives '5e-5' as a string: floats are parsed)."""
    choices: list = []
    for option in _options(hint):
        if option is type(None):
            if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "~")):
                return None
        elif typing.get_origin(option) is Literal:
            if value in typing.get_args(option):
                return value
            choices.extend(typing.get_args(option))
        elif option is bool:
            if isinstance(value, bool):
                return value
        elif option is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif option is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
        elif option in (str, list) and isinstance(value, option):
            return value
    names = [getattr(option, "__name__", str(option)) for option in _options(hint) if typing.get_origin(option) is not Literal]
    expected = " or ".join([repr(c) for c in choices] + [n.replace("NoneType", "null") for n in names])
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    hint_text = f" (did you mean {close[0]!r}?)" if close else ""
    raise InputError(f"config key {key!r}: expected {expected}, got {value!r}{hint_text}", source)


def build_dataclass(cls: Any, values: dict, prefix: str, source: str | None) -> Any:
    if not isinstance(values, dict):
        raise InputError(f"config section {prefix.rstrip('.') or '(top level)'!r} must be a mapping", source)
    hints = typing.get_type_hints(cls)
    names = {item.name for item in dataclasses.fields(cls)}
    for key in values:
        if key not in names:
            raise _unknown_key(prefix + str(key), source, [prefix + name for name in _all_keys(cls)])
    kwargs = {}
    for name, value in values.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = build_dataclass(hint, value or {}, f"{prefix}{name}.", source)
        else:
            kwargs[name] = _coerce(value, hint, prefix + name, source)
    return cls(**kwargs)


def apply_override(values: dict, assignment: str, where: str = "--set") -> None:
    """Apply one ``section.key=value`` (value parsed as YAML) to the nested mapping ``values``.

    ``where`` names the origin in errors (the command-line option, or a sweep file's entry)."""
    key, separator, raw = assignment.partition("=") if isinstance(assignment, str) else ("", "", "")
    if not separator or not key.strip():
        raise SpladekitError(f"{where} {assignment!r}: expected section.key=value")
    key = key.strip()
    if key not in _all_keys(TrainConfig):
        raise _unknown_key(key, where)
    *sections, leaf = key.split(".")
    target = values
    for section in sections:
        if not isinstance(target.get(section), dict):
            target[section] = {}
        target = target[section]
    target[leaf] = yaml.safe_load(raw) if raw.strip() else None


def config_from_dict(values: dict, source: str | None = None) -> TrainConfig:
    config = build_dataclass(TrainConfig, values, "", source)
    validate(config, source)
    return config


def read_yaml(path: Path, what: str = "file") -> Any:
    """Parse a YAML file; a syntax error names the file and line."""
    if not path.is_file():
        raise InputError(f"no such {what}", path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise InputError(f"not valid YAML: {getattr(error, 'problem', error)}", path,
                         None if mark is None else mark.line + 1) from None


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read ``path`` (YAML), apply ``--set`` overrides, check everything against the schema."""
    values: dict = {}
    source = None
    if path is not None:
        path = Path(path)
        source = str(path)
        values = read_yaml(path, "config file")
    for assignment in overrides:
        apply_override(values, assignment)
    return config_from_dict(values, source)


def save_config(config: TrainConfig, path: Path, header: str = "") -> None:
    from spladekit.atomic import atomic_file

    with atomic_file(path) as stream:
        stream.write(header + yaml.safe_dump(config.to_dict(), sort_keys=False))


def validate(config: TrainConfig, source: str | None = None) -> None:
    """Value ranges and combinations that cannot work together."""
    def fail(message: str) -> NoReturn:
        raise InputError(message, source)

    if not config.backbone.id:
        fail("backbone.id is required (hub id or model folder)")
    if not config.data.path:
        fail("data.path is required")
    k = config.rescale.k
    if isinstance(k, float) and not k > 0:
        fail(f"rescale.k must be positive, 'auto' or null, got {k}")
    positive = {"optimization.steps": config.optimization.steps, "optimization.batch_size": config.optimization.batch_size,
                "optimization.accumulation": config.optimization.accumulation, "data.negatives": config.data.negatives,
                "logging.every": config.logging.every, "logging.checkpoint_every": config.logging.checkpoint_every,
                "logging.keep_checkpoints": config.logging.keep_checkpoints,
                "logging.collapse_patience": config.logging.collapse_patience,
                "data.query_max_length": config.data.query_max_length, "data.doc_max_length": config.data.doc_max_length,
                "rescale.auto_pairs": config.rescale.auto_pairs}
    for key, value in positive.items():
        if value < 1:
            fail(f"{key} must be >= 1, got {value}")
    if config.optimization.batch_size % config.optimization.accumulation:
        fail(f"optimization.batch_size ({config.optimization.batch_size}) must be a multiple of "
             f"optimization.accumulation ({config.optimization.accumulation})")
    for key in ("every", "max_length"):
        value = getattr(config.evaluation, key)
        if value is not None and value < 1:
            fail(f"evaluation.{key} must be >= 1 or null, got {value}")
    if config.data.columns is not None and config.data.columns < 3:
        fail(f"data.columns must be >= 3 (query, positive, negative…), got {config.data.columns}")
    if config.evaluation.data is None and config.evaluation.every is not None:
        fail("evaluation.every is set but evaluation.data is not")
    if config.optimization.lr <= 0:
        fail("optimization.lr must be positive")
    for key in ("lambda_q", "lambda_d"):
        if getattr(config.regularizer, key) < 0:
            fail(f"regularizer.{key} must be >= 0")
    if config.regularizer.warmup_steps < 0 or config.optimization.warmup_steps < 0:
        fail("warm-up steps must be >= 0")
    data, distillation = config.data, config.loss.name != "infonce"
    if distillation and data.teacher is None:
        fail(f"loss.name {config.loss.name!r} distills teacher scores: set data.teacher")
    if not distillation and data.teacher is not None:
        fail("data.teacher is set but loss.name 'infonce' does not use teacher scores "
             "(use 'margin_mse' or 'kl', or remove data.teacher)")
    if data.teacher is not None and data.format in ("triplets", "hf"):
        fail(f"data.format {data.format!r} holds texts without ids, so teacher scores (keyed by qid, pid) "
             "cannot be matched; use 'id_triplets', 'hard_negatives' or 'ir_datasets'")
    needs_files = data.format in ("id_triplets", "hard_negatives")
    if needs_files and (data.queries is None or data.collection is None):
        fail(f"data.format {data.format!r} needs data.queries and data.collection")
    if not needs_files and (data.queries is not None or data.collection is not None):
        fail(f"data.queries / data.collection are only used with data.format 'id_triplets' or 'hard_negatives', "
             f"not {data.format!r}")
    if data.negative_systems is not None and data.format != "hard_negatives":
        fail("data.negative_systems only applies to data.format 'hard_negatives'")
    if data.teacher_format == "ce_scores" and data.format != "hard_negatives":
        fail("data.teacher_format 'ce_scores' goes with data.format 'hard_negatives'")
