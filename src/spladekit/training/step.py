"""One optimizer step's gradients: encode the batch, the full-batch objective, backward (GradCache when the
batch is split into micro-batches). See :mod:`spladekit.training.loop` for the objective and why the batch is
always the effective batch.

The step reads only :class:`StepSettings`, a small frozen view of the config, never the whole ``TrainConfig``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from spladekit.common import distributed
from spladekit.common.devices import autocast, resolve_precision
from spladekit.data.training import Example
from spladekit.model.inference_free import InferenceFreeEncoder
from spladekit.model.loading import RetrievalModel
from spladekit.training.checkpoint import rng_state, set_rng_state
from spladekit.training.config import TrainConfig
from spladekit.training.losses import LOSSES
from spladekit.training.regularizers import REGULARIZERS, df_flops, flops


@dataclass(frozen=True)
class StepSettings:
    """What one step needs of the config: token limits, negatives per query, bf16, the loss and regularizer."""

    query_max_length: int
    doc_max_length: int
    negatives: int
    bf16: bool
    loss: str
    regularizer: str
    length_groups: int = 1
    packing: bool = False
    df_alpha: float = 0.1
    df_beta: float = 2.0

    @classmethod
    def of(cls, config: TrainConfig, device: torch.device | None = None) -> StepSettings:
        """The config's settings; ``optimization.precision`` resolved on ``device`` (None: the CPU), the deprecated
        ``optimization.bf16`` read as precision bf16."""
        precision = resolve_precision(
            config.optimization.precision, device or torch.device("cpu"), "optimization.precision"
        )
        return cls(
            config.data.query_max_length,
            config.data.doc_max_length,
            config.data.negatives,
            config.optimization.bf16 or precision == "bf16",
            config.loss.name,
            config.regularizer.name,
            config.optimization.length_groups,
            config.optimization.packing,
            config.regularizer.df_alpha,
            config.regularizer.df_beta,
        )


class Encoded(NamedTuple):
    """A (micro-)batch's vectors (Q: b × V, P: b × V, N: b × K × V) and the real (non-padding) tokens the
    backbone read for them."""

    queries: torch.Tensor
    positives: torch.Tensor
    negatives: torch.Tensor
    tokens: int


class StepResult(NamedTuple):
    """The full-batch loss and its parts (floats), and the real tokens this process's backbone read for the
    batch (counted once, though GradCache encodes twice)."""

    loss: float
    parts: dict[str, float]
    tokens: int


def encode_examples(
    encoder: RetrievalModel, examples: list[Example], settings: StepSettings, device: torch.device
) -> Encoded:
    """Encode a (micro-)batch; queries and documents are capped at their own token limits. An inference-free
    model's queries are its weight table rows, not a forward pass (so they read no tokens)."""
    texts = [e.query for e in examples]
    tokens = 0
    with autocast(device, settings.bf16):
        if isinstance(encoder, InferenceFreeEncoder):
            queries = encoder.query_forward(texts, settings.query_max_length)
        else:
            queries, read = encoder.forward_texts(
                texts, settings.query_max_length, settings.length_groups, settings.packing
            )
            tokens += read
        documents = [e.positive for e in examples] + [doc for e in examples for doc in e.negatives]
        docs, read = encoder.forward_texts(documents, settings.doc_max_length, settings.length_groups, settings.packing)
        tokens += read
    b = len(examples)
    return Encoded(queries.float(), docs[:b].float(), docs[b:].float().view(b, settings.negatives, -1), tokens)


def objective(
    q: torch.Tensor,
    p: torch.Tensor,
    n: torch.Tensor,
    teacher: torch.Tensor | None,
    lambdas: tuple[float, float],
    settings: StepSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Total loss (a tensor) and its parts (floats) on the full batch."""
    ranking = LOSSES[settings.loss](q, p, n, teacher)
    docs = torch.cat([p, n.flatten(0, 1)])
    if settings.regularizer == "df_flops":  # weighted by the documents' frequencies, on both sides

        def regularize(x: torch.Tensor) -> torch.Tensor:
            return df_flops(x, docs, settings.df_alpha, settings.df_beta)

    else:
        regularize = REGULARIZERS[settings.regularizer]
    reg_q, reg_d = regularize(q), regularize(docs)
    total = ranking + lambdas[0] * reg_q + lambdas[1] * reg_d
    with torch.no_grad():
        parts = {
            "ranking_loss": ranking,
            "reg_q": reg_q,
            "reg_d": reg_d,
            "flops_q": flops(q),
            "flops_d": flops(docs),
            "q_nnz": (q > 0).sum(dim=1).float().mean(),
            "d_nnz": (docs > 0).sum(dim=1).float().mean(),
            **collapse_signals(q, p, n, docs),
        }
    values = {name: float(value.detach()) for name, value in parts.items()}
    # InfoNCE over B in-batch positives + K own negatives, all scores equal: -log(1 / (B + K))
    return total, values | ({"uniform_loss": math.log(q.shape[0] + n.shape[1])} if settings.loss == "infonce" else {})


def collapse_signals(q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, docs: torch.Tensor) -> dict[str, torch.Tensor]:
    """What a uniform collapse looks like (see ``monitors.CollapseDetector``): the spread of each query's
    in-batch candidate scores, and how alike the documents' vectors are (mean cosine of distinct pairs)."""
    scores = torch.cat([q @ p.T, torch.einsum("bv,bkv->bk", q, n)], dim=1)
    unit = torch.nn.functional.normalize(docs, dim=1)
    pairs = docs.shape[0] * (docs.shape[0] - 1)
    similarity = ((unit @ unit.T).sum() - (unit * unit).sum()) / max(pairs, 1)
    return {"score_spread": scores.std(dim=1).mean(), "doc_similarity": similarity}


def forward_backward(
    encoder: RetrievalModel,
    micro_batches: list[list[Example]],
    teacher: torch.Tensor | None,
    lambdas: tuple[float, float],
    settings: StepSettings,
    processes: distributed.Processes,
) -> StepResult:
    """Gradients of the full-batch objective (see :mod:`spladekit.training.loop`)."""
    device = processes.device

    def full_batch_loss(encoded: Sequence[Encoded]) -> tuple[torch.Tensor, dict[str, float]]:
        q, p, n = (
            torch.cat([distributed.gather(vectors, processes) for vectors in side])
            for side in zip(*(part[:3] for part in encoded))
        )
        return objective(q, p, n, teacher, lambdas, settings)

    if len(micro_batches) == 1:
        encoded = encode_examples(encoder, micro_batches[0], settings, device)
        total, parts = full_batch_loss([encoded])
        total.backward()
        return StepResult(float(total.detach()), parts, encoded.tokens)
    states: list[dict] = []
    cached: list[Encoded] = []
    for micro in micro_batches:  # pass 1: vectors of every micro-batch, no graph
        states.append(rng_state())
        with torch.no_grad():
            q, p, n, tokens = encode_examples(encoder, micro, settings, device)
        cached.append(
            Encoded(q.detach().requires_grad_(), p.detach().requires_grad_(), n.detach().requires_grad_(), tokens)
        )
    total, parts = full_batch_loss(cached)
    total.backward()  # d loss / d cached vectors
    for micro, state, reps in zip(micro_batches, states, cached):  # pass 2: into the model
        set_rng_state(state)
        torch.autograd.backward(encode_examples(encoder, micro, settings, device)[:3], [x.grad for x in reps[:3]])
    return StepResult(float(total.detach()), parts, sum(part.tokens for part in cached))


def split_batch(examples: list[Example], accumulation: int, processes: distributed.Processes) -> list[list[Example]]:
    """This process's share of each micro-batch: micro-batch j, rank r gets a contiguous slice, so the
    gathered order (micro-batch, then rank) is the order of the examples."""
    micro = len(examples) // accumulation
    share = micro // processes.world_size
    return [
        examples[j * micro + processes.rank * share : j * micro + (processes.rank + 1) * share]
        for j in range(accumulation)
    ]


def teacher_scores(examples: list[Example], device: torch.device) -> torch.Tensor | None:
    """The teacher's scores of each example's (positive, negatives…), for distillation losses; None without."""
    if examples[0].teacher is None:
        return None
    return torch.tensor([e.teacher for e in examples], dtype=torch.float32, device=device)
