"""Training configuration: one YAML file, ``--set section.key=value`` overrides, a dataclass schema.

Every key is checked against the schema: a key that does not exist is an error naming the closest
existing key (``difflib``), a value of the wrong type or outside its choices is an error naming the key.
Allowed ranges are declared once, next to each field (``allowed(default, minimum=…)``, see
:mod:`spladekit.common.schema`), and every number must be finite; they are checked key by key while the file
is read (:func:`build_dataclass`, which sweep files use too) and again by :func:`validate` for configs
built in Python, before any work.
The fully resolved configuration (defaults filled in, ``rescale.k/mode: auto`` replaced by the value it
resolved to) is saved with the run as ``config.yaml``.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

import yaml

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.schema import MAX_SEED, MIN_TOKEN_LIMIT, allowed, check_declared, check_value, type_options
from spladekit.data.training import DataConfig


@dataclass
class BackboneConfig:
    id: str = ""  # hub id or local folder of a masked-LM model (or a spladekit model)
    trust_remote_code: bool = False
    dropout: bool = True  # False: run the backbone in eval mode (deterministic forward passes)


@dataclass
class ModelConfig:
    kind: Literal["splade", "inference-free"] = (
        "splade"  # inference-free: queries = a per-token weight table (IDF init)
    )
    query_weights_lr: float = allowed(1e-3, minimum=0, exclusive=True)  # inference-free: the table's learning rate
    freeze_query_weights: bool = False  # inference-free: keep the IDF table as initialised


@dataclass
class RescaleConfig:
    k: float | Literal["auto"] | None = None  # None: no rescaling; "auto": diagnosis.diagnose's recommended_k
    mode: Literal["tied", "untie", "auto"] = "tied"  # "auto": head.recommend_mode for the k used
    rescale_bias: bool = False
    auto_pairs: int = allowed(64, minimum=1)  # training (query, positive) pairs that "auto" diagnoses the head on
    # AdamW: what the rescaling divided by k learns at lr / k (decay × k), the same step relative to each weight
    # as before rescaling (spladekit.model.rescaling.step_factors; docs/training.md)
    lr_scale: bool = False


@dataclass
class LossConfig:
    name: Literal["infonce", "margin_mse", "kl"] = "infonce"


@dataclass
class RegularizerConfig:
    name: Literal["flops", "l1"] = "flops"
    lambda_q: float = allowed(3e-4, minimum=0)
    lambda_d: float = allowed(1e-4, minimum=0)
    warmup_steps: int = allowed(100, minimum=0)  # T in λ_t = λ·min(1, t/T)²


@dataclass
class OptimizationConfig:
    steps: int = allowed(1000, minimum=1)
    batch_size: int = allowed(8, minimum=1)  # queries per optimizer step, over all micro-batches and all processes
    accumulation: int = allowed(1, minimum=1)  # micro-batches per step (exact: see train/loop.py)
    lr: float = allowed(2e-5, minimum=0, exclusive=True)
    weight_decay: float = allowed(
        0.01, minimum=0
    )  # AdamW decay of weight matrices (never of biases / LayerNorm weights)
    decay_embeddings: bool = True  # also decay the input embeddings (= the head when tied)
    warmup_steps: int = allowed(100, minimum=0)
    max_grad_norm: float | None = allowed(1.0, minimum=0, exclusive=True)  # None: no clipping
    bf16: bool = False
    # each side of a (micro-)batch cut by token length into at most this many forward passes, each padded only to
    # its own longest text (SparseEncoder.forward_texts): less compute on padding, the same vectors; 1: one pass
    length_groups: int = allowed(1, minimum=1)


@dataclass
class LoggingConfig:
    every: int = allowed(10, minimum=1)
    checkpoint_every: int = allowed(100, minimum=1)
    keep_checkpoints: int = allowed(2, minimum=1)
    progress: bool = True
    plots: bool = True
    stop_on_collapse: bool = False
    collapse_patience: int = allowed(5, minimum=1)  # consecutive logs before a collapse is declared
    explosion_factor: float = allowed(
        10.0, minimum=1, exclusive=True
    )  # loss > factor × its lowest logged value = explosion


@dataclass
class EvaluationConfig:
    data: str | None = None  # collection folder, ir_datasets / HF id or suite (as `spladekit evaluate --data`)
    split: str = "test"
    every: int | None = allowed(None, minimum=1)  # also evaluate every N steps (None: only at the end)
    max_length: int | None = allowed(None, minimum=MIN_TOKEN_LIMIT)  # token limit (None: data.doc_max_length)
    batch_size: int = allowed(32, minimum=1)
    max_active_dims: int | None = allowed(None, minimum=1)  # keep the k largest weights per query/document (None: all)


@dataclass
class TrainConfig:
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rescale: RescaleConfig = field(default_factory=RescaleConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    regularizer: RegularizerConfig = field(default_factory=RegularizerConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    seed: int = allowed(0, minimum=0, maximum=MAX_SEED)

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
    close = difflib.get_close_matches(
        key, _all_keys(TrainConfig) if candidates is None else candidates, n=1, cutoff=0.5
    )
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return InputError(f"unknown config key {key!r}{hint}", source)


def _coerce(value: Any, hint: Any, key: str, source: str | None) -> Any:
    """``value`` as the type ``hint`` allows (YAML gives '5e-5' as a string: floats are parsed)."""
    choices: list = []
    for option in type_options(hint):
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
    names = [
        getattr(option, "__name__", str(option))
        for option in type_options(hint)
        if typing.get_origin(option) is not Literal
    ]
    expected = " or ".join([repr(c) for c in choices] + [n.replace("NoneType", "null") for n in names])
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    hint_text = f" (did you mean {close[0]!r}?)" if close else ""
    raise InputError(f"config key {key!r}: expected {expected}, got {value!r}{hint_text}", source)


def build_dataclass(cls: Any, values: dict, prefix: str, source: str | None) -> Any:
    """``cls`` from a mapping read from YAML: unknown keys, types and declared ranges checked, key by key."""
    if not isinstance(values, dict):
        raise InputError(
            f"config section {prefix.rstrip('.') or '(top level)'!r} must be a mapping, "
            f"got {type(values).__name__} {values!r:.60}",
            source,
        )
    hints = typing.get_type_hints(cls)
    fields = {item.name: item for item in dataclasses.fields(cls)}
    for key in values:
        if key not in fields:
            raise _unknown_key(prefix + str(key), source, [prefix + name for name in _all_keys(cls)])
    kwargs = {}
    for name, value in values.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = build_dataclass(hint, {} if value is None else value, f"{prefix}{name}.", source)
        else:
            kwargs[name] = _coerce(value, hint, prefix + name, source)
            check_value(kwargs[name], fields[name], hint, prefix + name, source)
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
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as error:
        problem = " ".join(str(getattr(error, "problem", None) or error).split())
        raise SpladekitError(f"{where} {assignment!r}: the value is not valid YAML ({problem})") from None
    *sections, leaf = key.split(".")
    target = values
    for section in sections:
        if not isinstance(target.get(section), dict):
            target[section] = {}
        target = target[section]
    target[leaf] = value


def config_from_dict(values: dict, source: str | None = None) -> TrainConfig:
    config = build_dataclass(TrainConfig, values, "", source)
    validate(config, source)
    return config


def read_yaml(path: Path, what: str = "file") -> Any:
    """Parse a YAML file (an empty one is ``{}``); a syntax error names the file and line."""
    if not path.is_file():
        raise InputError(f"no such {what}", path)
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
        return {} if values is None else values
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise InputError(
            f"not valid YAML: {getattr(error, 'problem', error)}", path, None if mark is None else mark.line + 1
        ) from None


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read ``path`` (YAML), apply ``--set`` overrides, check everything against the schema."""
    values: dict = {}
    source = None
    if path is not None:
        path = Path(path)
        source = str(path)
        values = read_yaml(path, "config file")
        if not isinstance(values, dict):
            kind = {"list": "a list", "bool": "a boolean", "str": "a string"}.get(type(values).__name__, "a number")
            raise InputError(
                f"a training config is a mapping of sections (backbone:, data:, optimization: …); "
                f"this file holds {kind}",
                source,
            )
    for assignment in overrides:
        apply_override(values, assignment)
    return config_from_dict(values, source)


def save_config(config: TrainConfig, path: Path, header: str = "") -> None:
    with atomic_file(path) as stream:
        stream.write(header + yaml.safe_dump(config.to_dict(), sort_keys=False))


def validate(config: TrainConfig, source: str | None = None) -> None:
    """Value ranges and combinations that cannot work together."""
    from spladekit.model.head import parse_k  # lazily: the config schema itself needs no torch

    def fail(message: str) -> NoReturn:
        raise InputError(message, source)

    if not config.backbone.id:
        fail("backbone.id is required (hub id or model folder)")
    if not config.data.path:
        fail("data.path is required")
    check_declared(config, "", source)  # every declared range; every number finite
    if config.rescale.k is not None:
        try:
            parse_k(config.rescale.k, allow_auto=True)  # the one rule for k
        except SpladekitError:
            fail(
                f"config key 'rescale.k': expected a positive finite number or 'auto' or null (no rescaling), "
                f"got {config.rescale.k!r}"
            )
    if config.optimization.batch_size % config.optimization.accumulation:
        fail(
            f"optimization.batch_size ({config.optimization.batch_size}) must be a multiple of "
            f"optimization.accumulation ({config.optimization.accumulation})"
        )
    if config.model.kind == "splade" and config.model.freeze_query_weights:
        fail("model.freeze_query_weights applies to model.kind 'inference-free' (a query weight table)")
    if config.evaluation.data is None and config.evaluation.every is not None:
        fail("evaluation.every is set but evaluation.data is not")
    data, distillation = config.data, config.loss.name != "infonce"
    if distillation and data.teacher is None:
        fail(f"loss.name {config.loss.name!r} distills teacher scores: set data.teacher")
    if not distillation and data.teacher is not None:
        fail(
            "data.teacher is set but loss.name 'infonce' does not use teacher scores "
            "(use 'margin_mse' or 'kl', or remove data.teacher)"
        )
    if data.teacher is not None and data.format in ("triplets", "hf"):
        fail(
            f"data.format {data.format!r} holds texts without ids, so teacher scores (keyed by qid, pid) "
            "cannot be matched; use 'id_triplets', 'hard_negatives' or 'ir_datasets'"
        )
    needs_files = data.format in ("id_triplets", "hard_negatives")
    if needs_files and (data.queries is None or data.collection is None):
        fail(f"data.format {data.format!r} needs data.queries and data.collection")
    if not needs_files and (data.queries is not None or data.collection is not None):
        fail(
            f"data.queries / data.collection are only used with data.format 'id_triplets' or 'hard_negatives', "
            f"not {data.format!r}"
        )
    if data.negative_systems is not None and data.format != "hard_negatives":
        fail("data.negative_systems only applies to data.format 'hard_negatives'")
    if data.teacher_format == "ce_scores" and data.format != "hard_negatives":
        fail("data.teacher_format 'ce_scores' goes with data.format 'hard_negatives'")
