"""Training configuration: one YAML file, ``--set section.key=value`` overrides, a dataclass schema.

Every key is declared once, with its type, default, allowed values and help (``declared(default, help,
minimum=…)``, :mod:`spladekit.common.schema`): ``spladekit keys train`` and docs/configuration.md list them.
A key that does not exist is an error naming the closest existing key, a value of the wrong type or outside
its allowed values is an error naming the key; keys are checked one by one while the file is read
(:func:`spladekit.common.schema.build_dataclass`, which sweep files use too) and again by :func:`validate` for
configs built in Python, which also refuses combinations that cannot work together, before any work.
The fully resolved configuration (defaults filled in, ``rescale.k/mode: auto`` replaced by the value it
resolved to) is saved with the run as ``config.yaml``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

import yaml

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.schema import (
    MAX_SEED,
    MIN_TOKEN_LIMIT,
    all_keys,
    build_dataclass,
    check_declared,
    declared,
    unknown_key,
)
from spladekit.data.training import DataConfig
from spladekit.model.head_options import HeadOptions


@dataclass
class BackboneConfig:
    id: str = declared("", "hub id or local folder of a masked-LM model (or a spladekit model); required")
    trust_remote_code: bool = declared(False, "run the model's own code from the hub (only for backbones you trust)")
    dropout: bool = declared(True, "false: run the backbone in eval mode (deterministic forward passes)")


@dataclass
class ModelConfig:
    kind: Literal["splade", "inference-free"] = declared(
        "splade", "inference-free: queries are a per-token weight table (IDF init), documents the encoder"
    )
    query_weights_lr: float = declared(
        1e-3, "inference-free: the query table's learning rate", minimum=0, exclusive=True
    )
    freeze_query_weights: bool = declared(False, "inference-free: keep the IDF table as initialised")


@dataclass
class RescaleConfig:
    k: float | Literal["auto"] | None = declared(
        None,
        "W_head <- W_head / k once at init; null: no rescaling; auto: diagnose's recommended_k",
        minimum=0,
        exclusive=True,
    )
    mode: Literal["tied", "untie", "auto"] = declared(
        "tied", "tied: scale the shared matrix (inputs too); untie: only a copy of the head; auto: the mode rule"
    )
    rescale_bias: bool = declared(False, "divide the head bias by k too")
    auto_pairs: int = declared(64, "training (query, positive) pairs that k/mode auto diagnose the head on", minimum=1)
    lr_scale: bool = declared(
        False, "AdamW: what the rescaling divided by k learns at lr / k (decay x k), the same relative step"
    )


@dataclass
class LossConfig:
    name: Literal["infonce", "margin_mse", "kl"] = declared(
        "infonce", "infonce: in-batch and hard negatives; margin_mse / kl: distil data.teacher's scores"
    )


@dataclass
class RegularizerConfig:
    name: Literal["flops", "l1", "df_flops"] = declared(
        "flops",
        "the sparsity regularizer (FLOPS: squared mean weight per term; df_flops: FLOPS weighted per term by the "
        "fraction of the batch's documents holding it, arXiv 2505.15070)",
    )
    df_alpha: float = declared(
        0.1,
        "df_flops: the document-frequency fraction at which a term gets half its full penalty",
        minimum=0,
        exclusive=True,
        maximum=0.999,
    )
    df_beta: float = declared(2.0, "df_flops: the steepness of the penalty around df_alpha", minimum=0, exclusive=True)
    lambda_q: float = declared(3e-4, "the regularizer's weight on queries", minimum=0)
    lambda_d: float = declared(1e-4, "the regularizer's weight on documents", minimum=0)
    warmup_steps: int = declared(100, "T in lambda_t = lambda * min(1, t/T)^2", minimum=0)


@dataclass
class OptimizationConfig:
    steps: int = declared(1000, "optimizer steps", minimum=1)
    batch_size: int = declared(8, "queries per optimizer step, over all micro-batches and all processes", minimum=1)
    accumulation: int = declared(1, "micro-batches per step (exact GradCache: the same step as one batch)", minimum=1)
    lr: float = declared(
        2e-5, "AdamW's peak learning rate (linear warmup, then linear decay)", minimum=0, exclusive=True
    )
    weight_decay: float = declared(
        0.01, "AdamW decay of weight matrices (never of biases / LayerNorm weights)", minimum=0
    )
    decay_embeddings: bool = declared(True, "also decay the input embeddings (= the head when tied)")
    warmup_steps: int = declared(100, "steps of linear learning-rate warmup", minimum=0)
    max_grad_norm: float | None = declared(
        1.0, "clip the gradient norm to this (null: no clipping)", minimum=0, exclusive=True
    )
    precision: Literal["auto", "fp32", "bf16", "int8"] = declared(
        "fp32",
        "the forward's arithmetic: fp32, bf16 (autocast, the head's matmul in bf16 too; the weights and optimizer stay "
        "fp32) or auto (fp32 on every device until a precision passes the parity test: "
        "spladekit.common.devices.auto_precision); int8 is "
        "for encoding only and refused here",
    )
    bf16: bool = declared(False, "deprecated spelling of precision: bf16 (still accepted)")
    length_groups: int = declared(
        1,
        "cut each side of a batch by token length into at most this many forward passes, each padded to its "
        "own longest text: less compute on padding, the same vectors",
        minimum=1,
    )
    packing: bool = declared(
        False,
        "pack each side's texts end to end into rows as long as its longest text (per-text positions, a "
        "block-diagonal attention mask): no compute on padding in the backbone, the same vectors; BERT, "
        "DistilBERT, ALBERT, ELECTRA, RoBERTa and ModernBERT families (others stay padded)",
    )
    pooling: Literal["auto", "fused", "fused-adaptive", "fused-bf16", "triton", "naive"] = declared(
        "auto",
        "the SPLADE head (spladekit.model.encoder.POOLINGS; the same vectors and gradients): auto (fused-bf16 on CPUs "
        "with native bf16 matmuls, else fused), fused (sparse backward), fused-adaptive (dense GEMMs for a vocabulary "
        "block's backward where its pairs are dense), triton (CUDA kernels), fused-bf16 (a bf16 screen of the terms, "
        "fp32 recompute), naive",
    )
    compile: bool = declared(
        False,
        "torch.compile the backbone (dynamic shapes; the first steps compile), the same model (speed: "
        "docs/benchmarks.md)",
    )
    activation_checkpointing: int = declared(
        0,
        "recompute the activations of every N-th backbone layer in the backward instead of keeping them "
        "(transformers' activation checkpointing; 0: off, 1: every layer): less memory for more compute, the same "
        "gradients; needs backbone.dropout true",
        minimum=0,
    )


@dataclass
class LoggingConfig:
    every: int = declared(10, "log (progress, metrics.jsonl, collapse check) every N steps", minimum=1)
    checkpoint_every: int = declared(100, "save a resumable checkpoint every N steps", minimum=1)
    keep_checkpoints: int = declared(2, "newest checkpoints kept", minimum=1)
    progress: bool = declared(True, "show a progress bar")
    plots: bool = declared(True, "write plots/*.png at the end")
    stop_on_collapse: bool = declared(False, "stop (exit 2) when the collapse detector fires, instead of warning")
    collapse_patience: int = declared(5, "consecutive logs before a collapse is declared", minimum=1)
    explosion_factor: float = declared(
        10.0, "a loss above factor x its lowest logged value is an explosion", minimum=1, exclusive=True
    )


@dataclass
class EvaluationConfig:
    data: str | None = declared(
        None, "evaluate the trained model on: a collection folder, ir_datasets / HF id or suite (null: none)"
    )
    split: str = declared("test", "the qrels split")
    every: int | None = declared(None, "also evaluate every N steps (null: only at the end)", minimum=1)
    max_length: int | None = declared(None, "document token limit (null: data.doc_max_length)", minimum=MIN_TOKEN_LIMIT)
    batch_size: int = declared(32, "texts per encoding batch", minimum=1)
    max_active_dims: int | None = declared(None, "keep the k largest weights per query/document (null: all)", minimum=1)


@dataclass
class TrainConfig:
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rescale: RescaleConfig = field(default_factory=RescaleConfig)
    head: HeadOptions = field(default_factory=HeadOptions)
    data: DataConfig = field(default_factory=DataConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    regularizer: RegularizerConfig = field(default_factory=RegularizerConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    seed: int = declared(0, "seeds the initialisation, the data order and dropout", minimum=0, maximum=MAX_SEED)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def apply_override(values: dict, assignment: str, where: str = "--set") -> None:
    """Apply one ``section.key=value`` (value parsed as YAML) to the nested mapping ``values``.

    ``where`` names the origin in errors (the command-line option, or a sweep file's entry)."""
    key, separator, raw = assignment.partition("=") if isinstance(assignment, str) else ("", "", "")
    if not separator or not key.strip():
        raise SpladekitError(f"{where} {assignment!r}: expected section.key=value")
    key, keys = key.strip(), all_keys(TrainConfig)
    if key not in keys:
        raise unknown_key(key, keys, where)
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


def load_config(path: str | Path | None, overrides: Sequence[str] = (), partial: bool = False) -> TrainConfig:
    """Read ``path`` (YAML), apply ``--set`` overrides, check everything against the schema. ``partial``: a base
    that the caller completes (quickstart sets the backbone and the data) and then checks with :func:`validate`:
    the keys and types are checked now, the required values and ranges then."""
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
    if partial:
        return build_dataclass(TrainConfig, values, "", source)
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
            fail(f"config key 'rescale.k': expected a finite number > 0 or 'auto' or null, got {config.rescale.k!r}")
    if config.optimization.batch_size % config.optimization.accumulation:
        fail(
            f"optimization.batch_size ({config.optimization.batch_size}) must be a multiple of "
            f"optimization.accumulation ({config.optimization.accumulation})"
        )
    if config.optimization.precision == "int8":
        fail(
            "optimization.precision int8 is for encoding only (a dynamically quantized model has no backward): "
            "train in fp32 or bf16, then encode with --precision int8"
        )
    if config.optimization.bf16 and config.optimization.precision not in ("fp32", "bf16"):
        fail(
            f"optimization.bf16 (deprecated: precision bf16) contradicts optimization.precision "
            f"{config.optimization.precision}: set only optimization.precision"
        )
    if config.optimization.packing and config.optimization.length_groups != 1:
        fail(
            f"optimization.packing and optimization.length_groups ({config.optimization.length_groups}) exclude "
            "each other: packing already removes the padding; set length_groups to 1"
        )
    if config.optimization.activation_checkpointing and not config.backbone.dropout:
        fail(
            "optimization.activation_checkpointing needs backbone.dropout: true (transformers recomputes layers "
            "only in training mode, which is what dropout false turns off)"
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
