"""Where a model runs and in which precision: the one device rule and the one autocast of spladekit.

``resolve_device`` turns a user's ``--device`` (``auto``, ``cpu``, ``cuda``, ``cuda:1``…) into a
``torch.device``: ``auto`` is the process's GPU when CUDA is available (``cuda:LOCAL_RANK`` under
torchrun), else the CPU. ``autocast`` is the bf16 autocast of the backbone used by training (and by any
caller that wants it), on whatever device the tensors are: the SPLADE head (``pooling.py``) needs no
device-specific code, its matmuls and reductions are plain torch ops.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch

from spladekit.common.errors import SpladekitError

AUTO = "auto"


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
