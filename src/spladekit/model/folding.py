"""Vocabulary folding: token ids that differ only by letter case or a word-boundary marker share one dimension.

A fold is a many-to-one map ``f`` from the head's V token ids to D ≤ V output dimensions, applied after pooling:

    w'_d = max_{v : f(v) = d} w_v

(SPARSEUP v1, Linkup 2026, ``vocab_fold=case_space``: ModernBERT's 50k-token vocabulary folds to about 34k
dimensions). The map is built from the tokenizer's own vocabulary:

* ``space``: the tokenizer's word-boundary marker is dropped — byte-level BPE's leading ``Ġ`` (RoBERTa, ModernBERT,
  GPT-2), SentencePiece's leading ``▁`` (ALBERT, T5) or WordPiece's continuation prefix ``##`` (BERT), whichever
  the vocabulary uses most; a token that is only the marker keeps its own dimension;
* ``case``: letters are lowercased — ASCII letters only in byte-level BPE vocabularies, whose other characters
  stand for bytes (lowercasing them would merge unrelated byte sequences), every letter otherwise;
* ``case_space``: both.

Special tokens (``tokenizer.all_special_ids``) and ids past the tokenizer (embedding tables padded beyond it) are
never folded. Dimensions are numbered in the order of their lowest token id; each dimension's token string is
its lowest-id token's, so the strings stay distinct (indexes, CIFF and OpenSearch feature names rely on it).
With ``none`` there is no fold at all (:func:`build_fold` returns ``None``): the identity map.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import read_json
from spladekit.model.head_options import FOLDS

FOLD_FILE = "vocabulary_fold.json"  # beside a model's weights, and in every vectors folder it encodes
MARKERS = ("Ġ", "▁", "##")  # byte-level BPE and SentencePiece word starts, WordPiece continuations
BYTE_LEVEL_MARKER = "Ġ"


def vocabulary_marker(tokens: list[str | None]) -> str | None:
    """The word-boundary marker the vocabulary uses most (one of :data:`MARKERS`), or None when it has none."""
    counts = Counter(marker for token in tokens if token for marker in MARKERS if token.startswith(marker))
    return max(counts, key=counts.__getitem__) if counts else None


def fold_key(token: str, mode: str, marker: str | None) -> str:
    """The class a token falls in under ``mode``: tokens with one key share a dimension."""
    key = token
    if mode in ("space", "case_space") and marker is not None and key.startswith(marker) and len(key) > len(marker):
        key = key[len(marker) :]
    if mode in ("case", "case_space"):
        if marker == BYTE_LEVEL_MARKER:
            key = "".join(char.lower() if char.isascii() else char for char in key)
        else:
            key = key.lower()
    return key


@dataclass(frozen=True)
class VocabularyFold:
    """A fold of ``len(token_map)`` token ids onto ``len(dimension_tokens)`` dimensions (see the module docstring).

    ``token_map[v]`` is the dimension of token id v; ``dimension_tokens[d]`` the token string of dimension d."""

    mode: str
    marker: str | None
    token_map: np.ndarray
    dimension_tokens: tuple[str, ...]
    # the map as a tensor on each device it was used on (made once per device: dense() runs at every batch)
    _indices: dict[torch.device, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)

    @property
    def vocab_size(self) -> int:
        return len(self.token_map)

    @property
    def dimensions(self) -> int:
        return len(self.dimension_tokens)

    @property
    def folded_tokens(self) -> int:
        """Token ids that share their dimension with a lower id (0: the fold changed nothing)."""
        return self.vocab_size - self.dimensions

    def describe(self) -> str:
        marker = f"marker {self.marker!r}" if self.marker else "no word-boundary marker"
        return (
            f"vocab_fold={self.mode}: {self.vocab_size} token ids onto {self.dimensions} dimensions "
            f"({self.folded_tokens} folded; {marker})"
        )

    def dense(self, vectors: torch.Tensor) -> torch.Tensor:
        """B × V vectors (weights ≥ 0) → B × D: the max over each dimension's tokens; differentiable (torch's
        ``scatter_reduce`` amax: a max's gradient is shared evenly among tied tokens, as ``amax`` does)."""
        index = self._index(vectors.device).expand(vectors.shape[0], -1)
        out = vectors.new_zeros(vectors.shape[0], self.dimensions)
        return out.scatter_reduce(1, index, vectors, reduce="amax", include_self=False)

    def dimensions_of(self, token_ids: np.ndarray) -> np.ndarray:
        """The dimension of each token id."""
        return self.token_map[token_ids]

    def sparse(self, matrix: sp.csr_matrix) -> sp.csr_matrix:
        """An n × V CSR matrix → n × D: the max over each dimension's tokens (weights ≥ 0)."""
        coo = matrix.tocoo()
        columns = self.token_map[coo.col]
        folded = sp.coo_matrix((coo.data, (coo.row, columns)), shape=(matrix.shape[0], self.dimensions))
        # duplicates must reduce by max, not sum: order by (row, column, weight), keep the last of each (row, column)
        order = np.lexsort((folded.data, folded.col, folded.row))
        rows, cols, data = folded.row[order], folded.col[order], folded.data[order]
        last = np.ones(len(rows), dtype=bool)
        last[:-1] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        result = sp.csr_matrix((data[last], (rows[last], cols[last])), shape=folded.shape, dtype=matrix.dtype)
        result.sort_indices()
        return result

    def _index(self, device: torch.device) -> torch.Tensor:
        if device not in self._indices:
            self._indices[device] = torch.from_numpy(self.token_map).to(device=device, dtype=torch.long).unsqueeze(0)
        return self._indices[device]

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "marker": self.marker,
            "vocab_size": self.vocab_size,
            "dimensions": self.dimensions,
            "token_map": self.token_map.tolist(),
            "dimension_tokens": list(self.dimension_tokens),
        }

    def save(self, folder: Path) -> None:
        with atomic_file(folder / FOLD_FILE) as stream:
            stream.write(json.dumps(self.to_json(), ensure_ascii=False) + "\n")


def build_fold(tokenizer: Any, vocab_size: int, mode: str) -> VocabularyFold | None:
    """The fold of ``tokenizer``'s vocabulary under ``mode`` for a head of ``vocab_size`` ids (``None`` for
    ``none``, the identity)."""
    if mode not in FOLDS:
        raise SpladekitError(f"head.vocab_fold must be one of {', '.join(FOLDS)}, got {mode!r}")
    if mode == "none":
        return None
    known = min(vocab_size, len(tokenizer))
    tokens: list[str | None] = list(tokenizer.convert_ids_to_tokens(list(range(known))))
    marker = vocabulary_marker(tokens)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    token_map = np.empty(vocab_size, dtype=np.int64)
    classes: dict[str, int] = {}
    names: list[str] = []
    for index in range(vocab_size):
        token = tokens[index] if index < known else None
        if token is None or index in special:
            token_map[index] = len(names)
            names.append(token if token is not None else f"[id:{index}]")
            continue
        key = fold_key(token, mode, marker)
        if key not in classes:
            classes[key] = len(names)
            names.append(token)
        token_map[index] = classes[key]
    return VocabularyFold(mode, marker, token_map, tuple(names))


def read_fold(folder: Path, vocab_size: int | None = None) -> VocabularyFold | None:
    """The fold recorded in ``folder`` (a model or vectors folder), or None when it records none; a damaged record
    is an InputError naming the file."""
    path = folder / FOLD_FILE
    if not path.is_file():
        return None
    record = read_json(path, dict)
    try:
        token_map = np.asarray(record["token_map"], dtype=np.int64)
        names = tuple(str(name) for name in record["dimension_tokens"])
        mode, marker = record["mode"], record.get("marker")
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"not a vocabulary fold record ({error})", path) from None
    if mode not in FOLDS[1:] or token_map.ndim != 1 or not len(names):
        raise InputError("not a vocabulary fold record (mode, token_map or dimension_tokens)", path)
    if token_map.min(initial=0) < 0 or token_map.max(initial=0) >= len(names):
        raise InputError(f"token_map points outside the {len(names)} dimensions", path)
    if np.unique(token_map).size != len(names):
        raise InputError("some dimensions have no token", path)
    if vocab_size is not None and len(token_map) != vocab_size:
        raise InputError(f"the fold maps {len(token_map)} token ids, the model's head has {vocab_size}", path)
    return VocabularyFold(mode, marker, token_map, names)


class FoldedTokenizer:
    """What readers of token strings use of a tokenizer (``convert_ids_to_tokens``, ``convert_tokens_to_string``),
    with a fold's dimension ids in place of token ids: dimension d reads as its lowest-id token."""

    def __init__(self, tokenizer: Any, fold: VocabularyFold):
        self.tokenizer, self.fold = tokenizer, fold

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.fold.dimension_tokens[int(index)] for index in ids]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        if any(token.startswith("[id:") for token in tokens):
            return " ".join(tokens)
        return str(self.tokenizer.convert_tokens_to_string(tokens))


def dimension_tokenizer(model: Any) -> Any:
    """The tokenizer that names ``model``'s vector dimensions: its own, or with a fold a :class:`FoldedTokenizer`."""
    fold = getattr(model, "fold", None)
    return model.tokenizer if fold is None else FoldedTokenizer(model.tokenizer, fold)
