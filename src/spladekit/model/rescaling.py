"""The rescaling policy: turn a requested k and mode (numbers, ``"auto"`` or none) into one
:class:`RescaleRecord`, and apply it. The CLI, training, the quickstart and sweeps all resolve
"auto" here and nowhere else.

* ``k="auto"``: :func:`spladekit.model.diagnosis.diagnose`'s ``recommended_k`` on the given (query, document)
  pairs (the built-in sample, or a training set's first pairs);
* ``mode="auto"``: :func:`spladekit.model.head.recommend_mode` for the k used (``untie`` when tied rescaling
  would leave word embeddings below position embeddings, else ``tied``);
* ``k=None``: no rescaling (the mode does not apply: ``"none"``).

:func:`step_factors` is the learning-rate side of the same policy (``rescale.lr_scale``): AdamW moves each weight
by about ``lr`` a step whatever its size, so a matrix divided by k would otherwise move k× faster relative to
itself (docs/results/lr-scale.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from torch import nn

from spladekit.data.samples import SAMPLE_PAIRS
from spladekit.model.backbone import MLMHead
from spladekit.model.diagnosis import HeadReport, diagnose
from spladekit.model.encoder import SparseEncoder
from spladekit.model.head import parse_k, parse_mode, recommend_mode, rescale

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger("spladekit")


@dataclass(frozen=True)
class RescaleRecord:
    """A resolved rescaling: ``k`` (None: none), ``mode`` (tied | untie | none), and which were 'auto'."""

    k: float | None
    mode: str
    rescale_bias: bool = False
    auto: tuple[str, ...] = ()  # "k" and/or "mode" when they were resolved from "auto"

    def describe(self) -> str:
        if self.k is None:
            return "no rescaling (k = 1)"
        origin = f" ({' and '.join(self.auto)} chosen automatically)" if self.auto else ""
        return f"W_head / {self.k:g}, mode {self.mode}{origin}"


def resolve_rescale(
    encoder: SparseEncoder,
    k: object,
    mode: str = "tied",
    rescale_bias: bool = False,
    pairs: Sequence[tuple[str, str]] = SAMPLE_PAIRS,
    max_length: int = 256,
    report: HeadReport | None = None,
) -> RescaleRecord:
    """Resolve ``k`` (number, ``"auto"`` or None) and ``mode`` (tied, untie or ``"auto"``) for ``encoder``.

    ``report``: a diagnosis of ``encoder`` already made on ``pairs`` with this ``mode`` (the quickstart shows it
    to the user); ``k="auto"`` then takes its ``recommended_k`` instead of diagnosing again."""
    parse_mode(mode, allow_auto=True)
    if k is None:
        return RescaleRecord(None, "none", rescale_bias)
    auto = []
    value = parse_k(k, allow_auto=True)
    if value == "auto":
        # scored on the model this mode really produces (tied: the input embeddings shrink too)
        value = (report or diagnose(encoder, pairs, max_length=max_length, mode=mode)).recommended_k
        auto.append("k")
        log.info("rescale.k: auto resolved to %g (diagnose's recommended_k on %d pairs)", value, len(pairs))
    assert isinstance(value, float)
    if mode == "auto":
        mode = recommend_mode(encoder.model, value)
        auto.append("mode")
        log.info("rescale.mode: auto resolved to %s (head.recommend_mode for k=%g)", mode, value)
    return RescaleRecord(value, mode, rescale_bias, tuple(auto))


def apply_rescale(encoder: SparseEncoder, record: RescaleRecord) -> SparseEncoder:
    """Rescale ``encoder``'s head as ``record`` says (in place, once; nothing when k is None)."""
    if record.k is not None:
        rescale(encoder.model, record.k, mode=record.mode, rescale_bias=record.rescale_bias)
    return encoder


def step_factors(model: PreTrainedModel, record: RescaleRecord) -> dict[nn.Parameter, float]:
    """The learning-rate factor of each parameter ``record``'s rescaling divided: ``1/k`` for the projection
    (tied: the matrix it shares with the input embeddings) and, with ``rescale_bias``, its bias.

    AdamW's update is ``lr · m̂ / (√v̂ + ε)``, about ``lr`` per coordinate whatever the weight's size: after
    ``W → W/k`` the gradient grows k× (m̂/√v̂ does not change), so ``W/k`` moves k× faster relative to itself.
    At ``lr/k`` it moves as ``W`` did, up to ε (relatively k× smaller against a k× larger gradient); the caller
    multiplies the group's weight decay by k so that AdamW's decoupled shrink ``lr · decay`` stays the same.
    Nothing here is multiplied by the rescaling, so no factor is above 1. Empty when there was no rescaling."""
    if record.k is None:
        return {}
    head = MLMHead.of(model)
    divided = [head.weight] + ([head.bias] if record.rescale_bias and head.bias is not None else [])
    return {cast(nn.Parameter, parameter): 1.0 / record.k for parameter in divided}
