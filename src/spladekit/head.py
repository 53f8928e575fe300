"""Measure the vocabulary projection ("MLM head") and rescale it at init: ``W_head ← W_head / k``.

Modern encoders (ModernBERT, Ettin, RoBERTa…) have large head norms; their initial SPLADE scores are so
large that the ranking loss saturates and training collapses. Jang et al. (arXiv:2606.18811) divide the
head by k at init; when the head is tied to the input embeddings they scale the shared matrix and keep
the tie (``mode="tied"``). ``mode="untie"`` gives the head its own copy first and scales only that copy,
which separates "head scale" from "smaller input embeddings".
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from spladekit.backbone import is_tied, projection_path, vocab_projection
from spladekit.errors import SpladekitError
from spladekit.pooling import splade_max_pool

log = logging.getLogger("spladekit")

RESCALE_MODES = ("tied", "untie")
CONFIG_ATTRIBUTE = "spladekit_rescale"  # stored in config.json, so a reload never rescales twice

# auto-k: candidates, and the typical initial query–document score of a healthy SPLADE model: the median
# positive-pair score of the trained ../shared/models/splade-tiny-msmarco on SAMPLE_PAIRS below
# (15.7, from `spladekit diagnose ../shared/models/splade-tiny-msmarco`, field median_pair_score).
AUTO_K_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)
REFERENCE_PAIR_SCORE = 16.0
AUTO_K_TOLERANCE = 2.0

SAMPLE_PAIRS = (
    ("what is the capital of france", "Paris is the capital and most populous city of France, on the Seine."),
    ("how do vaccines work", "Vaccines train the immune system to recognize a pathogen by exposing it to an antigen."),
    ("symptoms of vitamin d deficiency", "Low vitamin D can cause bone pain, muscle weakness and fatigue in adults."),
    ("who wrote pride and prejudice", "Pride and Prejudice is an 1813 novel of manners written by Jane Austen."),
    ("boiling point of water at altitude", "At higher altitudes air pressure is lower, so water boils below 100 degrees."),
    ("python list comprehension syntax", "A list comprehension builds a list from an iterable: [f(x) for x in items if cond]."),
    ("causes of the first world war", "The assassination of Archduke Franz Ferdinand in 1914 triggered the First World War."),
    ("how does photosynthesis work", "Plants convert light, water and carbon dioxide into glucose and oxygen in chloroplasts."),
    ("best time to visit japan", "Spring cherry blossom season and autumn foliage are popular times to travel to Japan."),
    ("what is inflation in economics", "Inflation is the rate at which the general level of prices for goods rises over time."),
    ("treatment for type 2 diabetes", "Metformin, diet changes and exercise are first-line treatments for type 2 diabetes."),
    ("speed of light in vacuum", "Light travels at exactly 299,792,458 metres per second in a vacuum."),
)


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
    word_position_ratio: float | None = None
    rescale: dict | None = None
    fresh_keys: list[str] = field(default_factory=list)
    scores_by_k: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def rescale_record(model: nn.Module) -> dict | None:
    """The rescaling already applied to this model (read from its config), or None."""
    return getattr(model.config, CONFIG_ATTRIBUTE, None)


def _check_k(k: float) -> float:
    try:
        value = float(k)
    except (TypeError, ValueError):
        raise SpladekitError(f"k must be a positive finite number, got {k!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise SpladekitError(f"k must be a positive finite number, got {k!r}")
    return value


def _rebind(model: nn.Module, old: nn.Parameter, new: nn.Parameter, skip: nn.Module | None = None) -> None:
    for module in model.modules():
        if module is skip:
            continue
        for name, parameter in list(module._parameters.items()):
            if parameter is old:
                module._parameters[name] = new


def rescale(model: nn.Module, k: float, mode: str = "tied", rescale_bias: bool = False) -> nn.Module:
    """Divide the vocabulary projection by ``k`` in place, once; record it in ``model.config``.

    * ``tied``: divide the (possibly shared) matrix; the tie is kept (same storage afterwards). With a
      tied head this also shrinks the input embeddings — the paper's method.
    * ``untie``: give the head its own copy of the matrix (and bias) and scale only that copy; the
      input embeddings stay bit-identical and ``config.tie_word_embeddings`` becomes False so a reload
      does not re-tie them.
    """
    k = _check_k(k)
    if rescale_record(model) is not None:
        raise SpladekitError(f"head already rescaled ({rescale_record(model)}); rescaling twice would compound")
    if mode == "tied" and recommend_mode(model, k) == "untie":
        ratio = word_position_ratio(model)
        log.warning("tied rescaling by k=%g shrinks the input word embeddings below the position embeddings "
                    "(word/position norm ratio %.2f → %.2f): positions will dominate the input; mode 'untie' "
                    "rescales the head only", k, ratio, ratio / k)
    divide_head(model, k, mode=mode, divide_bias=rescale_bias)
    setattr(model.config, CONFIG_ATTRIBUTE, {"k": k, "mode": mode, "rescale_bias": rescale_bias})
    return model


def divide_head(model: nn.Module, divisor: float, mode: str = "tied", divide_bias: bool = False) -> nn.Module:
    """The mechanics of :func:`rescale` without the once-only record.

    Used directly only to *simulate* backbones with a large head (``divisor = 1/s`` inflates it by s),
    so that a simulated backbone can still be rescaled afterwards.
    """
    divisor = _check_k(divisor)
    if mode not in RESCALE_MODES:
        raise SpladekitError(f"rescale mode must be one of {RESCALE_MODES}, got {mode!r}")
    projection = vocab_projection(model)
    with torch.no_grad():
        if mode == "untie" and is_tied(model):
            _untie(model, projection)
        projection.weight.div_(divisor)
        if divide_bias and projection.bias is not None:
            projection.bias.div_(divisor)
    return model


def _untie(model: nn.Module, projection: nn.Module) -> None:
    inputs = model.get_input_embeddings()
    new_weight = nn.Parameter(projection.weight.detach().clone())
    _rebind(model, projection.weight, new_weight, skip=inputs)
    if projection.bias is not None:
        # A bias shared with another module (BERT's cls.predictions.bias) would be written once and
        # not re-tied on reload; the projection gets its own, so the saved folder is exact.
        projection.bias = nn.Parameter(projection.bias.detach().clone())
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        config.tie_word_embeddings = False


def head_norms(model: nn.Module) -> dict:
    weight = vocab_projection(model).weight.detach().float()
    bias = vocab_projection(model).bias
    rows = weight.norm(dim=1)
    return {
        "frobenius_norm": float(weight.norm()),
        "mean_row_norm": float(rows.mean()),
        "max_row_norm": float(rows.max()),
        "bias_mean": None if bias is None else float(bias.detach().float().mean()),
        "bias_std": None if bias is None else float(bias.detach().float().std()),
    }


def word_position_ratio(model: nn.Module) -> float | None:
    """Median input word-embedding row norm ÷ median absolute position-embedding row norm.

    BERT-style models (BERT, DistilBERT, ALBERT, RoBERTa) add a position vector to each word vector
    before their embedding LayerNorm, so ``tied`` rescaling by k divides this ratio by k; below 1 the
    positions outweigh the words ("input damage"). None for models without an absolute position table
    (rotary ones such as ModernBERT and Ettin), where the embedding LayerNorm makes the input scale-free.
    """
    tables = [module for name, module in model.named_modules()
              if name.endswith("position_embeddings") and isinstance(module, nn.Embedding)]
    if not tables:
        return None
    words = model.get_input_embeddings().weight.detach().float().norm(dim=1).median()
    positions = tables[0].weight.detach().float().norm(dim=1).median()
    return float(words / positions) if positions > 0 else None


def recommend_mode(model: nn.Module, k: float) -> str:
    """``untie`` when ``tied`` rescaling by k would leave word embeddings smaller than position embeddings.

    Rule: tied head, k > 1 and ``word_position_ratio / k < 1``. In the CPU mini-reproduction
    (docs/results/mini-repro.md) it picks the better mode of every tied/untie pair run; it was stated
    after those runs, so treat it as a measured heuristic, not a law.
    """
    ratio = word_position_ratio(model)
    return "untie" if k > 1 and is_tied(model) and ratio is not None and ratio / k < 1 else "tied"


def _pooled_by_k(encoder, texts: list[str], candidates, max_length: int) -> dict[float, torch.Tensor]:
    """SPLADE vectors with the head divided by each candidate k (hidden states computed once)."""
    batch = encoder.tokenize(texts, max_length=max_length)
    with torch.inference_mode():
        hidden, projection = encoder.head_inputs(batch)
        return {
            k: splade_max_pool(hidden, projection.weight / k, projection.bias, batch["attention_mask"]).float()
            for k in candidates
        }


def recommend_k(pair_scores_by_k: dict[float, float], reference: float = REFERENCE_PAIR_SCORE,
                tolerance: float = AUTO_K_TOLERANCE) -> float:
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


def diagnose(encoder, pairs=SAMPLE_PAIRS, max_length: int = 256) -> HeadReport:
    """Head statistics plus initial SPLADE statistics on (query, document) sample pairs."""
    model = encoder.model
    queries = [query for query, _ in pairs]
    documents = [document for _, document in pairs]
    applied = rescale_record(model)
    # With the head already rescaled, the candidates are *further* divisions: report k relative to now.
    query_vectors = _pooled_by_k(encoder, queries, AUTO_K_CANDIDATES, max_length)
    document_vectors = _pooled_by_k(encoder, documents, AUTO_K_CANDIDATES, max_length)
    pair_scores = {k: float((query_vectors[k] * document_vectors[k]).sum(dim=1).median()) for k in AUTO_K_CANDIDATES}
    q, d = query_vectors[1], document_vectors[1]
    active = torch.cat([q[q > 0], d[d > 0]])
    projection = vocab_projection(model)
    config = model.config
    return HeadReport(
        architecture=(getattr(config, "architectures", None) or [type(model).__name__])[0],
        model_type=getattr(config, "model_type", ""),
        vocab_size=int(projection.weight.shape[0]),
        hidden_size=int(projection.weight.shape[1]),
        head_param=projection_path(model) + ".weight",
        tied=is_tied(model),
        **head_norms(model),
        avg_q_nnz=float((q > 0).sum(dim=1).float().mean()),
        avg_d_nnz=float((d > 0).sum(dim=1).float().mean()),
        mean_term_weight=float(active.mean()) if active.numel() else 0.0,
        max_term_weight=float(active.max()) if active.numel() else 0.0,
        median_pair_score=pair_scores[1],
        mean_score=float((q @ d.T).mean()),
        recommended_k=(k := recommend_k(pair_scores)),
        recommended_mode=recommend_mode(model, k),
        word_position_ratio=word_position_ratio(model),
        rescale=applied,
        fresh_keys=list(getattr(encoder, "fresh_keys", [])),
        scores_by_k={str(k): round(score, 4) for k, score in pair_scores.items()},
    )


