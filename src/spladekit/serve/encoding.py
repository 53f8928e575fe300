"""The served model behind one interface, whatever it is: a SPLADE model, an inference-free model (spladekit's or a
sentence-transformers ``Router`` folder; :func:`spladekit.model.loading.load_model`) or an exported ONNX folder
(:class:`spladekit.model.onnx.OnnxEncoder`, onnxruntime).

Three tokenizers, one per thread: the model's own, used only by the encoding thread (:meth:`ServedModel.encode`,
which sets its truncation side per batch), a copy for the request side (token counts, ``/tokenize``) used only by
the tokenization thread, and a copy that counts the tokens of small requests on the event loop itself (a hop to a
thread costs more than tokenizing a query): a Hugging Face fast tokenizer is not safe to call from two threads at
once (its Rust state is borrowed mutably when truncation is set).

Served vectors are the model's own: :meth:`ServedModel.encode` is ``model.encode_document`` (the same as
``model.encode``) or ``model.encode_query`` over the texts of one batch.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from spladekit.common.errors import SpladekitError

KINDS = ("splade", "inference-free", "onnx")


@dataclass(frozen=True)
class Counted:
    """One input as the request side saw it: the text to encode (ids decoded, characters capped) and its tokens
    before any truncation."""

    text: str
    tokens: int


def is_onnx_folder(path: str | Path) -> bool:
    folder = Path(path)
    return folder.is_dir() and (folder / "onnx.json").is_file() and (folder / "model.onnx").is_file()


class ServedModel:
    """A retrieval model with what serving needs: token limits per side, token counting, batch encoding."""

    def __init__(self, model: Any, source: str):
        from spladekit.model.inference_free import InferenceFreeEncoder

        self.model, self.source = model, source
        if type(model).__name__ == "OnnxEncoder":
            self.kind = "onnx"
            self.inference_free_queries = getattr(model, "query_table", None) is not None
        else:
            self.kind = "inference-free" if isinstance(model, InferenceFreeEncoder) else "splade"
            self.inference_free_queries = self.kind == "inference-free"
        self.tokenizer = model.tokenizer  # the encoding thread's
        self.request_tokenizer = copy.deepcopy(model.tokenizer)  # the tokenization thread's
        self.loop_tokenizer = copy.deepcopy(model.tokenizer)  # the event loop's (small requests' counts)
        self.vocab_size = int(model.vocab_size)
        self._tokens: list[str] | None = None

    # ------------------------------------------------------------------ limits
    def limit(self, side: str) -> int:
        """The token limit of ``side`` (the model's own: ``side_max_length``)."""
        return int(self.model.side_max_length(side))

    @property
    def max_input_length(self) -> int:
        return self.limit("document")

    def special_tokens(self, side: str) -> bool:
        """Whether ``side`` is tokenized with special tokens (inference-free queries are not)."""
        return not (side == "query" and self.inference_free_queries)

    # ------------------------------------------------------------------ request side (tokenization thread)
    def count(self, texts: Sequence[str], side: str, on_loop: bool = False) -> list[int]:
        """Tokens of each text, untruncated, as ``side`` tokenizes it (``on_loop``: with the event loop's
        tokenizer, else the tokenization thread's)."""
        if not texts:
            return []
        tokenizer = self.loop_tokenizer if on_loop else self.request_tokenizer
        encoded = tokenizer(list(texts), add_special_tokens=self.special_tokens(side), truncation=False, verbose=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def decode_ids(self, ids: Sequence[int]) -> str:
        """The text of token ids given as an input (special tokens dropped: encoding adds the model's own)."""
        if any(i >= len(self.request_tokenizer) for i in ids):
            raise SpladekitError(f"token id out of the vocabulary (size {len(self.request_tokenizer)})")
        return self.request_tokenizer.decode(list(ids), skip_special_tokens=True)

    def tokenize(self, text: str, add_special_tokens: bool) -> list[dict]:
        """TEI's ``SimpleToken`` list of one text (offsets in UTF-8 bytes, as TEI's Rust strings count them)."""
        encoded = self.request_tokenizer(
            text,
            add_special_tokens=add_special_tokens,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            truncation=False,
            verbose=False,
        )
        ids = encoded["input_ids"]
        tokens = self.request_tokenizer.convert_ids_to_tokens(ids)
        special = encoded.get("special_tokens_mask") or [0] * len(ids)
        result = []
        for token_id, token, (start, stop), is_special in zip(ids, tokens, encoded["offset_mapping"], special):
            if is_special:
                result.append({"id": token_id, "text": token, "special": True, "start": None, "stop": None})
                continue
            byte_start = len(text[:start].encode("utf-8"))
            byte_stop = byte_start + len(text[start:stop].encode("utf-8"))
            result.append(
                {"id": token_id, "text": text[start:stop], "special": False, "start": byte_start, "stop": byte_stop}
            )
        return result

    # ------------------------------------------------------------------ encoding thread
    def encode(self, texts: list[str], side: str, direction: str = "right") -> sp.csr_matrix:
        """float32 CSR vectors of ``texts`` on ``side``, in one forward pass (``batch_size = len(texts)``), cut at
        the side's token limit from the ``direction`` given ("right": keep the start, as ``encode`` does)."""
        from spladekit.model.pooling import keep_reusing_projection

        keep_reusing_projection()  # this thread only serves: the head's projection matrix is built once
        encode = self.model.encode_query if side == "query" else self.model.encode_document
        saved = getattr(self.tokenizer, "truncation_side", "right")
        self.tokenizer.truncation_side = direction
        try:
            return encode(texts, batch_size=max(1, len(texts)), show_progress=False)
        finally:
            self.tokenizer.truncation_side = saved

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocabulary(self) -> list[str]:
        """The token string of every index (``[id:N]`` past the tokenizer), computed once."""
        if self._tokens is None:
            tokens = self.dimension_tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))
            self._tokens = [token if token is not None else f"[id:{i}]" for i, token in enumerate(tokens)]
        return self._tokens

    @property
    def dimension_tokenizer(self) -> Any:
        """What names the vector dimensions (the tokenization thread's tokenizer, through the model's vocabulary
        fold when it has one: :func:`spladekit.model.folding.dimension_tokenizer`)."""
        from spladekit.model.folding import FoldedTokenizer

        fold = getattr(self.model, "fold", None)
        return self.request_tokenizer if fold is None else FoldedTokenizer(self.request_tokenizer, fold)

    def describe(self) -> dict:
        """What the page and ``/info`` show of the model (its card summary)."""
        model = getattr(self.model, "model", None)
        config = getattr(model, "config", None)
        parameters = None
        if model is not None:
            parameters = int(sum(int(np.prod(p.shape)) for p in model.parameters()))
        rescale = None
        if model is not None and config is not None:
            from spladekit.model.head import rescale_record

            rescale = rescale_record(model)
        return {
            "kind": self.kind,
            "source": self.source,
            "backbone": getattr(self.model, "original_backbone", None),
            "architecture": getattr(config, "model_type", None),
            "parameters": parameters,
            "vocab_size": self.vocab_size,
            "max_length": self.limit("document"),
            "query_max_length": self.limit("query"),
            "pooling": getattr(self.model, "pooling", None),
            "precision": getattr(self.model, "precision", "fp32"),
            "device": str(getattr(self.model, "device", "cpu")),
            "rescale": rescale,
            "card": card_summary(self.source),
        }


def card_summary(source: str, limit: int = 600) -> str | None:
    """The first paragraph of the model folder's README.md (its card) under the title, if there is one."""
    path = Path(source) / "README.md"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.startswith("---"):  # the card's metadata block
        text = text.split("---", 2)[-1]
    paragraphs = [block.strip() for block in text.split("\n\n") if block.strip()]
    for block in paragraphs:
        if not block.startswith(("#", "```", "|", "<")):
            return block[:limit]
    return None


def load_served_model(
    path_or_id: str,
    device: str | None = None,
    trust_remote_code: bool = False,
    precision: str = "fp32",
    threads: int = 0,
    pooling: str = "auto",
) -> ServedModel:
    """Whatever ``spladekit serve MODEL`` names: an exported ONNX folder (``onnx.json`` + ``model.onnx``, run on the
    CPU by onnxruntime), else anything :func:`spladekit.model.loading.load_model` reads."""
    if is_onnx_folder(path_or_id):
        from spladekit.model.onnx import OnnxEncoder

        if device not in (None, "auto", "cpu"):
            raise SpladekitError(f"{path_or_id}: an ONNX folder runs on the CPU (onnxruntime), not --device {device}")
        return ServedModel(OnnxEncoder(path_or_id, threads=threads), str(path_or_id))
    from spladekit.model.loading import load_model

    return ServedModel(
        load_model(
            path_or_id, trust_remote_code=trust_remote_code, device=device, precision=precision, pooling=pooling
        ),
        str(path_or_id),
    )
