"""Packing: a batch's texts laid end to end in a few rows, so the backbone computes (almost) no padding.

A padded batch of B texts costs B × L_max tokens through every layer; real batches are far from their
longest text (MS MARCO passages: 80.6 BERT tokens on average, a random training batch of 128 padded to
184). Packed, the same texts fill R ≈ Σ lengths / L_max rows of L_max tokens (first-fit decreasing), and
each text computes exactly what it computes alone:

* **positions**: every text's position ids restart as if it were alone (RoBERTa's start after its padding
  id, as its own ``create_position_ids_from_input_ids`` does; sentence-transformers #3879 missed this);
* **attention**: a text attends only to itself — a block-diagonal mask built by transformers' own mask
  functions (``packed_sequence_mask_function``), so it has the form the model's attention implementation
  expects; ModernBERT's local layers get the same blocks intersected with their sliding window (within a
  row a text's tokens keep their distances, so the window is the one it has alone).

The backbone's output is put back in the padded B × L_max layout (:func:`unpack`) for the SPLADE head,
whose max pooling is per text. Vectors equal the padded path's up to float rounding (tests: every seed
architecture, vectors and gradients). Architectures outside :data:`PACKABLE`, and attention
implementations other than ``sdpa`` and ``eager``, keep the padded path (:func:`packable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Architectures whose forward takes position ids and a prepared 4-D mask (transformers >= 5), each tested
# against its padded forward in tests/model/test_packing.py. GTE (remote code) and others stay padded.
PACKABLE = frozenset({"bert", "distilbert", "albert", "electra", "roberta", "xlm-roberta", "camembert", "modernbert"})
# Attention implementations that read the mask transformers builds (flash and flex attention take packed
# sequences their own way).
MASKED_ATTENTION = frozenset({"sdpa", "eager"})


def packable(model: PreTrainedModel) -> bool:
    """Whether ``model``'s forward can run packed rows (its architecture and attention implementation)."""
    config = model.config
    return config.model_type in PACKABLE and config._attn_implementation in MASKED_ATTENTION


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` in rows of at most ``capacity`` tokens: the longest text first, each into the
    first row it fits (first-fit decreasing: at most 11/9 · optimum + 1 rows)."""
    if any(length > capacity for length in lengths):
        raise ValueError(f"a text of {max(lengths)} tokens does not fit a row of {capacity}")
    rows: list[list[int]] = []
    room: list[int] = []
    for index in np.argsort(-np.asarray(lengths), kind="stable").tolist():
        row = next((r for r, free in enumerate(room) if free >= lengths[index]), len(rows))
        if row == len(rows):
            rows.append([])
            room.append(capacity)
        rows[row].append(index)
        room[row] -= lengths[index]
    return rows


@dataclass(frozen=True)
class PackedBatch:
    """R rows of P tokens holding B texts end to end. ``inputs``: the model's inputs (``input_ids``,
    ``position_ids``, ``token_type_ids`` when the tokenizer gives them), R × P; ``segments``: R × P, the
    text's place in its row from 1 (0: padding at a row's end); text i is tokens ``starts[i]`` to
    ``starts[i] + lengths[i]`` of row ``rows[i]``."""

    inputs: dict[str, torch.Tensor]
    segments: torch.Tensor
    rows: torch.Tensor
    starts: torch.Tensor
    lengths: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return self.segments.shape[0], self.segments.shape[1]


def position_offset(model: PreTrainedModel) -> int:
    """The first position id of a text: 0, or RoBERTa's ``padding_idx + 1`` (its embeddings number positions
    from there, ``create_position_ids_from_input_ids``)."""
    embeddings = getattr(model.base_model, "embeddings", None)
    if embeddings is not None and hasattr(embeddings, "create_position_ids_from_input_ids"):
        return int(embeddings.padding_idx) + 1
    return 0


def pack(encodings: dict[str, list[list[int]]], pad_token_id: int, offset: int, device: torch.device) -> PackedBatch:
    """Pack the tokenized texts (``encodings``: per input name, one id list per text) into rows as long as the
    longest text (:func:`first_fit_decreasing`); ``offset``: the first position id (:func:`position_offset`)."""
    ids = encodings["input_ids"]
    lengths = np.array([len(text) for text in ids])
    layout = first_fit_decreasing(lengths.tolist(), int(lengths.max()))
    shape = (len(layout), int(lengths.max()))
    names = [name for name in ("input_ids", "token_type_ids") if name in encodings]
    fill = {"input_ids": pad_token_id}  # token type ids of padding: 0
    columns: dict[str, np.ndarray] = {name: np.full(shape, fill.get(name, 0), dtype=np.int64) for name in names}
    positions = np.zeros(shape, dtype=np.int64)
    segments = np.zeros(shape, dtype=np.int64)
    rows, starts = np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids), dtype=np.int64)
    for row, members in enumerate(layout):
        start = 0
        for place, text in enumerate(members, start=1):
            stop = start + lengths[text]
            for name in names:
                columns[name][row, start:stop] = encodings[name][text]
            positions[row, start:stop] = np.arange(offset, offset + lengths[text])
            segments[row, start:stop] = place
            rows[text], starts[text] = row, start
            start = stop
    columns["position_ids"] = positions
    tensor = {name: torch.from_numpy(values).to(device) for name, values in columns.items()}
    return PackedBatch(tensor, *(torch.from_numpy(values).to(device) for values in (segments, rows, starts, lengths)))


def block_diagonal_mask(model: PreTrainedModel, packed: PackedBatch) -> torch.Tensor | dict[str, torch.Tensor]:
    """The block-diagonal mask of ``packed`` in the form ``model``'s attention implementation reads, made by
    transformers' mask interface (``sdpa_mask``: booleans, ``eager_mask``: 0 / lowest float): a token attends to
    the tokens of its own text (a row's padding, segment 0, only to padding, so no query row is empty). The mask
    functions are index-based, so they are broadcast without ``vmap`` (tens of µs a batch; ``vmap`` took
    milliseconds). ModernBERT gets ``{"full_attention", "sliding_attention"}``, its local layers' window
    intersected with the blocks."""
    from transformers.masking_utils import (
        ALL_MASK_ATTENTION_FUNCTIONS,
        and_masks,
        bidirectional_mask_function,
        packed_sequence_mask_function,
        sliding_window_bidirectional_overlay,
    )

    config = model.config
    rows, width = packed.shape
    same_text = and_masks(bidirectional_mask_function, packed_sequence_mask_function(packed.segments))

    def build(mask_function):
        return ALL_MASK_ATTENTION_FUNCTIONS[config._attn_implementation](
            batch_size=rows,
            q_length=width,
            kv_length=width,
            mask_function=mask_function,
            dtype=next(model.parameters()).dtype,
            device=packed.segments.device,
            use_vmap=False,
            allow_is_causal_skip=False,  # never None: without it a mask function is taken for a causal one
            allow_is_bidirectional_skip=False,
        )

    if config.model_type != "modernbert":
        return build(same_text)
    window = sliding_window_bidirectional_overlay(config.sliding_window)
    return {"full_attention": build(same_text), "sliding_attention": build(and_masks(window, same_text))}


def unpack(hidden: torch.Tensor, packed: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The packed rows' hidden states (R × P × H) as a padded batch: B × L_max × H (zeros at padding) and its
    B × L_max attention mask, text i's tokens first in row i."""
    rows, width = packed.shape
    longest = int(packed.lengths.max())
    steps = torch.arange(longest, device=hidden.device)
    real = steps.unsqueeze(0) < packed.lengths.unsqueeze(1)  # B × L_max
    flat = torch.cat([hidden.reshape(rows * width, -1), hidden.new_zeros(1, hidden.shape[2])])
    index = (packed.rows * width + packed.starts).unsqueeze(1) + steps
    index = torch.where(real, index, rows * width)  # padding reads the zero row
    return flat[index], real.long()
