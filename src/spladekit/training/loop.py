"""The SPLADE training loop: set-up (:mod:`.setup`), one step (:mod:`.step`), the periodic work, finishing.

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
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from spladekit.common import distributed
from spladekit.common.atomic import InPlace, open_in_place
from spladekit.common.errors import SpladekitError
from spladekit.common.lines import error_reason
from spladekit.data.training import TrainingSet, load_training_set
from spladekit.evaluation.result import EvaluationResult
from spladekit.model.backbone import remote_code_hint
from spladekit.model.diagnosis import HeadReport
from spladekit.model.encoder import non_finite_weights
from spladekit.model.head import embedding_norms, head_norms
from spladekit.model.inference_free import InferenceFreeEncoder, document_encoder
from spladekit.model.loading import RetrievalModel, load_model
from spladekit.model.rescaling import RescaleRecord
from spladekit.training.checkpoint import checkpoints, load_training_state, save_checkpoint
from spladekit.training.config import RegularizerConfig, TrainConfig, load_config, validate
from spladekit.training.monitors import CollapseDetector, MetricsLog, read_metrics, write_plots
from spladekit.training.periodic_evaluation import PeriodicEvaluation
from spladekit.training.regularizers import lambda_at
from spladekit.training.setup import (
    CONFIG_FILE,
    Resumed,
    check_pooling_on,
    initial_encoder,
    initial_head_report,
    lr_factors,
    parameter_groups,
    prepare_backbone,
    prepare_output,
    read_initial_head,
    resolved_config,
    seed_everything,
    write_initial_head,
    write_run_config,
)
from spladekit.training.step import StepResult, StepSettings, forward_backward, split_batch, teacher_scores

logger = logging.getLogger("spladekit")

MODEL_FOLDER = "model"


class TrainingStopped(SpladekitError):
    """The run stopped itself (non-finite loss, gradient or weights, or collapse with ``stop_on_collapse``)."""


@dataclass(frozen=True)
class TrainedRun:
    """What :func:`train` returns: the run folder, the fully resolved config, the applied rescaling and the
    head the training started from (its step-0 diagnosis; None for a run started before it was recorded)."""

    output: Path
    config: TrainConfig
    rescale: RescaleRecord
    initial_head: HeadReport | None = None

    @property
    def model(self) -> Path:
        return self.output / MODEL_FOLDER


@dataclass
class LogWindow:
    """The steps since the last log: their mean loss and throughput go into the next record."""

    steps: int = 0
    loss: float = 0.0
    ranking_loss: float = 0.0
    examples: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def add(self, result: StepResult, examples: int, seconds: float) -> None:
        self.steps += 1
        self.loss += result.loss
        self.ranking_loss += result.parts["ranking_loss"]
        self.examples, self.tokens, self.seconds = (
            self.examples + examples,
            self.tokens + result.tokens,
            self.seconds + seconds,
        )

    def summary(self) -> dict[str, float]:
        """Window means (``loss_mean``, ``ranking_loss_mean``) and rates (``examples_per_s``, ``tokens_per_s``:
        real, non-padding tokens through this process's backbone)."""
        return {
            "loss_mean": self.loss / self.steps,
            "ranking_loss_mean": self.ranking_loss / self.steps,
            "examples_per_s": self.examples / self.seconds,
            "tokens_per_s": self.tokens / self.seconds,
        }


@dataclass
class Training:
    """A run in progress: what set-up built and the steps update."""

    config: TrainConfig
    output: Path
    processes: distributed.Processes
    training_set: TrainingSet
    encoder: RetrievalModel
    rescaling: RescaleRecord
    initial_head: HeadReport | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    start: int
    metrics: MetricsLog | None
    evaluation: PeriodicEvaluation | None
    collapse: CollapseDetector
    progress: tqdm
    parameters: list[torch.nn.Parameter]  # the trainable ones, listed once
    window: LogWindow = field(default_factory=LogWindow)
    last_evaluation: EvaluationResult | None = None  # the card's evaluation: kept, not read back from the log

    def close(self) -> None:
        self.progress.close()
        for log in (None if self.evaluation is None else self.evaluation.log, self.metrics):
            if log is not None:
                log.close()
        if self.metrics is not None and self.config.logging.plots:
            try:
                write_plots(self.output)
            except Exception as error:  # optional output: never the error a run ends with (a full disk)
                logger.warning("plots not written: %s", error_reason(error))


# ------------------------------------------------------------------------------------------ the loop
def train(
    config: TrainConfig, output: str | Path, resume: bool = False, overwrite: bool = False, device: str | None = "auto"
) -> TrainedRun:
    """Train a SPLADE model into ``output`` (``model/`` with its card, ``metrics.jsonl``, ``config.yaml``,
    ``initial_head.json``, ``plots/``, ``checkpoints/``); ``config`` is not modified, the resolved one is
    returned. Run under ``torchrun`` for several processes. ``device``: see
    :func:`spladekit.common.devices.resolve_device` (``auto``: each process's GPU when CUDA is available, else
    the CPU).

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
                    note = (
                        f"this run's files are discarded and the previous run in {output} is put back "
                        "(--overwrite replaces a run only when the new one completes)"
                    )
                    if isinstance(error, TrainingStopped):
                        raise TrainingStopped(f"{error}; {note}") from None
                    logger.warning("training failed: %s", note)
                raise
    finally:
        distributed.teardown(processes)


def _train(
    config: TrainConfig,
    output: Path,
    resume: bool,
    overwrite: bool,
    processes: distributed.Processes,
    place: InPlace | None,
) -> TrainedRun:
    run = start(config, output, resume, overwrite, processes, place)
    opt, settings, device = run.config.optimization, StepSettings.of(run.config, processes.device), processes.device
    step = run.start
    try:
        for step in range(run.start + 1, opt.steps + 1):
            began = time.perf_counter()
            examples = run.training_set.batch(step, opt.batch_size, settings.negatives, run.config.seed)
            lambdas = regularization_weights(step, run.config.regularizer)
            micro_batches = split_batch(examples, opt.accumulation, processes)
            teacher = teacher_scores(examples, device)
            result = forward_backward(run.encoder, micro_batches, teacher, lambdas, settings, processes)
            grad_norm, lr = update(run, step, result.loss)
            run.window.add(result, opt.batch_size, time.perf_counter() - began)
            log_step(run, step, result, lambdas, grad_norm, lr)
            periodic_work(run, step)
        finish(run)
    except (torch.OutOfMemoryError, MemoryError) as error:  # a CUDA allocation, or the host's
        raise TrainingStopped(
            f"out of memory at step {step} ({error_reason(error)}); nothing of this step was saved. "
            f"{_last_good(output)}: rerun with --resume once memory is free, or start again (--overwrite) with "
            "more optimization.accumulation (the same batch, exactly) or a smaller data.*_max_length"
        ) from None
    finally:
        run.close()
    distributed.barrier(processes)
    return TrainedRun(output, run.config, run.rescaling, run.initial_head)


# ------------------------------------------------------------------------------------------ set-up
def start(
    config: TrainConfig,
    output: Path,
    resume: bool,
    overwrite: bool,
    processes: distributed.Processes,
    place: InPlace | None,
) -> Training:
    """Everything before step 1: the output checked, the data read, the encoder built (or loaded from the newest
    checkpoint), the optimizer, schedule, logs and collapse detector (a resumed run's picks up where it stopped)."""
    opt, log = config.optimization, config.logging
    if opt.batch_size % (opt.accumulation * processes.world_size):
        raise SpladekitError(
            f"optimization.batch_size ({opt.batch_size}) must be a multiple of accumulation × "
            f"processes ({opt.accumulation} × {processes.world_size})"
        )
    check_pooling_on(opt, processes.device)
    resumed = prepare_output(output, config, resume, overwrite) if processes.main else None
    distributed.barrier(processes)
    if not processes.main and resume:  # the main process checked the folder and the config
        resumed = Resumed(checkpoints(output)[-1], load_config(output / CONFIG_FILE))
    checkpoint = None if resumed is None else resumed.checkpoint
    seed_everything(config.seed)
    training_set = load_training_set(config.data)
    if resumed is None:
        encoder, rescaling = initial_encoder(config, training_set)
        prepare_backbone(encoder, opt, processes.device)  # refused before anything is set aside
        config = resolved_config(config, rescaling)
        initial_head = None
        if processes.main:
            head = document_encoder(encoder)
            initial_head = initial_head_report(head, config, training_set, rescaling)
            if overwrite and place is not None:
                place.set_aside()  # only now: the config, the data and the backbone are good
            write_run_config(output, config, rescaling)
            write_initial_head(output, initial_head)
    else:
        encoder, config, rescaling = resumed_encoder(resumed, config)
        prepare_backbone(encoder, opt, processes.device)
        initial_head = read_initial_head(output)
    encoder.to(processes.device).train(config.backbone.dropout)
    if opt.compile:  # after the diagnosis, whose no-grad forward would compile a graph of its own
        encoder.compile_backbone()
    optimizer = torch.optim.AdamW(
        parameter_groups(encoder, opt, config.model.query_weights_lr, lr_factors(encoder, config, rescaling)),
        lr=opt.lr,
    )
    scheduler = get_linear_schedule_with_warmup(optimizer, opt.warmup_steps, opt.steps)
    first = 0 if checkpoint is None else load_training_state(checkpoint, optimizer, scheduler)
    evaluated = processes.main and config.evaluation.data
    collapse = CollapseDetector(encoder.vocab_size, log.collapse_patience, log.explosion_factor)
    for logged in read_metrics(output) if first else []:
        if logged["step"] <= first:
            collapse.update(logged)
    return Training(
        config,
        output,
        processes,
        training_set,
        encoder,
        rescaling,
        initial_head,
        optimizer,
        scheduler,
        first,
        metrics=MetricsLog(output, resume_step=first) if processes.main else None,
        evaluation=PeriodicEvaluation.load(config, output, first) if evaluated else None,
        collapse=collapse,
        progress=tqdm(
            total=opt.steps, initial=first, desc="training", unit="step", disable=not (processes.main and log.progress)
        ),
        parameters=[p for p in encoder.parameters() if p.requires_grad],
    )


def resumed_encoder(resumed: Resumed, config: TrainConfig) -> tuple[RetrievalModel, TrainConfig, RescaleRecord]:
    """The checkpoint's model, and the rescaling the run started with ("auto" was resolved then)."""
    encoder = load_model(resumed.checkpoint / MODEL_FOLDER, trust_remote_code=config.backbone.trust_remote_code)
    if isinstance(encoder, InferenceFreeEncoder):
        encoder.query_weights.requires_grad_(not config.model.freeze_query_weights)
    saved = resumed.config.rescale  # its lr_scale too, through the config
    rescaling = (
        RescaleRecord(None, "none")
        if saved.k is None
        else RescaleRecord(float(saved.k), saved.mode, saved.rescale_bias)
    )
    return encoder, dataclasses.replace(config, rescale=saved), rescaling


# ------------------------------------------------------------------------------------------ a step's parts
def regularization_weights(step: int, regularizer: RegularizerConfig) -> tuple[float, float]:
    """(λ_q, λ_d) at ``step``: each grows quadratically to its value over the regularizer's warm-up."""
    return (
        lambda_at(step, regularizer.lambda_q, regularizer.warmup_steps),
        lambda_at(step, regularizer.lambda_d, regularizer.warmup_steps),
    )


def update(run: Training, step: int, loss: float) -> tuple[float, float]:
    """Average the gradients over processes, clip, step AdamW and the schedule; (grad norm, lr used).

    Stops the run, with nothing saved, on a non-finite loss or gradient (the model is not updated), on an update
    whose step size overflows, and on weights a finite gradient still made non-finite (a huge lr)."""
    opt, parameters = run.config.optimization, run.parameters
    distributed.average_gradients(parameters, run.processes)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(parameters, opt.max_grad_norm or math.inf))
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        raise TrainingStopped(
            f"non-finite {'loss' if not math.isfinite(loss) else 'gradient'} at step {step}; "
            f"the model was not updated. {_last_good(run.output)}"
        )
    lr = float(run.scheduler.get_last_lr()[0])
    try:
        run.optimizer.step()
    except RuntimeError as error:  # AdamW's step size (lr / bias correction) beyond float range
        if "overflow" not in str(error):
            raise
        raise TrainingStopped(
            f"the update of step {step} overflowed ({error}; learning rate {lr:g}); "
            f"nothing was saved. {_last_good(run.output)}"
        ) from None
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    damaged = non_finite_weights(run.encoder)
    if damaged:
        raise TrainingStopped(
            f"non-finite weights after the update of step {step} ({', '.join(damaged[:3])}"
            f"{' …' if len(damaged) > 3 else ''}); nothing was saved. {_last_good(run.output)}"
        )
    return grad_norm, lr


def log_step(
    run: Training, step: int, result: StepResult, lambdas: tuple[float, float], grad_norm: float, lr: float
) -> None:
    """The progress bar; every ``logging.every`` steps (and the last) a ``metrics.jsonl`` record — the step's
    values, the window's means and rates — and the collapse check (a stop with ``stop_on_collapse``)."""
    parts = result.parts
    run.progress.update(1)
    run.progress.set_postfix(loss=f"{result.loss:.4f}", q_nnz=f"{parts['q_nnz']:.0f}", d_nnz=f"{parts['d_nnz']:.0f}")
    log = run.config.logging
    if step % log.every and step != run.config.optimization.steps:
        return
    record = {
        "step": step,
        "loss": result.loss,
        **parts,
        "lambda_q": lambdas[0],
        "lambda_d": lambdas[1],
        **weight_norms(run.encoder),
        "grad_norm": grad_norm,
        "lr": lr,
        **run.window.summary(),
    }
    run.window = LogWindow()
    found = run.collapse.update(record)
    if run.metrics is not None:
        with written(run.output, f"metrics.jsonl at step {step}"):
            run.metrics.write(record | ({"collapse": found[0]} if found else {}))
    if found:
        logger.warning("COLLAPSE at step %d: %s", step, found[1])
        if log.stop_on_collapse:
            raise TrainingStopped(f"stopped on collapse at step {step}: {found[1]}. {_last_good(run.output)}")


def periodic_work(run: Training, step: int) -> None:
    """A checkpoint every ``logging.checkpoint_every`` steps (not at the end: the model is saved then), and an
    evaluation every ``evaluation.every`` steps and at the end when ``evaluation.data`` is set."""
    log, steps = run.config.logging, run.config.optimization.steps
    if step % log.checkpoint_every == 0 and step < steps:
        if run.processes.main:
            with written(run.output, f"the checkpoint of step {step}"):
                save_checkpoint(run.output, step, run.encoder, run.optimizer, run.scheduler, log.keep_checkpoints)
        distributed.barrier(run.processes)
    if run.evaluation is not None and run.evaluation.due(step, steps):
        run.last_evaluation = run.evaluation.run(run.encoder, step)


def finish(run: Training) -> None:
    """Save the trained model with its full model card: the recipe, the head it started from, the evaluations."""
    if run.processes.main:
        with written(run.output, "the trained model"):
            run.encoder.save(
                run.output / MODEL_FOLDER,
                training=recipe(run.config, run.initial_head),
                evaluation=[] if run.last_evaluation is None else [run.last_evaluation],
            )


# ------------------------------------------------------------------------------------------ helpers
def weight_norms(encoder: RetrievalModel) -> dict[str, float | None]:
    """What rescaling moved, tracked over training: the head's Frobenius and mean row norm, its bias mean and
    spread, and the word / position embedding norms (:func:`spladekit.model.head.embedding_norms`)."""
    head = head_norms(encoder.model)
    return {
        "head_norm": head["frobenius_norm"],
        "head_mean_row_norm": head["mean_row_norm"],
        "bias_mean": head["bias_mean"],
        "bias_std": head["bias_std"],
        **embedding_norms(encoder.model),
    }


def recipe(config: TrainConfig, initial_head: HeadReport | None) -> dict:
    """The model card's training section: the settings that define the run, and the initial head norms."""
    recipe: dict[str, object] = {
        "loss": config.loss.name,
        "regularizer": config.regularizer.name,
        "lambda_q": config.regularizer.lambda_q,
        "lambda_d": config.regularizer.lambda_d,
        "steps": config.optimization.steps,
        "batch_size": config.optimization.batch_size,
        "lr": config.optimization.lr,
        "training data": config.data.path,
        "rescale_k": config.rescale.k,
        "rescale_mode": config.rescale.mode if config.rescale.k is not None else "none",
        "rescale_lr_scale": config.rescale.lr_scale,
    }
    if initial_head is not None:
        recipe["initial_head_norms"] = {
            key: getattr(initial_head, key) for key in ("frobenius_norm", "mean_row_norm", "max_row_norm")
        }
    return recipe


@contextlib.contextmanager
def written(output: Path, what: str) -> Iterator[None]:
    """A write of the run (checkpoint, model, metrics) that fails — a full disk, a lost permission, whatever
    torch or safetensors raise for it — stops the run with one line: what failed and why, the space left, the
    last good checkpoint (a failed one is discarded whole: checkpoints are written atomically) and how to go on."""
    try:
        yield
    except SpladekitError:
        raise
    except Exception as error:
        free = shutil.disk_usage(output).free if output.exists() else None
        space = "" if free is None else f"; {free / 2**20:,.1f} MiB free on the device of {output}"
        raise TrainingStopped(
            f"writing {what} failed ({error_reason(error)}{space}). {_last_good(output)}; "
            "make room (or fix the permission) and rerun with --resume"
        ) from None


def _last_good(output: Path) -> str:
    """Where to restart from: the newest checkpoint (checkpoints are verified finite when written)."""
    last = checkpoints(output)
    return f"Last good checkpoint: {last[-1] if last else 'none (no checkpoint written yet)'}"
