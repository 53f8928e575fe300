"""devices.py: one device rule (auto → the GPU when CUDA is available) and one bf16 autocast."""

from __future__ import annotations

import pytest
import torch

from spladekit.common import distributed
from spladekit.common.devices import autocast, resolve_device
from spladekit.common.errors import SpladekitError
from spladekit.model.encoder import SparseEncoder


def test_auto_is_the_gpu_when_cuda_is_available_else_the_cpu():
    expected = torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == resolve_device(None) == expected
    if torch.cuda.is_available():
        assert resolve_device("auto", local_rank=0) == torch.device("cuda:0")
    else:
        assert resolve_device("auto", local_rank=3) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_a_plain_cuda_gets_the_index_of_its_process(monkeypatch):
    # torch.cuda.set_device("cuda") raises (seen on an H200 with torch 2.11): training's setup needs an index
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda") == torch.device("cuda:0")
    assert resolve_device("cuda", local_rank=1) == torch.device("cuda:1")
    assert resolve_device("cuda:1", local_rank=0) == torch.device("cuda:1")
    with pytest.raises(SpladekitError, match="2 CUDA device"):
        resolve_device("cuda", local_rank=2)


def test_unknown_or_missing_devices_are_errors_naming_them():
    with pytest.raises(SpladekitError, match="unknown device 'banana'"):
        resolve_device("banana")
    if not torch.cuda.is_available():
        with pytest.raises(SpladekitError, match="CUDA is not available"):
            resolve_device("cuda")
    with pytest.raises(SpladekitError, match="CUDA"):
        resolve_device(f"cuda:{torch.cuda.device_count() + 1}")


def test_training_processes_and_the_encoder_use_the_same_rule(tiny_model_dirs):
    assert distributed.setup("auto").device == resolve_device("auto")
    assert distributed.setup("cpu").device == torch.device("cpu")
    with pytest.raises(SpladekitError, match="unknown device"):
        distributed.setup("banana")
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], device="auto")
    assert encoder.device.type == resolve_device("auto").type


def test_autocast_runs_matmuls_in_bf16_only_when_enabled():
    left, right = torch.randn(4, 8), torch.randn(8, 3)
    device = torch.device("cpu")
    with autocast(device, True):
        assert (left @ right).dtype == torch.bfloat16
    with autocast(device, False):
        assert (left @ right).dtype == torch.float32


def test_encode_and_train_refuse_an_unknown_device_before_any_work(tiny_model_dirs, tmp_path, cli):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "hello"}\n')
    done = cli(
        "encode",
        str(tiny_model_dirs["bert"]),
        "--corpus",
        str(corpus),
        "--output",
        str(tmp_path / "out"),
        "--device",
        "banana",
    )
    assert done.returncode == 2 and "unknown device 'banana'" in done.stderr
    assert not (tmp_path / "out").exists()


def _spy_on_load_model(monkeypatch) -> list:
    """Record the device every load_model call asks for (and load on the CPU, as this machine must)."""
    import spladekit.model.loading as loading

    seen: list = []
    real = loading.load_model

    def spy(*args, device=None, **kwargs):
        seen.append(device)
        return real(*args, device="cpu", **kwargs)

    monkeypatch.setattr(loading, "load_model", spy)
    return seen


def test_every_command_that_runs_a_model_passes_its_device_to_the_loader(tiny_model_dirs, tmp_path, cli, monkeypatch):
    """Today evaluate, search, explain and mine had no --device: the model stayed on the CPU on a GPU machine."""
    from collection_files import write_beir
    from spladekit.vectors.artifact import Vectors

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a fake CUDA: --device cuda:0 passes the check
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    seen = _spy_on_load_model(monkeypatch)
    model, beir = tiny_model_dirs["bert"], write_beir(tmp_path / "beir")
    train_split = write_beir(tmp_path / "train", split="train")
    encoder = SparseEncoder.from_pretrained(model)
    Vectors(encoder.encode(["paris", "a cat"], show_progress=False), ["d1", "d2"], {"model": str(model)}).save(
        tmp_path / "vectors"
    )
    assert cli("index", tmp_path / "vectors", "--output", tmp_path / "index").returncode == 0
    commands = {
        "evaluate": ["evaluate", model, "--data", beir, "--no-cache"],
        "search": [
            *("search", tmp_path / "index", "--model", model, "--queries", beir / "queries.jsonl"),
            *("--output", tmp_path / "run.trec"),
        ],
        "explain": ["explain", model, "a query about paris"],
        "mine": ["mine", train_split, "--model", model, "--output", tmp_path / "mined.tsv"],
    }
    for name, arguments in commands.items():
        seen.clear()
        done = cli(*arguments, "--device", "cuda:0")
        assert done.returncode == 0, (name, done.stderr)
        assert seen == ["cuda:0"], name


def test_a_sweep_trains_and_evaluates_each_cell_on_its_device(tmp_path, monkeypatch):
    import spladekit.experiments.sweep as sweep_module
    from train_helpers import write_sweep

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    trained_on: list = []
    real_train = sweep_module.train
    monkeypatch.setattr(
        sweep_module, "train", lambda *a, device="auto", **kw: trained_on.append(device) or real_train(*a, **kw)
    )
    evaluated_on: list = []
    real_load = sweep_module.load_model
    monkeypatch.setattr(
        sweep_module,
        "load_model",
        lambda *a, device=None, **kw: evaluated_on.append(device) or real_load(*a, device="cpu", **kw),
    )
    sweep = sweep_module.load_sweep(write_sweep(tmp_path, k=[1], baselines=["untouched"]))
    sweep_module.run_sweep(sweep, tmp_path / "out", only=["bert__"], device="cuda:1")
    assert trained_on == ["cuda:1"] and evaluated_on == ["cuda:1", "cuda:1"]  # the cell, then its baseline
