"""The SPLADE training loop, top to bottom.

Objective (Formal et al., "SPLADE v2", arXiv:2109.10086, eq. 4):

    L = L_rank(Q, P, N) + λ_q(t)·R(Q) + λ_d(t)·R(P ∪ N),      λ(t) = λ·min(1, t/T)²

with L_rank one of ``losses.LOSSES`` and R one of ``regularizers.REGULARIZERS``. AdamW, linear LR
warm-up then linear decay to 0, gradient clipping, optional bf16 autocast.

``model.kind: inference-free`` (:mod:`spladekit.model.inference_free`) trains a SPLADE document encoder and a
per-token query weight table instead: Q holds ``w_v`` for the distinct tokens of each query, the table
starts from the IDF of the training documents and has its own learning rate (``model.query_weights_lr``,
sentence-transformers' recipe: 1e-3 for ``SparseStaticEmbedding.weight``, no weight decay). The same
objective applies; with ``λ_q = 0`` (that recipe's ``query_regularizer_weight=0``) only the documents are
regularized.

**The batch is the effective batch, always.** ``optimization.batch_size`` queries per optimizer step,
split into ``accumulation`` micro-batches and over the W processes of a distributed run. In-batch
negatives and the FLOPS mean ``Σ_v (1/N Σ_i |x_iv|)²`` are taken over all of them, so neither the
number of processes nor the accumulation changes the objective:

* across processes, representations are gathered with gradient (``distributed.gather``);
* across micro-batches, the loss is not a sum of per-micro-batch terms (the FLOPS square of a mean is
  not; neither is a softmax over in-batch negatives), so we use cached representations
  (GradCache, Gao et al., arXiv:2101.06983): pass 1 encodes every micro-batch without a graph, the
  full-batch loss is computed on those cached vectors and differentiated with respect to them, and
  pass 2 re-encodes each micro-batch with a graph and back-propagates the cached gradient into the
  model. The forward runs twice (dropout masks are replayed by restoring the RNG state), but memory
  is that of one micro-batch plus the B × V vectors, and the gradient is exactly the full-batch one.
  With ``accumulation: 1`` the single pass is used directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from spladekit.common import distributed
from spladekit.common.atomic import InPlace, check_new_output, open_in_place
from spladekit.common.devices import autocast
from spladekit.common.errors import SpladekitError
from spladekit.data.training import Example, TrainingSet, load_training_set
from spladekit.evaluation.evaluate import evaluate_data
from spladekit.model.backbone import remote_code_hint
from spladekit.model.diagnosis import diagnose, step0_warnings
from spladekit.model.encoder import SparseEncoder, non_finite_weights
from spladekit.model.head import embedding_norms, head_norms
from spladekit.model.inference_free import InferenceFreeEncoder, idf_weights
from spladekit.model.loading import RetrievalModel, load_model
from spladekit.model.rescaling import RescaleRecord, apply_rescale, resolve_rescale
from spladekit.train.checkpoint import (
    checkpoints,
    load_training_state,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from spladekit.train.config import TrainConfig, load_config, save_config, validate
from spladekit.train.losses import LOSSES
from spladekit.train.monitors import (
    EVALUATION_FILE,
    CollapseDetector,
    MetricsLog,
    read_metrics,
    write_plots,
)
from spladekit.train.regularizers import REGULARIZERS, flops, lambda_at

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger("spladekit")

CONFIG_FILE = "config.yaml"


class TrainingStopped(SpladekitError):
    """The run stopped itself (non-finite loss, gradient or weights, or collapse with ``stop_on_collapse``)."""


# ------------------------------------------------------------------------------------------ set-up
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class TrainedRun:
    """What :func:`train` returns: the run folder, the fully resolved config and the applied rescaling."""

    output: Path
    config: TrainConfig
    rescale: RescaleRecord

    @property
    def model(self) -> Path:
        return self.output / "model"


def initial_encoder(config: TrainConfig, training_set: TrainingSet) -> tuple[RetrievalModel, RescaleRecord]:
    """Load the backbone and rescale its head once, with ``rescale.k/mode`` resolved by
    :func:`spladekit.model.rescaling.resolve_rescale` (``k: auto`` diagnoses the first ``rescale.auto_pairs``
    (query, positive) pairs of the training data). ``model.kind: inference-free`` adds the query weight
    table, initialised from the IDF of the training set's documents (:func:`spladekit.model.inference_free.idf_weights`)."""
    backbone, setting = config.backbone, config.rescale
    encoder = SparseEncoder.from_pretrained(backbone.id, trust_remote_code=backbone.trust_remote_code)
    record = resolve_rescale(encoder, setting.k, setting.mode, setting.rescale_bias,
                             pairs=sample_pairs(training_set, setting.auto_pairs), max_length=config.data.doc_max_length)
    encoder = apply_rescale(encoder, record)
    if config.model.kind == "splade":
        return encoder, record
    documents = training_set.document_texts()
    weights = idf_weights(encoder.tokenizer, documents, encoder.vocab_size, show_progress=config.logging.progress)
    return InferenceFreeEncoder(encoder, weights, query_max_length=config.data.query_max_length,
                                freeze_query_weights=config.model.freeze_query_weights,
                                query_weights_origin=f"IDF of the {len(documents)} training documents of "
                                                     f"{config.data.path}"), record


def sample_pairs(training_set: TrainingSet, count: int) -> list[tuple[str, str]]:
    """The first ``count`` (query, positive) text pairs of the training data (auto-k and step-0 checks)."""
    return [(training_set.queries[g.query], training_set.documents[g.positive]) for g in training_set.groups[:count]]


def warn_at_step_zero(encoder: SparseEncoder, config: TrainConfig, training_set: TrainingSet,
                      rescaling: RescaleRecord) -> list[str]:
    """Log :func:`spladekit.model.diagnosis.step0_warnings` for the head training starts from."""
    report = diagnose(encoder, sample_pairs(training_set, config.rescale.auto_pairs), config.data.doc_max_length)
    warnings = step0_warnings(report, embeddings_warned=rescaling.mode == "tied")
    for warning in warnings:
        logger.warning("step 0: %s", warning)
    return warnings


def resolved_config(config: TrainConfig, record: RescaleRecord) -> TrainConfig:
    """A copy of ``config`` with ``rescale.k/mode`` as applied (the input is never modified)."""
    # record.mode is tied or untie unless "none" (resolve_rescale checked it)
    mode = config.rescale.mode if record.mode == "none" else cast(Literal["tied", "untie"], record.mode)
    return dataclasses.replace(config, rescale=dataclasses.replace(config.rescale, k=record.k, mode=mode))


def prepare_output(output: Path, config: TrainConfig, resume: bool, overwrite: bool) -> Path | None:
    """Check the output folder (nothing is deleted here: with ``overwrite`` an existing run is set aside
    later, see :func:`train`); for ``resume`` return the newest checkpoint (the config must match)."""
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
        raise SpladekitError(f"{output}: cannot resume with a different configuration ({', '.join(differ)} changed); "
                             f"only logging.* may change")
    found = checkpoints(output)
    if not found:
        raise SpladekitError(f"{output}: nothing to resume (no checkpoint yet); start again with --overwrite")
    return found[-1]


def write_run_config(output: Path, config: TrainConfig, record: RescaleRecord) -> None:
    """The fully resolved config; resolved ``rescale.k/mode: auto`` values are noted at the top."""
    output.mkdir(parents=True, exist_ok=True)
    note = "".join(f"# rescale.{key} was 'auto': resolved to {getattr(config.rescale, key)} (spladekit.model.rescaling)\n"
                   for key in record.auto)
    save_config(config, output / CONFIG_FILE, header=note)


def _changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    changed = []
    for key in old.keys() | new.keys():
        if isinstance(old.get(key), dict):
            changed += _changed_keys(old[key], new.get(key, {}), f"{prefix}{key}.")
        elif old.get(key) != new.get(key) and f"{prefix}{key}".split(".")[0] != "logging":
            changed.append(prefix + key)
    return sorted(changed)


def parameter_groups(encoder: RetrievalModel, weight_decay: float, decay_embeddings: bool,
                     query_weights_lr: float | None = None) -> list[dict]:
    """AdamW parameter groups: weight decay on weight matrices, none on biases and LayerNorm weights
    (every 1-D parameter; the BERT / transformers Trainer convention). The input embedding matrix —
    the vocabulary projection itself when the head is tied — is decayed only with ``decay_embeddings``
    (``optimization.decay_embeddings``, recorded in config.yaml): decay pulls the head norm down
    during training, which interacts with the head rescaling under study. An inference-free model's
    trainable query weight table is a third group: its own learning rate ``query_weights_lr``, no decay."""
    embeddings = encoder.model.get_input_embeddings().weight
    table = encoder.query_weights if isinstance(encoder, InferenceFreeEncoder) else None
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for parameter in encoder.parameters():
        if not parameter.requires_grad or parameter is table:
            continue
        exempt = parameter.ndim < 2 or (parameter is embeddings and not decay_embeddings)
        (no_decay if exempt else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if table is not None and table.requires_grad:
        groups.append({"params": [table], "weight_decay": 0.0, **({} if query_weights_lr is None
                                                                   else {"lr": query_weights_lr})})
    return groups


# ------------------------------------------------------------------------------------------ one step
def encode_examples(encoder: RetrievalModel, examples: list[Example], config: TrainConfig,
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Q: b × V, P: b × V, N: b × K × V) for a (micro-)batch; documents of different lengths are capped apart.
    An inference-free model's queries are its weight table rows, not a forward pass."""
    texts = [e.query for e in examples]
    with autocast(device, config.optimization.bf16):
        if isinstance(encoder, InferenceFreeEncoder):
            queries = encoder.query_forward(texts, config.data.query_max_length)
        else:
            queries = encoder(encoder.tokenize(texts, config.data.query_max_length))
        documents = [e.positive for e in examples] + [doc for e in examples for doc in e.negatives]
        docs = encoder(encoder.tokenize(documents, config.data.doc_max_length))
    b = len(examples)
    return queries.float(), docs[:b].float(), docs[b:].float().view(b, config.data.negatives, -1)


def objective(q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, teacher: torch.Tensor | None,
              lambdas: tuple[float, float], config: TrainConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """Total loss (a tensor) and its parts (floats) on the full batch."""
    ranking = LOSSES[config.loss.name](q, p, n, teacher)
    docs = torch.cat([p, n.flatten(0, 1)])
    regularize = REGULARIZERS[config.regularizer.name]
    reg_q, reg_d = regularize(q), regularize(docs)
    total = ranking + lambdas[0] * reg_q + lambdas[1] * reg_d
    with torch.no_grad():
        parts = {"ranking_loss": ranking, "reg_q": reg_q, "reg_d": reg_d, "flops_q": flops(q), "flops_d": flops(docs),
                 "q_nnz": (q > 0).sum(dim=1).float().mean(), "d_nnz": (docs > 0).sum(dim=1).float().mean(),
                 **collapse_signals(q, p, n, docs)}
    values = {name: float(value.detach()) for name, value in parts.items()}
    # InfoNCE over B in-batch positives + K own negatives, all scores equal: -log(1 / (B + K))
    return total, values | ({"uniform_loss": math.log(q.shape[0] + n.shape[1])} if config.loss.name == "infonce" else {})


def collapse_signals(q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, docs: torch.Tensor) -> dict[str, torch.Tensor]:
    """What a uniform collapse looks like (see ``monitors.CollapseDetector``): the spread of each query's
    in-batch candidate scores, and how alike the documents' vectors are (mean cosine of distinct pairs)."""
    scores = torch.cat([q @ p.T, torch.einsum("bv,bkv->bk", q, n)], dim=1)
    unit = torch.nn.functional.normalize(docs, dim=1)
    pairs = docs.shape[0] * (docs.shape[0] - 1)
    similarity = ((unit @ unit.T).sum() - (unit * unit).sum()) / max(pairs, 1)
    return {"score_spread": scores.std(dim=1).mean(), "doc_similarity": similarity}


def forward_backward(encoder: RetrievalModel, micro_batches: list[list[Example]], teacher: torch.Tensor | None,
                     lambdas: tuple[float, float], config: TrainConfig,
                     processes: distributed.Processes) -> tuple[float, dict[str, float]]:
    """Gradients of the full-batch objective (see the module docstring); returns (loss, parts)."""
    device = processes.device

    def full_batch_loss(reps_per_micro: Sequence[Sequence[torch.Tensor]]) -> tuple[torch.Tensor, dict[str, float]]:
        full = [torch.cat([distributed.gather(reps[i], processes) for reps in reps_per_micro]) for i in range(3)]
        return objective(full[0], full[1], full[2], teacher, lambdas, config)

    if len(micro_batches) == 1:
        total, parts = full_batch_loss([encode_examples(encoder, micro_batches[0], config, device)])
        total.backward()
        return float(total.detach()), parts
    states: list[dict] = []
    cached: list[list[torch.Tensor]] = []
    for micro in micro_batches:  # pass 1: vectors of every micro-batch, no graph
        states.append(rng_state())
        with torch.no_grad():
            vectors = encode_examples(encoder, micro, config, device)
        cached.append([x.detach().requires_grad_() for x in vectors])
    total, parts = full_batch_loss(cached)
    total.backward()  # d loss / d cached vectors
    for micro, state, reps in zip(micro_batches, states, cached):  # pass 2: into the model
        set_rng_state(state)
        torch.autograd.backward(encode_examples(encoder, micro, config, device), [x.grad for x in reps])
    return float(total.detach()), parts


def weight_norms(model: PreTrainedModel) -> dict[str, float | None]:
    """What rescaling moved, tracked over training: the head's Frobenius and mean row norm, its bias mean and
    spread, and the word / position embedding norms (:func:`spladekit.model.head.embedding_norms`)."""
    head = head_norms(model)
    return {"head_norm": head["frobenius_norm"], "head_mean_row_norm": head["mean_row_norm"],
            "bias_mean": head["bias_mean"], "bias_std": head["bias_std"], **embedding_norms(model)}


def _last_good(output: Path) -> str:
    """Where to restart from: the newest checkpoint (checkpoints are verified finite when written)."""
    last = checkpoints(output)
    return f"Last good checkpoint: {last[-1] if last else 'none (no checkpoint written yet)'}"


def split_batch(examples: list[Example], accumulation: int, processes: distributed.Processes) -> list[list[Example]]:
    """This process's share of each micro-batch: micro-batch j, rank r gets a contiguous slice, so the
    gathered order (micro-batch, then rank) is the order of the examples."""
    micro = len(examples) // accumulation
    share = micro // processes.world_size
    return [examples[j * micro + processes.rank * share: j * micro + (processes.rank + 1) * share]
            for j in range(accumulation)]


def run_evaluation(encoder: RetrievalModel, config: TrainConfig, step: int, log: MetricsLog) -> None:
    """Evaluate the model as it is now with ``spladekit.evaluation.evaluate`` and log the results."""
    setting = config.evaluation
    # called only when evaluation.data is set
    result = evaluate_data(encoder, cast(str, setting.data), split=setting.split, batch_size=setting.batch_size,
                           max_length=setting.max_length or config.data.doc_max_length,
                           max_active_dims=setting.max_active_dims, cache=False,
                           show_progress=False)
    log.write({"step": step, **result.to_dict()})
    logger.info("step %d: evaluation on %s: %s", step, setting.data,
                ", ".join(f"{measure} {value:.4f}" for measure, value in result.metrics.items()))


def teacher_scores(examples: list[Example], device: torch.device) -> torch.Tensor | None:
    if examples[0].teacher is None:
        return None
    return torch.tensor([e.teacher for e in examples], dtype=torch.float32, device=device)


# ------------------------------------------------------------------------------------------ the loop
def train(config: TrainConfig, output: str | Path, resume: bool = False, overwrite: bool = False,
          device: str | None = "auto") -> TrainedRun:
    """Train a SPLADE model into ``output`` (``model/``, ``metrics.jsonl``, ``config.yaml``, ``plots/``,
    ``checkpoints/``); ``config`` is not modified, the resolved one is returned. Run under ``torchrun``
    for several processes. ``device``: see :func:`spladekit.common.devices.resolve_device` (``auto``: each
    process's GPU when CUDA is available, else the CPU).

    ``output`` is locked for the whole run (:func:`spladekit.common.atomic.open_in_place`): a second ``train``
    into it fails at once. With ``overwrite``, an existing run is left untouched until the config, the
    training data and the backbone are loaded; it is then moved aside, deleted when the new run
    completes, and put back (the new run's files discarded) if the new run fails."""
    validate(config)  # declared ranges, finite numbers, combinations: also for a config built in Python
    processes = distributed.setup(device)
    output = Path(output)
    try:
        with contextlib.ExitStack() as stack:
            place = stack.enter_context(open_in_place(output)) if processes.main else None
            stack.enter_context(remote_code_hint("set backbone.trust_remote_code: true in the training config"))
            try:
                return _train(config, output, resume, overwrite, processes, place)
            except BaseException as error:
                if place is not None and place.put_back:
                    note = (f"this run's files are discarded and the previous run in {output} is put back "
                            "(--overwrite replaces a run only when the new one completes)")
                    if isinstance(error, TrainingStopped):
                        raise TrainingStopped(f"{error}; {note}") from None
                    logger.warning("training failed: %s", note)
                raise
    finally:
        distributed.teardown(processes)


def _train(config: TrainConfig, output: Path, resume: bool, overwrite: bool,
           processes: distributed.Processes, place: InPlace | None = None) -> TrainedRun:
    opt, log = config.optimization, config.logging
    if opt.batch_size % (opt.accumulation * processes.world_size):
        raise SpladekitError(f"optimization.batch_size ({opt.batch_size}) must be a multiple of accumulation × "
                             f"processes ({opt.accumulation} × {processes.world_size})")
    checkpoint = prepare_output(output, config, resume, overwrite) if processes.main else None
    distributed.barrier(processes)
    if not processes.main and resume:
        checkpoint = checkpoints(output)[-1]
    seed_everything(config.seed)
    training_set = load_training_set(config.data)
    if checkpoint is None:
        encoder, rescaling = initial_encoder(config, training_set)
        config = resolved_config(config, rescaling)
        if processes.main:
            head = encoder.document_encoder if isinstance(encoder, InferenceFreeEncoder) else encoder
            warn_at_step_zero(head, config, training_set, rescaling)
        if processes.main:
            if overwrite and place is not None:
                place.set_aside()  # only now: the config, the data and the backbone are good
            write_run_config(output, config, rescaling)
    else:
        encoder = load_model(checkpoint / "model", trust_remote_code=config.backbone.trust_remote_code)
        if isinstance(encoder, InferenceFreeEncoder):
            encoder.query_weights.requires_grad_(not config.model.freeze_query_weights)
        saved = load_config(output / CONFIG_FILE).rescale  # "auto" was resolved when the run started
        config = dataclasses.replace(config, rescale=saved)
        rescaling = (RescaleRecord(None, "none") if saved.k is None
                     else RescaleRecord(float(saved.k), saved.mode, saved.rescale_bias))
    encoder.to(processes.device).train(config.backbone.dropout)
    parameters = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameter_groups(encoder, opt.weight_decay, opt.decay_embeddings,
                                                   config.model.query_weights_lr), lr=opt.lr)
    scheduler = get_linear_schedule_with_warmup(optimizer, opt.warmup_steps, opt.steps)
    start = 0 if checkpoint is None else load_training_state(checkpoint, optimizer, scheduler)
    metrics = MetricsLog(output, resume_step=start) if processes.main else None
    evaluate_every = config.evaluation.every if config.evaluation.data else None
    evaluations = MetricsLog(output, start, EVALUATION_FILE) if processes.main and config.evaluation.data else None
    collapse = CollapseDetector(encoder.vocab_size, log.collapse_patience, log.explosion_factor)
    for logged in read_metrics(output) if start else []:  # a resumed run's detector picks up where it stopped
        if logged["step"] <= start:
            collapse.update(logged)
    progress = tqdm(total=opt.steps, initial=start, desc="training", unit="step",
                    disable=not (processes.main and log.progress))
    regularizer = config.regularizer
    try:
        for step in range(start + 1, opt.steps + 1):
            began = time.perf_counter()
            examples = training_set.batch(step, opt.batch_size, config.data.negatives, config.seed)
            lambdas = (lambda_at(step, regularizer.lambda_q, regularizer.warmup_steps),
                       lambda_at(step, regularizer.lambda_d, regularizer.warmup_steps))
            loss, parts = forward_backward(encoder, split_batch(examples, opt.accumulation, processes),
                                           teacher_scores(examples, processes.device), lambdas, config, processes)
            distributed.average_gradients(parameters, processes)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(parameters, opt.max_grad_norm or math.inf))
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                raise TrainingStopped(f"non-finite {'loss' if not math.isfinite(loss) else 'gradient'} at step {step}; "
                                      f"the model was not updated. {_last_good(output)}")
            lr = scheduler.get_last_lr()[0]
            try:
                optimizer.step()
            except RuntimeError as error:  # AdamW's step size (lr / bias correction) beyond float range
                if "overflow" not in str(error):
                    raise
                raise TrainingStopped(f"the update of step {step} overflowed ({error}; learning rate {lr:g}); "
                                      f"nothing was saved. {_last_good(output)}") from None
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            damaged = non_finite_weights(encoder)  # a finite gradient can still give NaN/inf weights (huge lr)
            if damaged:
                raise TrainingStopped(f"non-finite weights after the update of step {step} ({', '.join(damaged[:3])}"
                                      f"{' …' if len(damaged) > 3 else ''}); nothing was saved. {_last_good(output)}")
            progress.update(1)
            progress.set_postfix(loss=f"{loss:.4f}", q_nnz=f"{parts['q_nnz']:.0f}", d_nnz=f"{parts['d_nnz']:.0f}")
            if step % log.every == 0 or step == opt.steps:
                record = {"step": step, "loss": loss, **parts, "lambda_q": lambdas[0], "lambda_d": lambdas[1],
                          **weight_norms(encoder.model), "grad_norm": grad_norm, "lr": lr,
                          "examples_per_s": opt.batch_size / (time.perf_counter() - began)}
                found = collapse.update(record)
                if metrics is not None:
                    metrics.write(record | ({"collapse": found[0]} if found else {}))
                if found:
                    logger.warning("COLLAPSE at step %d: %s", step, found[1])
                    if log.stop_on_collapse:
                        raise TrainingStopped(f"stopped on collapse at step {step}: {found[1]}. {_last_good(output)}")
            if step % log.checkpoint_every == 0 and step < opt.steps:
                if processes.main:
                    save_checkpoint(output, step, encoder, optimizer, scheduler, log.keep_checkpoints)
                distributed.barrier(processes)
            if evaluations is not None and (step == opt.steps or (evaluate_every and step % evaluate_every == 0)):
                run_evaluation(encoder, config, step, evaluations)
        if processes.main:
            encoder.save(output / "model")
    finally:
        progress.close()
        if evaluations is not None:
            evaluations.close()
        if metrics is not None:
            metrics.close()
            if log.plots:
                write_plots(output)
    distributed.barrier(processes)
    return TrainedRun(output, config, rescaling)
