"""``diagnose``: what a backbone's vocabulary projection looks like and what SPLADE vectors it gives
before any training — head norms, tying, bias, initial sparsity and scores, and the recommended k.

**auto-k** (:func:`recommend_k`): the smallest k in :data:`AUTO_K_CANDIDATES` whose initial median
positive-pair score on the sample is at most ``AUTO_K_TOLERANCE × REFERENCE_PAIR_SCORE``, the score of a
healthy trained SPLADE model (see the constants). Inflated initial scores make the ranking loss saturate
at once and the FLOPS term then fight it (the collapse of Jang et al., arXiv:2606.18811); the smallest
such k avoids over-rescaling, where all scores become equal.

Each candidate is scored on the model that rescaling by k in the given mode actually produces: ``untie``
(or any untied head) divides the head only, so the hidden states are computed once; ``tied`` on a tied
model divides the shared matrix, which also shrinks the input word embeddings and so changes the hidden
states: the backbone runs once per candidate on the divided matrix (restored bit for bit afterwards).
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from spladekit.common.errors import InputError
from spladekit.common.lines import expect
from spladekit.common.schema import type_options
from spladekit.data.samples import SAMPLE_PAIRS
from spladekit.model.encoder import SparseEncoder
from spladekit.model.head import (
    head_norms,
    parse_mode,
    recommend_mode,
    rescale_record,
    word_position_ratio,
)

# auto-k: candidates, and the typical initial query–document score of a healthy SPLADE model: the median
# positive-pair score of the trained ../shared/models/splade-tiny-msmarco on SAMPLE_PAIRS below
# (15.7, from `spladekit diagnose ../shared/models/splade-tiny-msmarco`, field median_pair_score).
AUTO_K_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)
REFERENCE_PAIR_SCORE = 16.0
AUTO_K_TOLERANCE = 2.0


@dataclass
class HeadReport:
    """What the vocabulary projection looks like, and what SPLADE vectors it gives before training."""

    architecture: str
    model_type: str
    vocab_size: int
    hidden_size: int
    head_param: str
    tied: bool
    frobenius_norm: float
    mean_row_norm: float
    max_row_norm: float
    bias_mean: float | None
    bias_std: float | None
    avg_q_nnz: float
    avg_d_nnz: float
    mean_term_weight: float
    max_term_weight: float
    median_pair_score: float
    mean_score: float
    recommended_k: float
    recommended_mode: str = "tied"
    k_scored_as: str = (
        "tied"  # the rescaling each candidate k was scored under: tied (shared matrix) or untie (head only)
    )
    word_position_ratio: float | None = None
    rescale: dict | None = None
    fresh_keys: list[str] = field(default_factory=list)
    scores_by_k: dict[str, float] = field(default_factory=dict)
    # the collapse check (collapse_verdict): the untrained vectors of the sample texts, as the model gives them
    term_weight_std: float | None = None
    mean_cosine: float | None = None
    collapse: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict, source: str | Path) -> HeadReport:
        """Inverse of :meth:`to_dict`: every field that has no default present, every value of its declared type
        (``float | None`` → a number or null; ``list[str]`` → a list), no unknown key; an :class:`InputError` naming
        ``source`` otherwise."""
        hints = typing.get_type_hints(cls)
        known = {item.name: item for item in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise InputError(f"not a head report: unknown key(s) {', '.join(unknown)}", source)
        for name, item in known.items():
            if name not in values:
                if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
                    raise InputError(f"not a head report: no {name!r}", source)
                continue
            kinds = tuple(typing.get_origin(option) or option for option in type_options(hints[name]))
            expect(values[name], kinds, repr(name), source)
        return cls(**values)


def _pooled_by_k(
    encoder: SparseEncoder, texts: list[str], candidates: Iterable[float], max_length: int, mode: str = "untie"
) -> dict[float, torch.Tensor]:
    """SPLADE vectors of the model rescaled by each candidate k in ``mode`` (see the module docstring).

    Pooled with the fused implementation and the model's head options (:meth:`SparseEncoder.pool`), which never
    holds the B × L × V logits: on the 64 training pairs
    that ``rescale.k: auto`` diagnoses (128 tokens, V = 30,522) the naive one held 1 GB of logits and three
    more tensors of that size, and the training's peak memory was this diagnosis (3.5 GB)."""
    batch = encoder.tokenize(texts, max_length=max_length)
    with torch.inference_mode():
        if mode == "tied" and encoder.head.tied:
            pooled = {}
            for k in candidates:
                with _shared_matrix_divided(encoder, k):
                    hidden, projection = encoder.head_inputs(batch)
                    pooled[k] = encoder.pool(
                        hidden, projection.weight, projection.bias, batch["attention_mask"], "fused"
                    ).float()
            return pooled
        hidden, projection = encoder.head_inputs(batch)
        return {
            k: encoder.pool(hidden, projection.weight / k, projection.bias, batch["attention_mask"], "fused").float()
            for k in candidates
        }


@contextlib.contextmanager
def _shared_matrix_divided(encoder: SparseEncoder, k: float) -> Iterator[None]:
    """The tied head/input matrix divided by k for the block (as ``rescale(mode="tied")`` leaves it), then the
    original values restored from a copy (exactly, whatever k)."""
    weight = encoder.head.weight
    original = weight.detach().clone()
    with torch.no_grad():
        weight.div_(k)
    try:
        yield
    finally:
        with torch.no_grad():
            weight.copy_(original)


def recommend_k(
    pair_scores_by_k: dict[float, float], reference: float = REFERENCE_PAIR_SCORE, tolerance: float = AUTO_K_TOLERANCE
) -> float:
    """auto-k: the smallest candidate k whose initial median positive-pair score is <= tolerance × reference.

    Rationale: collapse comes from inflated initial scores (InfoNCE saturates at once and the FLOPS
    term then fights it); bringing the initial score down to the scale of a healthy trained SPLADE model
    removes that, and taking the *smallest* such k avoids over-rescaling (all scores equal). Scores are
    computed with only the head divided by k, so the rule needs one forward pass and no training.
    If no candidate is low enough, the largest is returned; a head that activates nothing gives 1.
    """
    ordered = sorted(pair_scores_by_k)
    if pair_scores_by_k[ordered[0]] <= 0:
        return float(ordered[0])
    for k in ordered:
        if 0 < pair_scores_by_k[k] <= tolerance * reference:
            return float(k)
    return float(ordered[-1])


def diagnose(
    encoder: SparseEncoder, pairs: Sequence[tuple[str, str]] = SAMPLE_PAIRS, max_length: int = 256, mode: str = "auto"
) -> HeadReport:
    """Head statistics plus initial SPLADE statistics on (query, document) sample pairs.

    ``mode``: the rescaling each candidate k is scored under (``tied``, ``untie``), or ``auto``: scored as
    tied, and when :func:`spladekit.model.head.recommend_mode` then picks ``untie`` for that k, scored again head
    only and the k of that scoring recommended (the model that will really be trained)."""
    parse_mode(mode, allow_auto=True)
    model = encoder.model
    queries = [query for query, _ in pairs]
    documents = [document for _, document in pairs]
    applied = rescale_record(model)

    def scores(scored_as: str) -> tuple[dict[float, float], torch.Tensor, torch.Tensor]:
        # With the head already rescaled, the candidates are *further* divisions: report k relative to now.
        query_vectors = _pooled_by_k(encoder, queries, AUTO_K_CANDIDATES, max_length, scored_as)
        document_vectors = _pooled_by_k(encoder, documents, AUTO_K_CANDIDATES, max_length, scored_as)
        by_k: dict[float, float] = {
            k: float((query_vectors[k] * document_vectors[k]).sum(dim=1).median()) for k in AUTO_K_CANDIDATES
        }
        return by_k, query_vectors[1], document_vectors[1]

    scored_as = "tied" if mode == "auto" else mode
    pair_scores, q, d = scores(scored_as)
    k = recommend_k(pair_scores)
    recommended_mode = recommend_mode(model, k) if mode == "auto" else mode
    if recommended_mode != scored_as:
        scored_as = recommended_mode
        pair_scores, q, d = scores(scored_as)
        k = recommend_k(pair_scores)
    active = torch.cat([q[q > 0], d[d > 0]])
    cosine = mean_pairwise_cosine(torch.cat([q, d]))
    head = encoder.head
    config = model.config
    return HeadReport(
        architecture=(getattr(config, "architectures", None) or [type(model).__name__])[0],
        model_type=getattr(config, "model_type", ""),
        vocab_size=head.vocab_size,
        hidden_size=int(head.weight.shape[1]),
        head_param=head.path + ".weight",
        tied=head.tied,
        **head_norms(model),
        avg_q_nnz=float((q > 0).sum(dim=1).float().mean()),
        avg_d_nnz=float((d > 0).sum(dim=1).float().mean()),
        mean_term_weight=float(active.mean()) if active.numel() else 0.0,
        max_term_weight=float(active.max()) if active.numel() else 0.0,
        median_pair_score=pair_scores[1],
        mean_score=float((q @ d.T).mean()),
        recommended_k=k,
        recommended_mode=recommended_mode,
        k_scored_as=scored_as if head.tied else "untie",
        word_position_ratio=word_position_ratio(model),
        rescale=applied,
        fresh_keys=list(encoder.fresh_keys),
        scores_by_k={str(k): round(score, 4) for k, score in pair_scores.items()},
        term_weight_std=float(active.std()) if active.numel() > 1 else 0.0,
        mean_cosine=cosine,
        collapse=collapse_verdict(cosine, float((torch.cat([q, d]) > 0).sum(dim=1).float().mean()), q.shape[1]),
    )


def mean_pairwise_cosine(vectors: torch.Tensor) -> float:
    """The mean cosine similarity of the distinct pairs of ``vectors`` (rows; a zero vector counts as cosine 0)."""
    unit = torch.nn.functional.normalize(vectors.float(), dim=1)
    n = unit.shape[0]
    if n < 2:
        return 0.0
    total = (unit @ unit.T).sum() - (unit * unit).sum()
    return float(total / (n * (n - 1)))


def step0_warnings(report: HeadReport, embeddings_warned: bool = False) -> list[str]:
    """What, before the first step, predicts a collapse (logged by ``train`` on the head it starts from):

    * scores far above a healthy SPLADE model's (median pair score > ``AUTO_K_TOLERANCE`` × the reference):
      the ranking loss saturates at once and the FLOPS term then fights it;
    * input word embeddings smaller than the position embeddings (``word_position_ratio`` < 1, what tied
      rescaling by a large k does to BERT-style models): on splade-tiny, k = 16 tied (ratio 0.10) then
      trains into a uniform collapse (docs/results/mini-repro.md), which untie mode avoids. ``embeddings_warned``:
      :func:`spladekit.model.head.rescale` has just said so, as it does when its own tied rescaling causes it.
      Otherwise the ratio came with the model, and no rescale mode raises it (untie leaves the input
      embeddings as they are, tied divides them too): the message says where it came from instead of
      advising untie (docs/results/head-only-inflation.md, the positions × 8 runs)."""
    warnings = []
    if report.collapse is not None:
        warnings.append(f"{report.collapse}: {collapse_advice(report)}")
    score = report.median_pair_score
    if score > AUTO_K_TOLERANCE * REFERENCE_PAIR_SCORE:
        warnings.append(
            f"initial median pair score {score:.1f} is {score / REFERENCE_PAIR_SCORE:.1f}× a healthy SPLADE "
            f"model's ({REFERENCE_PAIR_SCORE:g}): the ranking loss will saturate; rescale.k=auto would "
            f"pick k = {report.recommended_k:g} (with rescale.lr_scale: the best-trained fix of "
            "docs/results/head-fixes.md)"
        )
    ratio = report.word_position_ratio
    if ratio is not None and ratio < 1 and not embeddings_warned:
        warnings.append(
            f"input word embeddings are {ratio:.2f}× the position embeddings (median row norms): positions "
            f"outweigh words, the road to a uniform collapse; {low_ratio_origin(report.rescale)}"
        )
    return warnings


def low_ratio_origin(applied: dict | None) -> str:
    """Where word embeddings below the positions came from, when this run's own rescaling did not cause it."""
    if applied and applied.get("mode") == "tied" and float(applied.get("k", 1)) > 1:
        return (
            f"this model was already tied-rescaled by k = {float(applied['k']):g} (spladekit_rescale in its "
            "config.json), which divided them: start from the backbone before that, with rescale.mode=untie"
        )
    return (
        "they came with the model, and no rescale mode raises them (untie leaves the input embeddings as "
        "they are, tied divides them too)"
    )


# The collapse check's thresholds: measured on the untrained vectors of the sample texts (SAMPLE_PAIRS' queries and
# documents) of random-init base-size backbones, splade-tiny and its inflated variants (docs/diagnosis.md, "Collapse
# before training"; docs/results/collapse-check/measure.py).
SAME_VECTOR_COSINE = 0.9
DENSE_FRACTION = 0.5


def collapse_verdict(mean_cosine: float, active_dimensions: float, vocab_size: int) -> str | None:
    """What the untrained vectors already show (None: nothing): no active term at all; every text getting nearly
    the same vector (mean pairwise cosine of different texts ≥ :data:`SAME_VECTOR_COSINE`); or every text
    activating most of the vocabulary (≥ :data:`DENSE_FRACTION` of it)."""
    if active_dimensions == 0:
        return "collapsed before training: no text activates any term (every vector is zero)"
    dense = active_dimensions >= DENSE_FRACTION * vocab_size
    terms = f"{active_dimensions:.0f} of {vocab_size} terms active per text"
    if mean_cosine >= SAME_VECTOR_COSINE:
        return (
            "collapsed before training: every text gets nearly the same vector (mean cosine "
            f"{mean_cosine:.3f} between different texts" + (f", {terms})" if dense else ")")
        )
    if dense:
        return f"dense before training: {terms} (mean cosine {mean_cosine:.3f} between different texts)"
    return None


def collapse_advice(report: HeadReport) -> str:
    """Which head options act on what the collapse check found, as far as the evidence goes (docs/diagnosis.md,
    "Collapse before training"): what each does to the *untrained* vectors is measured; which one then trains
    best from a collapsed start is not. The one training comparison (docs/results/head-fixes.md) is of a
    high-norm head that was *not* collapsed: there rescaling with ``rescale.lr_scale`` trained best and a logit
    shift matched to its score worst."""
    if report.collapse is None:
        return ""
    if report.collapse.startswith("collapsed before training: no text"):
        return (
            "nothing is active: a head.logit_shift above the logits' range zeroes every vector (lower it); "
            "see docs/diagnosis.md"
        )
    return (
        "head.position_top_k caps the terms each token keeps and made such vectors sparse and distinct before "
        "training; head.logit_shift works only within the logits' range; rescaling (k) lowers the scores but "
        "keeps this shape; which of them trains best from a collapsed start is not measured (on a high-norm head "
        "that was not collapsed, rescaling with rescale.lr_scale trained best and a matched logit shift worst: "
        "docs/results/head-fixes.md)"
    )
