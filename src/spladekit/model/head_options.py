"""How the SPLADE head turns logits into a vector, beyond the scale of its weights: one record, kept with the model.

For token t of a text and vocabulary term v, with logit ``ℓ_tv = h_t · W_v + b_v``:

* ``logit_shift`` s ≥ 0 (SPARSEUP v1, Linkup 2026: s = 15, "so ReLU support starts sparse")::

      w_v = max_t log(1 + ReLU(ℓ_tv − s))

  exactly a bias of ``b_v − s``, which is how every head applies it (the same values and gradients everywhere);
* ``position_top_k`` K ≥ 1 (SPARSEUP v1: K = 12): each token keeps only its K largest logits before the max over
  tokens (ties at the K-th place go to the lower vocabulary id); the gradient flows only through what was kept;
* ``vocab_fold`` (``none``, ``case``, ``space``, ``case_space``; SPARSEUP v1: ``case_space``): token ids that differ
  only by letter case and/or the tokenizer's word-boundary marker share one output dimension, whose weight is the
  max over its tokens, after pooling (:mod:`spladekit.model.folding`);
* ``lowercase``: texts are lowercased before tokenization ("To Case or Not to Case", arXiv 2601.17500: cased
  backbones retrieve much worse unless the input is lowercased).

Defaults are the plain SPLADE head (no shift, no top-k, no fold, the text as given). The record is written to the
model's ``spladekit.json`` (``head``), its card, and every vectors folder it encodes; training configs take the
same keys under ``head.`` (``spladekit keys train``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.schema import build_dataclass, check_declared, declared

FOLDS = ("none", "case", "space", "case_space")
Fold = Literal["none", "case", "space", "case_space"]


@dataclass(frozen=True)
class HeadOptions:
    logit_shift: float = declared(
        0.0, "s in w_v = max_t log(1 + ReLU(logit - s)): a term is active only where its logit exceeds s", minimum=0
    )
    position_top_k: int | None = declared(
        None, "each token keeps only its K largest logits before the max over tokens (null: all)", minimum=1
    )
    vocab_fold: Fold = declared(
        "none",
        "fold tokens that differ only by letter case (case), the word-boundary marker (space) or both (case_space) "
        "onto one output dimension, the max over them",
    )
    lowercase: bool = declared(False, "lowercase the texts before tokenization (for cased vocabularies)")

    def __post_init__(self) -> None:
        # the same rule for options built in Python as for those read from a file (build_dataclass checks those)
        shift = self.logit_shift
        if isinstance(shift, bool) or not isinstance(shift, (int, float)) or not math.isfinite(shift) or shift < 0:
            raise SpladekitError(f"head.logit_shift must be a finite number >= 0, got {shift!r}")
        top_k = self.position_top_k
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise SpladekitError(f"head.position_top_k must be an integer >= 1 or null, got {top_k!r}")
        if self.vocab_fold not in FOLDS:
            raise SpladekitError(f"head.vocab_fold must be one of {', '.join(FOLDS)}, got {self.vocab_fold!r}")
        if not isinstance(self.lowercase, bool):
            raise SpladekitError(f"head.lowercase must be true or false, got {self.lowercase!r}")

    @property
    def plain(self) -> bool:
        """Whether this is the plain SPLADE head (nothing to record, nothing an export has to carry)."""
        return self == HeadOptions()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def changed(self) -> dict:
        """The options that differ from the plain head, as ``{name: value}`` (for cards and one-line reports)."""
        plain = HeadOptions()
        return {name: value for name, value in self.to_dict().items() if value != getattr(plain, name)}

    def describe(self) -> str:
        changed = self.changed()
        return ", ".join(f"{name}={value}" for name, value in changed.items()) if changed else "plain SPLADE head"

    def prepare_texts(self, texts: Sequence[str]) -> list[str]:
        """The texts as the tokenizer sees them: lowercased under ``lowercase`` (the one place that rule lives)."""
        return [text.lower() for text in texts] if self.lowercase else list(texts)

    def check_vocabulary(self, vocab_size: int) -> None:
        """A SpladekitError naming the key when ``position_top_k`` exceeds the ``vocab_size`` logits a token has."""
        if self.position_top_k is not None and self.position_top_k > vocab_size:
            raise SpladekitError(
                f"head.position_top_k must be at most the vocabulary size {vocab_size}, got {self.position_top_k}"
            )


def head_options(values: object = None, source: str | Path | None = None, prefix: str = "head.") -> HeadOptions:
    """:class:`HeadOptions` from a mapping (a config section, a ``spladekit.json`` record; ``None``: the plain head),
    each key checked against its declaration: an unknown key or a bad value is one error naming the key (and
    ``source``, the file it came from)."""
    if values is None:
        return HeadOptions()
    if isinstance(values, HeadOptions):
        check_declared(values, prefix, None if source is None else str(source))
        return values
    if not isinstance(values, dict):
        message = f"{prefix.rstrip('.')} must be a mapping of head options, got {type(values).__name__}"
        raise InputError(message, source) if source is not None else SpladekitError(message)
    options = build_dataclass(HeadOptions, dict(values), prefix, None if source is None else str(source))
    return options
