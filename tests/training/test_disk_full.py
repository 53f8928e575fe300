"""A write that fails during training (a full disk): one error line, the last checkpoint intact, --resume finishes.

Today the run ended in a traceback (``OSError: [Errno 28]``, or torch's ``RuntimeError: … unexpected pos`` when
the disk fills inside a checkpoint). The real full disk is a small tmpfs where this machine lets the tests mount
one (root); the simulated one (torch.save raising what it raises on a full disk) runs everywhere.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
import torch

from spladekit.training import TrainingStopped, train
from spladekit.training.checkpoint import checkpoints
from train_helpers import TINY_BERT, TRIPLETS, tiny_config

tiny_bert, triplets_file = TINY_BERT, TRIPLETS


def _config(tiny_bert, triplets_file):
    return tiny_config(
        tiny_bert, triplets_file, logging={"checkpoint_every": 2, "keep_checkpoints": 10}, optimization={"steps": 8}
    )


def _losses(output) -> list[float]:
    return [json.loads(line)["loss"] for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_a_checkpoint_that_cannot_be_written_stops_with_one_line_and_resume_finishes(
    tiny_bert, triplets_file, tmp_path, monkeypatch
):
    config = _config(tiny_bert, triplets_file)
    reference = train(config, tmp_path / "reference")
    real_save = torch.save

    def full_disk(obj, path, *args, **kwargs):
        if "step-00000006" in str(path):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(TrainingStopped) as stopped:
        train(config, tmp_path / "run")
    message = str(stopped.value)
    assert "\n" not in message
    assert message.startswith("writing the checkpoint of step 6 failed ([enforce fail at inline_container.cc:672]")
    assert "MiB free on the device of" in message and "step-00000004" in message and "--resume" in message
    assert [path.name for path in checkpoints(tmp_path / "run")] == ["step-00000002", "step-00000004"]
    monkeypatch.setattr(torch, "save", real_save)
    train(config, tmp_path / "run", resume=True)
    assert _losses(tmp_path / "run") == _losses(reference.output)  # resume is bit-exact


def _mount_tmpfs(folder, size: str) -> bool:
    folder.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]).returncode == 0


def test_a_real_full_disk_during_training(tiny_bert, triplets_file, tmp_path, cli):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "8m"):
        pytest.skip("cannot mount a tmpfs here (needs root): the simulated full disk above covers the handling")
    try:
        config = _config(tiny_bert, triplets_file)
        (disk / "config.yaml").write_text(json.dumps(config.to_dict()))
        filler = disk / f"filler-{uuid.uuid4().hex}"
        with filler.open("wb") as stream:  # room for the run's first files and one checkpoint (~420 KB), not two
            stream.write(b"\0" * (8 * 2**20 - 700 * 2**10))
        done = cli("train", disk / "config.yaml", "--output", disk / "run")
        assert done.returncode == 2, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "failed" in errors[0] and "--resume" in errors[0], done.stderr
        assert "Traceback" not in done.stderr
        assert [path.name for path in checkpoints(disk / "run")] == ["step-00000002"]
        assert sorted(path.name for path in (disk / "run" / "checkpoints").iterdir()) == ["step-00000002"]  # no half
        filler.unlink()
        done = cli("train", disk / "config.yaml", "--output", disk / "run", "--resume")
        assert done.returncode == 0, done.stderr
        assert (disk / "run" / "model" / "model.safetensors").is_file()
    finally:
        subprocess.run(["umount", str(disk)])


def test_a_real_full_disk_during_encoding(tiny_model_dirs, tmp_path, cli):
    from spladekit.vectors.artifact import Vectors

    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "4m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        corpus = tmp_path / "corpus.jsonl"
        text = "doc {} about cats and dogs and the capital of france paris"
        corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": text.format(i)}) + "\n" for i in range(3000)))
        model = tiny_model_dirs["bert"]
        reference = tmp_path / "reference"
        assert cli("encode", model, "--corpus", corpus, "--output", reference, "--shard-size", 500).returncode == 0
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (4 * 2**20 - 1100 * 2**10))  # room for two shards (~440 KB each) of the six
        done = cli("encode", model, "--corpus", corpus, "--output", disk / "v", "--shard-size", 500)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert done.returncode == 2 and len(errors) == 1, done.stderr
        assert "no space left on device" in errors[0] and "complete shard(s) kept" in errors[0], errors[0]
        filler.unlink()
        done = cli("encode", model, "--corpus", corpus, "--output", disk / "v", "--shard-size", 500, "--resume")
        assert done.returncode == 0, done.stderr
        finished, expected = Vectors.load(disk / "v"), Vectors.load(reference)
        assert finished.ids == expected.ids and (finished.matrix != expected.matrix).nnz == 0
    finally:
        subprocess.run(["umount", str(disk)])


def test_out_of_memory_during_training_is_one_line_and_resume_finishes(tiny_bert, triplets_file, tmp_path, monkeypatch):
    import spladekit.training.loop as loop

    config = _config(tiny_bert, triplets_file)
    real = loop.forward_backward
    calls = []

    def out_of_memory_at_step_5(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "forward_backward", out_of_memory_at_step_5)
    with pytest.raises(TrainingStopped) as stopped:
        train(config, tmp_path / "run")
    message = str(stopped.value)
    assert message.startswith("out of memory at step 5 (CUDA out of memory. Tried to allocate 2.00 GiB)")
    assert "step-00000004" in message and "--resume" in message and "\n" not in message
    monkeypatch.setattr(loop, "forward_backward", real)
    train(config, tmp_path / "run", resume=True)
    assert len(_losses(tmp_path / "run")) == 8


def test_out_of_memory_in_any_command_is_one_error_line(tiny_model_dirs, tmp_path, cli, monkeypatch):
    from spladekit import SparseEncoder

    def no_memory(self, batch):
        raise MemoryError

    monkeypatch.setattr(SparseEncoder, "forward", no_memory)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "text": "a cat"}) + "\n")
    done = cli("encode", tiny_model_dirs["bert"], "--corpus", corpus, "--output", tmp_path / "out")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("error: ")] == [
        "error: out of memory (MemoryError): lower --batch-size (or the token limit)"
    ]
    assert not (tmp_path / "out").exists()  # the folder encode created is removed with its staging
