"""Simulated high-norm backbones for experiments: a trained model with one scale inflated, in place.

Not part of the product path: the sweep's ``inflate`` backbones use it to test the rescaling rule on models
whose inflation (and so the "right" k) is known by construction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from spladekit.common.errors import SpladekitError
from spladekit.model.backbone import MLMHead
from spladekit.model.head import RESCALE_MODES, divide_head, parse_k

if TYPE_CHECKING:
    from transformers import PreTrainedModel


# Where a simulated high-norm backbone carries its extra scale (experiments only, see :func:`inflate`).
INFLATE_TARGETS = ("tied", "untie", "transform", "positions")


def inflate(model: PreTrainedModel, factor: float, target: str = "tied") -> PreTrainedModel:
    """Simulate a backbone with a larger scale somewhere, in place (not recorded as a rescaling):

    * ``tied``: the shared head/input matrix × factor (a tied high-norm backbone; tied rescaling by the
      same factor gives the original model back exactly — true by construction);
    * ``untie``: a copy of the head × factor (the model is untied afterwards);
    * ``transform``: the MLM transform's output LayerNorm (gain and shift) × factor, so every logit's
      ``h · W_v`` term grows by factor while the head stays *tied* to unchanged input embeddings — a large
      head scale that neither rescaling mode undoes by construction in tied mode;
    * ``positions``: the absolute position embeddings × factor (the word/position balance that tied
      rescaling disturbs).
    """
    factor = float(parse_k(factor))
    if target in RESCALE_MODES:
        return divide_head(model, 1.0 / factor, mode=target)
    if target == "transform":
        norm = MLMHead.of(model).transform_norm
        if norm is None:
            raise SpladekitError("no MLM-transform LayerNorm (outside the encoder) to inflate in this model")
        with torch.no_grad():
            for parameter in (norm.weight, norm.bias):
                if parameter is not None:
                    parameter.mul_(factor)
        return model
    if target == "positions":
        tables = [
            module
            for name, module in model.named_modules()
            if name.endswith("position_embeddings") and isinstance(module, nn.Embedding)
        ]
        if not tables:
            raise SpladekitError("no absolute position embeddings to inflate (a rotary model?)")
        with torch.no_grad():
            tables[0].weight.mul_(factor)
        return model
    raise SpladekitError(f"inflate target must be one of {', '.join(INFLATE_TARGETS)}, got {target!r}")
