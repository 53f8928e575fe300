"""Everything a training run does before its first step: the output folder (new, overwritten or resumed), the
initial encoder with its head rescaled once (``rescale.k/mode: auto`` resolved here and recorded in
``config.yaml``), the step-0 head warnings, and AdamW's parameter groups."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, cast

import numpy as np
import torch

from spladekit.common.atomic import atomic_file, check_new_output, mark_output
from spladekit.common.errors import SpladekitError
from spladekit.common.lines import read_json
from spladekit.data.training import TrainingSet
from spladekit.model.diagnosis import HeadReport, diagnose, step0_warnings
from spladekit.model.encoder import SparseEncoder, check_pooling
from spladekit.model.inference_free import InferenceFreeEncoder, document_encoder, idf_weights
from spladekit.model.loading import RetrievalModel
from spladekit.model.packing import packable
from spladekit.model.rescaling import RescaleRecord, apply_rescale, resolve_rescale, step_factors
from spladekit.training.checkpoint import checkpoints
from spladekit.training.config import OptimizationConfig, TrainConfig, load_config, save_config

logger = logging.getLogger("spladekit")

CONFIG_FILE = "config.yaml"
INITIAL_HEAD_FILE = "initial_head.json"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def initial_encoder(config: TrainConfig, training_set: TrainingSet) -> tuple[RetrievalModel, RescaleRecord]:
    """Load the backbone and rescale its head once, with ``rescale.k/mode`` resolved by
    :func:`spladekit.model.rescaling.resolve_rescale` (``k: auto`` diagnoses the first ``rescale.auto_pairs``
    (query, positive) pairs of the training data). ``model.kind: inference-free`` adds the query weight
    table, initialised from the IDF of the training set's documents
    (:func:`spladekit.model.inference_free.idf_weights`)."""
    backbone, setting = config.backbone, config.rescale
    encoder = SparseEncoder.from_pretrained(backbone.id, trust_remote_code=backbone.trust_remote_code, head=config.head)
    record = resolve_rescale(
        encoder,
        setting.k,
        setting.mode,
        setting.rescale_bias,
        pairs=training_set.pairs(setting.auto_pairs),
        max_length=config.data.doc_max_length,
    )
    encoder = apply_rescale(encoder, record)
    if config.model.kind == "splade":
        return encoder, record
    rows = training_set.document_rows()
    weights = idf_weights(
        encoder.tokenizer,
        training_set.document_texts(rows),
        encoder.vocab_size,
        show_progress=config.logging.progress,
        total=len(rows),
        token_map=None if encoder.fold is None else encoder.fold.token_map,
    )
    return InferenceFreeEncoder(
        encoder,
        weights,
        query_max_length=config.data.query_max_length,
        freeze_query_weights=config.model.freeze_query_weights,
        query_weights_origin=f"IDF of the {len(rows)} training documents of {config.data.path}",
    ), record


def check_pooling_on(opt: OptimizationConfig, device: torch.device) -> None:
    """``optimization.pooling`` refused in one line where it cannot run on ``device`` (``triton`` without CUDA or the
    triton package); :func:`spladekit.training.loop.start` asks before it reads the data."""
    try:
        check_pooling(opt.pooling, device)
    except SpladekitError as error:
        raise SpladekitError(f"optimization.pooling: {error}") from None


def prepare_backbone(encoder: RetrievalModel, opt: OptimizationConfig, device: torch.device) -> None:
    """What ``optimization`` changes in the backbone before training, checked before any work:

    * ``pooling`` — the head's implementation (already checked against ``device`` by :func:`check_pooling_on`,
      which :func:`spladekit.training.loop.start` runs before it reads the data);

    * ``activation_checkpointing: N`` — every N-th layer recomputed in the backward (transformers'
      ``activation_checkpointing_enable``, non-reentrant ``torch.utils.checkpoint``, which replays the layer's
      dropout masks from the saved RNG state, so the gradients are those of the run without it); a backbone that
      cannot is a :class:`SpladekitError` naming it;
    * ``packing`` on a backbone that cannot pack (:func:`spladekit.model.packing.packable`): one warning, as it
      trains on padded batches."""
    document_encoder(encoder).pooling = opt.pooling
    if opt.activation_checkpointing:
        try:
            encoder.model.activation_checkpointing_enable(every_n_layers=opt.activation_checkpointing)
        except ValueError as error:
            raise SpladekitError(f"optimization.activation_checkpointing: {error}") from None
    if opt.packing and not packable(encoder.model):
        config = encoder.model.config
        logger.warning(
            "optimization.packing: %s (%s attention) cannot pack; training runs padded batches",
            config.model_type,
            config._attn_implementation,
        )


def initial_head_report(
    encoder: SparseEncoder, config: TrainConfig, training_set: TrainingSet, rescaling: RescaleRecord
) -> HeadReport:
    """Diagnose the head training starts from (after rescaling) on the training pairs, and log
    :func:`spladekit.model.diagnosis.step0_warnings` for it."""
    report = diagnose(encoder, training_set.pairs(config.rescale.auto_pairs), config.data.doc_max_length)
    for warning in step0_warnings(report, embeddings_warned=rescaling.mode == "tied"):
        logger.warning("step 0: %s", warning)
    return report


def write_initial_head(output: Path, report: HeadReport) -> None:
    """``initial_head.json``: the step-0 head report, for the model card of this run (and of a resumed one)."""
    with atomic_file(output / INITIAL_HEAD_FILE) as stream:
        stream.write(json.dumps(report.to_dict(), indent=2) + "\n")


def read_initial_head(output: Path) -> HeadReport | None:
    """The step-0 head report a run recorded (None for a run started before it was recorded)."""
    path = output / INITIAL_HEAD_FILE
    if not path.is_file():
        return None
    return HeadReport.from_dict(read_json(path, dict), path)


def resolved_config(config: TrainConfig, record: RescaleRecord) -> TrainConfig:
    """A copy of ``config`` with ``rescale.k/mode`` as applied (the input is never modified)."""
    # record.mode is tied or untie unless "none" (resolve_rescale checked it)
    mode = config.rescale.mode if record.mode == "none" else cast(Literal["tied", "untie"], record.mode)
    return dataclasses.replace(config, rescale=dataclasses.replace(config.rescale, k=record.k, mode=mode))


@dataclasses.dataclass(frozen=True)
class Resumed:
    """Where a resumed run goes on from: its newest checkpoint and the config it started with (read once)."""

    checkpoint: Path
    config: TrainConfig


def prepare_output(output: Path, config: TrainConfig, resume: bool, overwrite: bool) -> Resumed | None:
    """Check the output folder (nothing is deleted here: with ``overwrite`` an existing run is set aside
    later, see :func:`train`); for ``resume`` the newest checkpoint and the saved config (it must match)."""
    if not resume:
        check_new_output(output, overwrite, folder=True)
        return None
    if not (output / CONFIG_FILE).is_file():
        raise SpladekitError(f"{output}: nothing to resume (no {CONFIG_FILE}); start without --resume")
    saved = load_config(output / CONFIG_FILE)
    requested = config.to_dict()
    for key in ("k", "mode"):  # an "auto" value was resolved once, at the start of the run
        if requested["rescale"][key] == "auto":
            requested["rescale"][key] = getattr(saved.rescale, key)
    differ = _changed_keys(saved.to_dict(), requested)
    if differ:
        raise SpladekitError(
            f"{output}: cannot resume with a different configuration ({', '.join(differ)} changed); "
            f"only logging.* may change"
        )
    found = checkpoints(output)
    if not found:
        raise SpladekitError(f"{output}: nothing to resume (no checkpoint yet); start again with --overwrite")
    return Resumed(found[-1], saved)


def write_run_config(output: Path, config: TrainConfig, record: RescaleRecord) -> None:
    """The fully resolved config (the run's first file); resolved ``rescale.k/mode: auto`` values are noted at the
    top. The run's folder is created here, marked as spladekit's (a later ``--overwrite`` may replace it)."""
    output.mkdir(parents=True, exist_ok=True)
    mark_output(output)
    note = "".join(
        f"# rescale.{key} was 'auto': resolved to {getattr(config.rescale, key)} (spladekit.model.rescaling)\n"
        for key in record.auto
    )
    save_config(config, output / CONFIG_FILE, header=note)


def _changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    changed = []
    for key in old.keys() | new.keys():
        if isinstance(old.get(key), dict):
            changed += _changed_keys(old[key], new.get(key, {}), f"{prefix}{key}.")
        elif old.get(key) != new.get(key) and f"{prefix}{key}".split(".")[0] != "logging":
            changed.append(prefix + key)
    return sorted(changed)


def lr_factors(encoder: RetrievalModel, config: TrainConfig, record: RescaleRecord) -> dict[torch.nn.Parameter, float]:
    """``rescale.lr_scale``: the learning-rate factors of what the rescaling divided (none when it is off)."""
    return step_factors(encoder.model, record) if config.rescale.lr_scale else {}


def parameter_groups(
    encoder: RetrievalModel,
    optimization: OptimizationConfig,
    query_weights_lr: float | None = None,
    factors: Mapping[torch.nn.Parameter, float] | None = None,
) -> list[dict]:
    """AdamW parameter groups: weight decay on weight matrices, none on biases and LayerNorm weights
    (every 1-D parameter; the BERT / transformers Trainer convention). The input embedding matrix —
    the vocabulary projection itself when the head is tied — is decayed only with ``decay_embeddings``
    (``optimization.decay_embeddings``, recorded in config.yaml): decay pulls the head norm down
    during training, which interacts with the head rescaling under study. An inference-free model's
    trainable query weight table is a third group: its own learning rate ``query_weights_lr``, no decay.

    ``factors`` (``rescale.lr_scale``: :func:`spladekit.model.rescaling.step_factors`): a parameter listed there
    gets a group of its own at ``lr × factor`` with its decay ÷ factor, so AdamW's decoupled shrink
    ``lr · decay`` per step is unchanged."""
    embeddings = encoder.model.get_input_embeddings().weight
    table = encoder.query_weights if isinstance(encoder, InferenceFreeEncoder) else None
    factors, weight_decay = factors or {}, optimization.weight_decay
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    scaled: list[dict] = []
    for parameter in encoder.parameters():
        if not parameter.requires_grad or parameter is table:
            continue
        exempt = parameter.ndim < 2 or (parameter is embeddings and not optimization.decay_embeddings)
        if parameter in factors:
            factor = factors[parameter]
            decayed = 0.0 if exempt else weight_decay / factor
            scaled.append({"params": [parameter], "weight_decay": decayed, "lr": optimization.lr * factor})
        else:
            (no_decay if exempt else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}, *scaled]
    if table is not None and table.requires_grad:
        groups.append(
            {"params": [table], "weight_decay": 0.0, **({} if query_weights_lr is None else {"lr": query_weights_lr})}
        )
    return groups
