"""Two gloo processes (torchrun) train exactly like one process with the same effective batch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file

from spladekit.training import train
from spladekit.training.monitors import read_metrics
from train_helpers import TINY_BERT, TRIPLETS, tiny_config

tiny_bert_fixture, triplets_fixture = TINY_BERT, TRIPLETS


@pytest.mark.slow
@pytest.mark.parametrize(("accumulation", "regularizer"), [(1, "flops"), (2, "flops"), (2, "df_flops")])
def test_two_processes_match_one(tiny_bert, triplets_file, tmp_path, accumulation, regularizer):
    sections = {
        "optimization": {"steps": 3, "batch_size": 8, "accumulation": accumulation},
        "regularizer": {"name": regularizer, "lambda_q": 0.05, "lambda_d": 0.05, "warmup_steps": 0},
    }
    single = read_metrics(
        train(
            tiny_config(
                tiny_bert,
                triplets_file,
                optimization={"steps": 3, "batch_size": 8},
                regularizer=sections["regularizer"],
            ),
            tmp_path / "one",
        ).output
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(tiny_config(tiny_bert, triplets_file, **sections).to_dict()))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "spladekit",
        "train",
        str(config_file),
        "--output",
        str(tmp_path / "two"),
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    double = read_metrics(tmp_path / "two")
    assert [r["step"] for r in double] == [1, 2, 3]
    for key, tolerance in [("loss", 1e-5), ("ranking_loss", 1e-5), ("flops_d", 1e-5), ("q_nnz", 0), ("d_nnz", 0)]:
        assert [r[key] for r in double] == pytest.approx([r[key] for r in single], abs=tolerance), key
    assert [r["grad_norm"] for r in double] == pytest.approx([r["grad_norm"] for r in single], rel=1e-4)
    weights = [load_file(folder / "model" / "model.safetensors") for folder in (tmp_path / "one", tmp_path / "two")]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, atol=1e-5, rtol=1e-4)
