"""checkpoint.py: a damaged or foreign state.pt is one error naming it, never a traceback or a partial restore."""

from __future__ import annotations

import re

import pytest
import torch

from spladekit.common.errors import InputError
from spladekit.training.checkpoint import load_training_state, rng_state


def optimizer_and_scheduler():
    parameter = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([parameter], lr=0.1)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)


def valid_state(step=4) -> dict:
    optimizer, scheduler = optimizer_and_scheduler()
    return {"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()}


def test_a_valid_state_is_restored(tmp_path):
    torch.save(valid_state(), tmp_path / "state.pt")
    assert load_training_state(tmp_path, *optimizer_and_scheduler()) == 4


@pytest.mark.parametrize(
    "damage, message",
    [
        ("empty", "corrupt or unreadable training state"),
        ("truncated", "corrupt or unreadable training state"),
        ("a list", "not a spladekit training state"),
        ("no optimizer", "not a spladekit training state"),
        ("step a string", "not a spladekit training state"),
        ("foreign optimizer", "corrupt or unreadable training state (does not fit this run's optimizer)"),
    ],
)
def test_damaged_or_foreign_state_is_an_error_naming_state_pt(tmp_path, damage, message):
    path = tmp_path / "state.pt"
    state = valid_state()
    if damage == "a list":
        torch.save([1, 2], path)
    elif damage == "no optimizer":
        torch.save({key: value for key, value in state.items() if key != "optimizer"}, path)
    elif damage == "step a string":
        torch.save(state | {"step": "4"}, path)
    elif damage == "foreign optimizer":  # two parameter groups saved, one in this run
        two = torch.optim.AdamW(
            [{"params": [torch.nn.Parameter(torch.zeros(1))]}, {"params": [torch.nn.Parameter(torch.zeros(1))]}]
        )
        torch.save(state | {"optimizer": two.state_dict()}, path)
    else:
        torch.save(state, path)
        data = path.read_bytes()
        path.write_bytes(b"" if damage == "empty" else data[: len(data) // 2])
    with pytest.raises(InputError, match=re.escape(f"{path}: {message}")):
        load_training_state(tmp_path, *optimizer_and_scheduler())
