"""Load any retrieval model folder as the kind it is: :class:`SparseEncoder` or :class:`InferenceFreeEncoder`.

A folder is inference-free when its ``spladekit.json`` says ``"kind": "inference-free"`` or when it is a
sentence-transformers ``Router`` folder (see :mod:`spladekit.model.foreign`); anything else (plain HF
masked-LM folders, spladekit and sentence-transformers SPLADE folders, naver/splade checkpoints, hub ids)
is a :class:`SparseEncoder`. Commands that encode queries and documents load their model here.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Union

import torch

from spladekit.common.devices import BF16, FP32, INT8, check_precision, resolve_device, resolve_precision
from spladekit.common.errors import SpladekitError
from spladekit.common.sources import is_local_model
from spladekit.model.backbone import MLMHead
from spladekit.model.encoder import DEFAULT_POOLING, SparseEncoder
from spladekit.model.foreign import resolve_model_folder
from spladekit.model.inference_free import KIND, InferenceFreeEncoder
from spladekit.model.metadata import read_metadata

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
    precision: str = FP32,
) -> RetrievalModel:
    """The model in ``path_or_id``, as its kind (``max_length``: the document token limit; ``compiled``: its backbone
    compiled and frozen for encoding, see :meth:`~spladekit.model.encoder.SparseEncoder.compile_backbone`).

    ``precision`` (``auto``, ``fp32``, ``bf16``, ``int8``; :func:`spladekit.common.devices.resolve_precision` on the
    model's device): bf16 encodes under bf16 autocast (see :class:`spladekit.model.encoder.SparseEncoder`), int8 with
    the backbone's linear layers quantized (:func:`quantize_backbone`); the model's ``precision`` says which ran.
    ``bf16=True`` is the older spelling of ``precision="bf16"``."""
    check_precision(precision)
    if bf16 and precision not in (FP32, BF16):
        raise SpladekitError(f"bf16 and precision {precision!r} contradict each other: give only precision")
    where = resolve_device(device) if device is not None else torch.device("cpu")  # where from_pretrained puts it
    resolved = BF16 if bf16 else resolve_precision(precision, where)
    if resolved == INT8 and compiled:
        raise SpladekitError("--compile and --precision int8 exclude each other (a quantized backbone is not compiled)")
    kind = InferenceFreeEncoder if is_inference_free(path_or_id) else SparseEncoder
    model = kind.from_pretrained(
        path_or_id,
        trust_remote_code=trust_remote_code,
        device=device,
        max_length=max_length,
        pooling=pooling,
        bf16=resolved == BF16,
    )
    if resolved == INT8:
        quantize_backbone(model)
    if compiled:
        model.compile_backbone(frozen=True)
    return model


def quantize_backbone(model: RetrievalModel) -> RetrievalModel:
    """Quantize the (document) encoder's linear layers to int8 in place, for encoding on the CPU: torch's dynamic
    quantization (int8 weights, activations quantized per batch, int32 accumulation; fp32 outside the linears). The
    vocabulary projection stays fp32 (the SPLADE head multiplies by its weight itself), and so does everything that is
    not an ``nn.Linear`` (embeddings, LayerNorms, attention's softmax). The vectors are close to fp32's, not equal
    (tests/common/test_precision.py; parity: docs/results/precision-parity/PREDICTIONS.md). A quantized model has no
    backward: it is for encoding only. Its :func:`model_fingerprint` stays that of its fp32 weights (the precision is
    recorded beside it). Returns ``model``."""
    encoder = model.document_encoder if isinstance(model, InferenceFreeEncoder) else model
    if encoder.precision == INT8:
        return model
    if encoder.device.type != "cpu":
        raise SpladekitError(
            f"precision int8 runs on the CPU only (torch's dynamic int8 kernels), not {encoder.device}"
        )
    try:
        from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic
    except ImportError:
        raise SpladekitError(
            f"precision int8 needs torch.ao.quantization.quantize_dynamic, which torch {torch.__version__} lacks; "
            "the ONNX export has its own int8 (spladekit export onnx --int8)"
        ) from None
    fingerprint = model_fingerprint(model)  # of the fp32 weights, before their packing
    projection = MLMHead.of(encoder.model).path
    linears = [
        name
        for name, module in encoder.model.named_modules()
        if isinstance(module, torch.nn.Linear) and name != projection
    ]
    with warnings.catch_warnings():  # torch 2.10+ marks torch.ao.quantization deprecated (torchao is its successor)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*", category=UserWarning)
        quantize_dynamic(
            encoder.model, dict.fromkeys(linears, default_dynamic_qconfig), dtype=torch.qint8, inplace=True
        )
    encoder.precision = INT8
    model._weights_fingerprint = fingerprint  # type: ignore[assignment]  # nn.Module types attributes as tensors
    return model


def model_fingerprint(encoder: RetrievalModel) -> str:
    """sha256 over every parameter and buffer (name, dtype, shape, bytes), the tokenizer's size and the head options:
    what identifies a model's vectors (the evaluation cache's key, a sharded vectors folder's plan). An int8 model
    (:func:`quantize_backbone`) keeps the fingerprint of the fp32 weights it was quantized from."""
    recorded = getattr(encoder, "_weights_fingerprint", None)
    if recorded is not None:
        return recorded
    digest = hashlib.sha256()
    for name, tensor in sorted(encoder.model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    digest.update(f"tokenizer|{type(encoder.tokenizer).__name__}|{len(encoder.tokenizer)}".encode())
    if not encoder.head_options.plain:  # the same weights with other head options give other vectors
        digest.update(f"head|{json.dumps(encoder.head_options.to_dict(), sort_keys=True)}".encode())
    return digest.hexdigest()
