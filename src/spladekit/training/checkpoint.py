"""Atomic training checkpoints: ``checkpoints/step-00000100/`` holds

* ``model/``: the encoder as a standard model folder (safetensors), loadable by every command;
* ``state.pt``: optimizer, LR scheduler and RNG states (tensors, numbers and strings only: written
  with ``torch.save``, read with ``torch.load(weights_only=True)``, which refuses arbitrary pickles);
* ``state.json``: the step (the data position: sampling is a pure function of the step, see
  ``spladekit.data.training``) for people and scripts.

A checkpoint folder appears complete under its final name or not at all, and only with finite weights and
optimizer state (NaN/inf is refused before anything is written), so the newest folder is always a good
one, even after ``kill -9`` or a diverged update.
"""

from __future__ import annotations

import json
import pickle  # only for its error type: torch.load(weights_only=True) refuses arbitrary pickles
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from spladekit.common.atomic import atomic_directory
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import reading

if TYPE_CHECKING:
    from spladekit.model.loading import RetrievalModel

PREFIX = "step-"


def rng_state() -> dict:
    state: dict[str, torch.Tensor | list[torch.Tensor]] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoints(output: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    folder = Path(output) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [
        path
        for path in folder.iterdir()
        if path.is_dir() and path.name.startswith(PREFIX) and path.name[len(PREFIX) :].isdigit()
    ]
    return sorted(found, key=lambda path: int(path.name[len(PREFIX) :]))


def non_finite_state(optimizer: torch.optim.Optimizer) -> int:
    """How many optimizer state tensors (AdamW moments…) hold NaN or inf."""
    tensors = [
        value
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel()
    ]
    if not tensors:
        return 0
    with torch.no_grad():
        return int((~torch.stack([torch.isfinite(value).all() for value in tensors])).sum())


def save_checkpoint(
    output: Path,
    step: int,
    encoder: RetrievalModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    keep: int,
) -> Path:
    """Write ``checkpoints/step-NNNNNNNN`` atomically and drop all but the newest ``keep``; NaN/inf weights or
    optimizer state are refused (SpladekitError) before anything is written or dropped."""
    target = Path(output) / "checkpoints" / f"{PREFIX}{step:08d}"
    encoder.check_finite(f"checkpoint at step {step} not written")
    damaged = non_finite_state(optimizer)
    if damaged:
        raise SpladekitError(
            f"checkpoint at step {step} not written: {damaged} optimizer state tensor(s) hold NaN or inf"
        )
    with atomic_directory(target, overwrite=True) as staging:
        encoder.save(staging / "model")
        torch.save(
            {
                "step": step,
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rng_state(),
            },
            staging / "state.pt",
        )
        (staging / "state.json").write_text(json.dumps({"step": step}) + "\n")
    for old in checkpoints(output)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_training_state(
    checkpoint: Path, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler
) -> int:
    """Restore optimizer, scheduler and RNG states; return the step the checkpoint was taken after.

    A damaged, foreign or mismatched ``state.pt`` is an :class:`InputError` naming it (nothing is restored
    from a file whose structure is wrong)."""
    path = Path(checkpoint) / "state.pt"
    with reading(path, "training state", RuntimeError, pickle.UnpicklingError):  # damaged, foreign or missing file
        state = torch.load(path, weights_only=True, map_location="cpu")
    kinds = {"optimizer": dict, "scheduler": dict, "rng": dict, "step": int}
    if (
        not isinstance(state, dict)
        or any(not isinstance(state.get(key), kind) for key, kind in kinds.items())
        or isinstance(state["step"], bool)
        or not isinstance(state["rng"].get("torch"), torch.Tensor)
    ):
        raise InputError("not a spladekit training state (expected step, optimizer, scheduler and rng states)", path)
    with reading(path, "training state (does not fit this run's optimizer)", RuntimeError):
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
    return int(state["step"])
