"""benchmarks/gpu_pipeline.py: every stage of the GPU path (train ×2, torchrun encode, index, torchrun evaluate,
sweep --devices) runs and reports, on the CPU with tiny models here, and on CUDA where a GPU is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from collection_files import QRELS, QUERIES, write_beir
from spladekit.data.collections import load_collection
from spladekit.evaluation.evaluate import evaluate
from spladekit.model.loading import load_model

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_pipeline.py"
STAGES = ["train bert-base", "train splade-tiny", "encode corpus", "index", "evaluate", "sweep 2 × 2"]


def _collection(folder: Path) -> Path:
    write_beir(folder)
    triplets = [
        f"{QUERIES[q]}\tdocument {d} text\tan unrelated passage {q}\n" for q, judged in QRELS.items() for d in judged
    ]
    (folder / "triplets-train.tsv").write_text("".join(triplets))
    return folder


def _run(tmp_path: Path, *args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(SCRIPT), "--output", str(tmp_path / "pipeline"), *map(str, args)]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=900)


def _rows(tmp_path: Path) -> list[dict]:
    return json.loads((tmp_path / "pipeline" / "pipeline.json").read_text())


@pytest.mark.slow
def test_every_stage_runs_on_the_cpu_with_two_ranks_and_two_sweep_workers(tiny_model_dirs, tmp_path):
    model = tiny_model_dirs["bert"]
    data = _collection(tmp_path / "mini")
    result = _run(
        tmp_path,
        "--device",
        "cpu",
        "--tiny",
        model,
        "--base",
        model,
        "--data",
        data,
        "--steps",
        2,
        "--sweep-steps",
        2,
        "--ranks",
        2,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = _rows(tmp_path)
    assert [row["stage"].split(" (")[0] for row in rows] == STAGES
    assert all(row["device_seen"] == "cpu" and row["seconds"] > 0 for row in rows)
    assert rows[2]["docs_per_s"] > 0
    # the two-rank evaluation scores what one process scores on the same trained model
    single = evaluate(
        load_model(str(tmp_path / "pipeline" / "run-tiny" / "model")),
        load_collection(data, "test"),
        max_length=256,
        cache=False,
        show_progress=False,
    )
    assert rows[4]["ndcg@10"] == round(single.metrics["nDCG@10"], 4)
    assert rows[5]["ndcg@10"].count(",") == 3  # the four cells' scores
    assert "| stage | device seen |" in result.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the GPU pipeline runs on GPU machines")
@pytest.mark.slow
def test_every_stage_runs_on_the_gpu(tiny_model_dirs, tmp_path):
    model = tiny_model_dirs["bert"]
    data = _collection(tmp_path / "mini")
    result = _run(
        tmp_path, "--device", "cuda", "--tiny", model, "--base", model, "--data", data, "--steps", 2, "--sweep-steps", 2
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert all(row["device_seen"] == "cuda" for row in _rows(tmp_path) if not row["stage"].startswith("index"))


def test_a_cuda_run_without_a_gpu_stops_before_any_stage(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = _run(tmp_path, "--device", "cuda")
    assert result.returncode != 0 and not (tmp_path / "pipeline").exists()
    assert "nvidia-smi is missing" in result.stderr or "torch sees no CUDA device" in result.stderr
