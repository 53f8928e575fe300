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
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from spladekit.common.errors import SpladekitError
from spladekit.model.backbone import MLMHead

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger("spladekit")

RESCALE_MODES = ("tied", "untie")
CONFIG_ATTRIBUTE = "spladekit_rescale"  # stored in config.json, so a reload never rescales twice


def rescale_record(model: PreTrainedModel) -> dict | None:
    """The rescaling already applied to this model (read from its config), or None."""
    return getattr(model.config, CONFIG_ATTRIBUTE, None)


def parse_k(value: object, allow_auto: bool = False) -> float | str:
    """A rescaling divisor: a positive finite number (or ``"auto"`` where allowed); anything else is a
    :class:`SpladekitError` (the one check of k, for the API, the CLI, training configs and sweeps)."""
    if allow_auto and value == "auto":
        return "auto"
    expected = "a positive finite number" + (" or 'auto'" if allow_auto else "")
    try:
        # float() decides what it accepts; anything else raises TypeError/ValueError, reported below
        number = float(cast(Any, value)) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise SpladekitError(f"k must be {expected}, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise SpladekitError(f"k must be {expected}, got {value!r}")
    return number


def parse_mode(value: object, allow_auto: bool = False) -> str:
    """A rescale mode: ``tied`` or ``untie`` (or ``"auto"`` where allowed); anything else is a
    :class:`SpladekitError` (the one check of a mode, for the API, the CLI, diagnosis and sweeps)."""
    choices = (*RESCALE_MODES, "auto") if allow_auto else RESCALE_MODES
    if not isinstance(value, str) or value not in choices:
        raise SpladekitError(f"mode must be one of {', '.join(choices)}, got {value!r}")
    return value


def _rebind(model: PreTrainedModel, old: torch.Tensor, new: nn.Parameter, skip: nn.Module | None = None) -> None:
    for module in model.modules():
        if module is skip:
            continue
        for name, parameter in list(module._parameters.items()):
            if parameter is old:
                module._parameters[name] = new


def rescale(model: PreTrainedModel, k: float, mode: str = "tied", rescale_bias: bool = False) -> PreTrainedModel:
    """Divide the vocabulary projection by ``k`` in place, once; record it in ``model.config``.

    * ``tied``: divide the (possibly shared) matrix; the tie is kept (same storage afterwards). With a
      tied head this also shrinks the input embeddings — the paper's method.
    * ``untie``: give the head its own copy of the matrix (and bias) and scale only that copy; the
      input embeddings stay bit-identical and ``config.tie_word_embeddings`` becomes False so a reload
      does not re-tie them.
    """
    k = float(parse_k(k))
    if rescale_record(model) is not None:
        raise SpladekitError(f"head already rescaled ({rescale_record(model)}); rescaling twice would compound")
    if mode == "tied" and recommend_mode(model, k) == "untie":
        ratio = word_position_ratio(model)
        assert ratio is not None  # recommend_mode says untie only when there is a ratio
        # below 1 already (the backbone's own positions outweigh its words): untie keeps it from falling
        # further but cannot raise it (docs/results/head-only-inflation.md, the positions × 8 runs)
        already = (
            " — but the words are below the positions already, which no mode changes: the model may collapse either way"
            if ratio < 1
            else ""
        )
        log.warning(
            "tied rescaling by k=%g shrinks the input word embeddings below the position embeddings "
            "(word/position norm ratio %.2f → %.2f): positions will dominate the input; mode 'untie' "
            "rescales the head only%s",
            k,
            ratio,
            ratio / k,
            already,
        )
    divide_head(model, k, mode=mode, divide_bias=rescale_bias)
    setattr(model.config, CONFIG_ATTRIBUTE, {"k": k, "mode": mode, "rescale_bias": rescale_bias})
    return model


def divide_head(
    model: PreTrainedModel, divisor: float, mode: str = "tied", divide_bias: bool = False
) -> PreTrainedModel:
    """The mechanics of :func:`rescale` without the once-only record.

    Used directly only to *simulate* backbones with a large head (``divisor = 1/s`` inflates it by s),
    so that a simulated backbone can still be rescaled afterwards.
    """
    divisor = float(parse_k(divisor))
    parse_mode(mode)
    head = MLMHead.of(model)
    check_division(head, divisor, divide_bias)
    with torch.no_grad():
        if mode == "untie" and head.tied:
            _untie(model, head)
        head.weight.div_(divisor)
        if divide_bias and head.bias is not None:
            head.bias.div_(divisor)
    return model


def check_division(head: MLMHead, divisor: float, divide_bias: bool = False) -> None:
    """Refuse, before anything is changed, a division of the head by ``divisor`` whose result the model cannot
    carry in its dtype: a head that already holds NaN/inf, a row norm whose square overflows (then every
    logit, and with a tied head the input LayerNorm too, is inf/NaN: ``rescale --k 1e-36``), or a bias
    that overflows."""
    weight = head.weight.detach()
    largest = torch.finfo(weight.dtype).max
    limit = math.sqrt(largest)
    rows = float(weight.float().norm(dim=1).max()) if weight.numel() else 0.0
    if not math.isfinite(rows):
        raise SpladekitError(
            "the vocabulary projection already holds NaN/inf or overflowing rows; "
            "the model is damaged (reload the original backbone)"
        )
    if rows / divisor >= limit:
        raise SpladekitError(
            f"dividing the head by {divisor:g} would make its largest row norm {rows / divisor:.3g}: "
            f"dot products with it overflow {str(weight.dtype).removeprefix('torch.')} (row norms "
            f"must stay below {limit:.3g}), so every vector would be inf/NaN; the model was left "
            f"unchanged (use a larger k)"
        )
    bias = head.bias
    peak = float(bias.detach().float().abs().max()) if divide_bias and bias is not None and bias.numel() else 0.0
    if not peak / divisor < largest:  # also NaN
        raise SpladekitError(f"dividing the head bias by {divisor:g} gives NaN/inf; the model was left unchanged")


def _untie(model: PreTrainedModel, head: MLMHead) -> None:
    projection = head.projection
    new_weight = nn.Parameter(projection.weight.detach().clone())
    _rebind(model, projection.weight, new_weight, skip=head.input_embeddings)
    if projection.bias is not None:
        # A bias shared with another module (BERT's cls.predictions.bias) would be written once and
        # not re-tied on reload; the projection gets its own, so the saved folder is exact.
        projection.bias = nn.Parameter(projection.bias.detach().clone())
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        config.tie_word_embeddings = False


def head_norms(model: PreTrainedModel) -> dict:
    """The vocabulary projection's Frobenius, mean and max row norms, and its bias' mean and spread."""
    head = MLMHead.of(model)
    weight, bias = head.weight.detach().float(), head.bias
    rows = weight.norm(dim=1)
    return {
        "frobenius_norm": float(weight.norm()),
        "mean_row_norm": float(rows.mean()),
        "max_row_norm": float(rows.max()),
        "bias_mean": None if bias is None else float(bias.detach().float().mean()),
        "bias_std": None if bias is None else float(bias.detach().float().std()),
    }


def word_position_ratio(model: PreTrainedModel) -> float | None:
    """Median input word-embedding row norm ÷ median absolute position-embedding row norm.

    BERT-style models (BERT, DistilBERT, ALBERT, RoBERTa) add a position vector to each word vector
    before their embedding LayerNorm, so ``tied`` rescaling by k divides this ratio by k; below 1 the
    positions outweigh the words ("input damage"). None for models without an absolute position table
    (rotary ones such as ModernBERT and Ettin), where the embedding LayerNorm makes the input scale-free.
    """
    norms = embedding_norms(model)
    words, positions = norms["word_norm"], norms["position_norm"]
    return words / positions if words is not None and positions else None


def embedding_norms(model: PreTrainedModel) -> dict[str, float | None]:
    """Median row norm of the input word embeddings (``word_norm``) and of the absolute position embeddings
    (``position_norm``; None for rotary models, which have no such table): logged during training, since
    tied rescaling and weight decay both move the word table (= the head when tied)."""
    tables = [
        module
        for name, module in model.named_modules()
        if name.endswith("position_embeddings") and isinstance(module, nn.Embedding)
    ]
    # typed nn.Module by transformers; a masked LM's input embeddings are a table with a .weight
    words = cast(nn.Embedding, model.get_input_embeddings()).weight.detach().float().norm(dim=1).median()
    positions = tables[0].weight.detach().float().norm(dim=1).median() if tables else None
    return {"word_norm": float(words), "position_norm": None if positions is None else float(positions)}


def recommend_mode(model: PreTrainedModel, k: float) -> str:
    """``untie`` when ``tied`` rescaling by k would leave word embeddings smaller than position embeddings.

    Rule: tied head, k > 1 and ``word_position_ratio / k < 1``. In the CPU mini-reproduction
    (docs/results/mini-repro.md) it picks the better mode of every tied/untie pair run; it was stated
    after those runs, so treat it as a measured heuristic, not a law.
    """
    ratio = word_position_ratio(model)
    return "untie" if k > 1 and MLMHead.of(model).tied and ratio is not None and ratio / k < 1 else "tied"
