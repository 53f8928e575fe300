"""Where a model runs and in which precision: the one device rule and the one autocast of spladekit.

``resolve_device`` turns a user's ``--device`` (``auto``, ``cpu``, ``cuda``, ``cuda:1``…) into a
``torch.device``: ``auto`` is the process's GPU when CUDA is available (``cuda:LOCAL_RANK`` under
torchrun), else the CPU. ``autocast`` is the bf16 autocast of the backbone used by training (and by any
caller that wants it), on whatever device the tensors are: the SPLADE head (``pooling.py``) needs no
device-specific code, its matmuls and reductions are plain torch ops.

``resolve_precision`` is the one precision rule (``--precision auto|fp32|bf16|int8``, ``optimization.precision``):
``fp32``, ``bf16`` (autocast, the weights stay fp32) and ``int8`` (dynamic int8 quantization of the backbone's linear
layers, CPU encoding only: :func:`spladekit.model.loading.quantize_backbone`) are taken as given; ``auto`` follows
:func:`auto_precision`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch

from spladekit.common.errors import SpladekitError

AUTO = "auto"
FP32, BF16, INT8 = "fp32", "bf16", "int8"
PRECISIONS = (AUTO, FP32, BF16, INT8)  # what --precision and optimization.precision accept


def resolve_device(name: str | None = AUTO, local_rank: int = 0) -> torch.device:
    """``name`` as a ``torch.device``; ``None`` or ``"auto"``: ``cuda:local_rank`` when CUDA is available,
    else ``cpu``; a plain ``cuda`` is ``cuda:local_rank`` too. A device torch does not know, or a CUDA device
    this machine lacks, is a SpladekitError."""
    if name is None or name == AUTO:
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as error:
        raise SpladekitError(f"unknown device {name!r} ({error}); use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SpladekitError(
                f"device {name!r}: CUDA is not available on this machine (torch "
                f"{torch.__version__}, built with CUDA {torch.version.cuda}); use --device cpu"
            )
        if device.index is None:  # torch.cuda.set_device and the memory APIs refuse a device without one
            device = torch.device("cuda", local_rank)
        if device.index >= torch.cuda.device_count():
            raise SpladekitError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def autocast(device: torch.device, enabled: bool) -> AbstractContextManager:
    """bf16 autocast on ``device`` when ``enabled`` (a no-op context otherwise)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bf16 matrices natively: a CPU with AVX512-BF16 or AMX (torch's own probes; its
    public API has none), or a CUDA GPU whose torch reports bf16 support."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def auto_precision(device: torch.device) -> str:
    """What ``--precision auto`` runs on ``device``: fp32, on every device. int8 is never automatic (it is opt-in,
    encoding only).

    The rule may pick only a precision whose effectiveness parity with fp32 has been shown, by the pre-registered test
    of docs/results/precision-parity/PREDICTIONS.md (TOST within 0.002 nDCG@10 on each of five collections and on
    their mean). bf16 autocast did not pass it on the AVX512-BF16 CPU nor on an H200 (equivalent on the mean and on
    some collections, not shown on each), so ``auto`` is fp32 on CPUs and GPUs alike; ``bf16`` stays a user's choice.
    ``device`` stays a parameter: a precision that passes the test on some hardware is picked here, for it."""
    del device  # no device has shown parity for anything but fp32
    return FP32


def check_precision(precision: str, where: str = "--precision") -> str:
    """``precision`` when it is one of :data:`PRECISIONS`, else a SpladekitError naming ``where``."""
    if precision not in PRECISIONS:
        raise SpladekitError(f"{where} must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def resolve_precision(precision: str, device: torch.device, where: str = "--precision") -> str:
    """``precision`` (:data:`PRECISIONS`) as what runs on ``device``: ``fp32``, ``bf16`` or ``int8`` (``auto``:
    :func:`auto_precision`). int8 runs on the CPU only (torch's dynamic quantized kernels are CPU kernels)."""
    if check_precision(precision, where) == AUTO:
        return auto_precision(device)
    if precision == INT8 and device.type != "cpu":
        raise SpladekitError(f"{where} int8 runs on the CPU only (torch's dynamic int8 kernels); got device {device}")
    return precision
