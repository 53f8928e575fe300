"""Load any retrieval model folder as the kind it is: :class:`SparseEncoder` or :class:`InferenceFreeEncoder`.

A folder is inference-free when its ``spladekit.json`` says ``"kind": "inference-free"`` or when it is a
sentence-transformers ``Router`` folder (see :mod:`spladekit.model.foreign`); anything else (plain HF
masked-LM folders, spladekit and sentence-transformers SPLADE folders, naver/splade checkpoints, hub ids)
is a :class:`SparseEncoder`. Commands that encode queries and documents load their model here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Union

import torch

from spladekit.common.sources import is_local_model
from spladekit.model.encoder import DEFAULT_POOLING, SparseEncoder, read_metadata
from spladekit.model.foreign import resolve_model_folder
from spladekit.model.inference_free import KIND, InferenceFreeEncoder

RetrievalModel = Union[SparseEncoder, InferenceFreeEncoder]


def is_inference_free(path_or_id: str | Path) -> bool:
    """True for a local inference-free folder (spladekit's, or a sentence-transformers Router)."""
    if not is_local_model(str(path_or_id)):
        return False
    path = Path(path_or_id).expanduser()
    if not path.is_dir():
        return False
    if resolve_model_folder(path).kind == "sentence-transformers-router":
        return True
    return read_metadata(path).get("kind") == KIND


def load_model(
    path_or_id: str | Path,
    trust_remote_code: bool = False,
    device: str | None = None,
    max_length: int | None = None,
    pooling: str = DEFAULT_POOLING,
    bf16: bool = False,
    compiled: bool = False,
) -> RetrievalModel:
    """The model in ``path_or_id``, as its kind (``max_length``: the document token limit; ``bf16``: encode under
    bf16 autocast, see :class:`spladekit.model.encoder.SparseEncoder`; ``compiled``: its backbone compiled and frozen
    for encoding, see :meth:`~spladekit.model.encoder.SparseEncoder.compile_backbone`)."""
    kind = InferenceFreeEncoder if is_inference_free(path_or_id) else SparseEncoder
    model = kind.from_pretrained(
        path_or_id,
        trust_remote_code=trust_remote_code,
        device=device,
        max_length=max_length,
        pooling=pooling,
        bf16=bf16,
    )
    if compiled:
        model.compile_backbone(frozen=True)
    return model


def model_fingerprint(encoder: RetrievalModel) -> str:
    """sha256 over every parameter and buffer (name, dtype, shape, bytes), the tokenizer's size and the head options:
    what identifies a model's vectors (the evaluation cache's key, a sharded vectors folder's plan)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(encoder.model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    digest.update(f"tokenizer|{type(encoder.tokenizer).__name__}|{len(encoder.tokenizer)}".encode())
    if not encoder.head_options.plain:  # the same weights with other head options give other vectors
        digest.update(f"head|{json.dumps(encoder.head_options.to_dict(), sort_keys=True)}".encode())
    return digest.hexdigest()
