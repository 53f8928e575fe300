"""How texts become batches: one string is one text, batches halve after an out-of-memory error, and a batch is cut
into length groups (the cut that pads fewest tokens) whose outputs are put back in the texts' order."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from spladekit.common.errors import SpladekitError

log = logging.getLogger("spladekit")

LENGTH_SLICE = 1024  # texts tokenized at once to measure their lengths


def text_list(texts: str | Sequence[str]) -> list[str]:
    """The texts to encode: one string is one text (as in sentence-transformers), never its characters."""
    return [texts] if isinstance(texts, str) else list(texts)


def smaller_batch(batch_size: int, device: torch.device) -> int:
    """Half of ``batch_size`` after an out-of-memory error (the cached blocks freed first), logged once per halving."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    smaller = max(1, batch_size // 2)
    log.warning(
        "a batch of %d texts did not fit in %s memory: continuing with batches of %d", batch_size, device, smaller
    )
    return smaller


def length_groups(lengths: np.ndarray, groups: int) -> list[np.ndarray]:
    """Positions of ``lengths`` cut into at most ``groups`` groups of consecutive lengths (sorted), the cut that
    pads fewest tokens: minimises Σ_g |g| · max(g) by dynamic programming over the sorted lengths (O(groups · n²)
    numpy work; n is one batch's texts)."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise SpladekitError(f"length groups must be an integer >= 1, got {groups!r}")
    order = np.argsort(lengths, kind="stable")
    ordered = np.asarray(lengths)[order].astype(np.int64)
    n = len(ordered)
    starts = np.arange(n)
    best = np.concatenate([[0], np.full(n, np.iinfo(np.int64).max // 4)])  # best[j]: first j texts, 0 groups
    cuts = []
    for _ in range(min(groups, n)):
        new, cut = best.copy(), np.zeros(n + 1, dtype=np.int64)
        for end in range(1, n + 1):  # a group of texts start..end-1 padded to ordered[end - 1]
            costs = best[:end] + (end - starts[:end]) * ordered[end - 1]
            cut[end] = int(np.argmin(costs))
            new[end] = costs[cut[end]]
        cuts.append(cut)
        best = new
    bounds, end = [], n
    for cut in reversed(cuts):
        if end == 0:
            break
        bounds.append((int(cut[end]), end))
        end = int(cut[end])
    return [order[start:stop] for start, stop in reversed(bounds) if stop > start]


def in_order(parts: Sequence[torch.Tensor], cut: Sequence[np.ndarray]) -> torch.Tensor:
    """The rows of ``parts`` (part g holds the texts at positions ``cut[g]``) in the texts' order."""
    order = torch.from_numpy(np.concatenate(cut)).to(parts[0].device)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order), device=order.device)
    return torch.cat(list(parts))[inverse]
