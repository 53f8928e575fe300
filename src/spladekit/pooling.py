"""SPLADE pooling over the vocabulary projection.

For every vocabulary term v (Formal et al., "SPLADE v2", arXiv:2109.10086, eq. 2 with max pooling):

    w_v = max_t  log(1 + ReLU(h_t · W_v + b_v))      over the non-padding tokens t

where h_t is the input of the vocabulary projection (the MLM transform output) for token t and
(W, b) the projection. Because log1p(ReLU(.)) >= 0, zeroing padded positions before the max gives
exactly the vector of the unpadded text.
"""

from __future__ import annotations

import torch


def splade_max_pool(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Reference (naive) SPLADE pooling: materializes the B × L × V logits. Returns B × V."""
    logits = hidden @ weight.to(hidden.dtype).T
    if bias is not None:
        logits = logits + bias.to(hidden.dtype)
    activations = torch.log1p(torch.relu(logits)) * attention_mask.unsqueeze(-1).to(logits.dtype)
    return activations.amax(dim=1)
