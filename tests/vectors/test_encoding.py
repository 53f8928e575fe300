"""corpus_encoding.py in separate processes: kill -9 mid-encode then --resume, and torchrun ranks (gloo)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spladekit.common.errors import SpladekitError
from spladekit.vectors.artifact import Vectors
from spladekit.vectors.encoding import ShardSelection, parse_shard
from spladekit.vectors.shards import MANIFEST, shard_folder

SRC = Path(__file__).resolve().parents[2] / "src"
DOCS = [f"text {i} " + "paris vaccine river python light " * (i % 4 + 1) for i in range(10)]

# Runs `spladekit encode` with the sealing of shard 1 held up (sleeping inside its staging folder, after its
# vectors are written): the test kills it there, mid-shard, with shard 0 complete.
SLOW_SECOND_SHARD = """
import sys, time
import spladekit.vectors.shards as shards
real_seal = shards.seal
def slow_seal(staging, index, *rest):
    if index == 1:
        print("SHARD1-STAGED", flush=True)
        time.sleep(600)
    return real_seal(staging, index, *rest)
import spladekit.vectors.encoding as encoding
encoding.seal = slow_seal
from spladekit.cli import main
sys.argv = ["spladekit", *sys.argv[1:]]
main()
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n" for i, text in enumerate(DOCS)))
    return path


@pytest.mark.parametrize(
    "text, selection", [(None, ShardSelection(0, 1)), ("0/1", ShardSelection(0, 1)), ("1/3", ShardSelection(1, 3))]
)
def test_parse_shard(text, selection):
    assert parse_shard(text) == selection


@pytest.mark.parametrize("text", ["2/2", "-1/2", "1", "a/b", "0/0", "1/2/3"])
def test_parse_shard_refuses(text):
    with pytest.raises(SpladekitError, match="--shard must be I/N"):
        parse_shard(text)


def test_selection_splits_shards_round_robin():
    assert [j for j in range(7) if ShardSelection(1, 3).mine(j)] == [1, 4]


@pytest.mark.slow
def test_kill_9_mid_shard_then_resume_equals_an_uninterrupted_run(tiny_model_dirs, corpus, tmp_path, cli):
    model, folder = tiny_model_dirs["bert"], tmp_path / "vectors"
    command = [
        sys.executable,
        "-c",
        SLOW_SECOND_SHARD,
        "encode",
        str(model),
        "--corpus",
        str(corpus),
        "--output",
        str(folder),
        "--shard-size",
        "4",
    ]
    process = subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 300
        while process.stdout.readline().strip() != "SHARD1-STAGED":
            assert process.poll() is None and time.monotonic() < deadline, "the encode ended before shard 1"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    staged = folder / "shards" / ".00001.partial"
    assert (shard_folder(folder, 0) / "shard.json").is_file() and (staged / "vectors.npz").is_file()
    assert not shard_folder(folder, 1).exists() and not (folder / MANIFEST).exists()
    with pytest.raises(SpladekitError, match="incomplete sharded vectors folder"):
        Vectors.load(folder)
    sealed = (shard_folder(folder, 0) / "vectors.npz").stat().st_mtime_ns

    done = cli("encode", model, "--corpus", corpus, "--output", folder, "--shard-size", 4, "--resume", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["reused_shards"] == [0] and result["encoded_shards"] == [1, 2] and result["complete"]
    assert (shard_folder(folder, 0) / "vectors.npz").stat().st_mtime_ns == sealed  # not re-encoded
    assert not staged.exists()
    done = cli("encode", model, "--corpus", corpus, "--output", tmp_path / "uninterrupted", "--shard-size", 4)
    assert done.returncode == 0, done.stderr
    resumed, uninterrupted = Vectors.load(folder), Vectors.load(tmp_path / "uninterrupted")
    assert resumed.ids == uninterrupted.ids and (resumed.matrix != uninterrupted.matrix).nnz == 0


@pytest.mark.slow
def test_two_torchrun_ranks_equal_one_process(tiny_model_dirs, corpus, tmp_path, cli):
    model = tiny_model_dirs["bert"]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "spladekit",
        "encode",
        str(model),
        "--corpus",
        str(corpus),
        "--output",
        str(tmp_path / "ranks"),
        "--shard-size",
        "3",
        "--json",
    ]
    result = subprocess.run(command, env=_env(), capture_output=True, text=True, check=False, timeout=600)
    if result.returncode != 0 and ("init_process_group" in result.stderr or "rendezvous" in result.stderr.lower()):
        pytest.skip(f"torchrun could not start two gloo processes here: {result.stderr.strip().splitlines()[-1]}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count('"encoded_shards"') == 2 and (tmp_path / "ranks" / MANIFEST).is_file()
    done = cli("encode", model, "--corpus", corpus, "--output", tmp_path / "one", "--shard-size", 3)
    assert done.returncode == 0, done.stderr
    ranks, one = Vectors.load(tmp_path / "ranks"), Vectors.load(tmp_path / "one")
    assert ranks.ids == one.ids and (ranks.matrix != one.matrix).nnz == 0


def test_a_corpus_that_changed_since_the_validating_pass_is_refused_before_the_manifest(tiny_model_dirs, tmp_path):
    from spladekit.data.stream import corpus_fingerprint
    from spladekit.model.encoder import SparseEncoder
    from spladekit.vectors.encoding import build_plan, write_shards

    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    documents = [(f"d{i}", text) for i, text in enumerate(DOCS[:4])]
    plan = build_plan(encoder, "m", "c", corpus_fingerprint(documents), 4, "document", None, None, 2)
    assert write_shards(tmp_path / "good", encoder, documents, plan, show_progress=False) == ([0, 1], [])
    edited = [*documents[:3], ("d3", "an edited text")]
    with pytest.raises(SpladekitError, match="the corpus changed while being encoded"):
        write_shards(tmp_path / "edited", encoder, edited, plan, show_progress=False)
    assert not (tmp_path / "edited" / MANIFEST).exists()


@pytest.mark.realdata
@pytest.mark.slow
def test_real_model_two_torchrun_ranks_equal_one_process_on_cranfield(tmp_path, cli):
    from conftest import shared_path

    model, corpus = shared_path("models", "splade-tiny-msmarco"), shared_path("data", "cranfield")
    options = ["--corpus", str(corpus), "--shard-size", "300", "--doc-max-length", "128"]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "spladekit",
        "encode",
        str(model),
        "--output",
        str(tmp_path / "ranks"),
        *options,
    ]
    result = subprocess.run(command, env=_env(), capture_output=True, text=True, check=False, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    done = cli("encode", model, "--output", tmp_path / "one", *options)
    assert done.returncode == 0, done.stderr
    ranks, one = Vectors.load(tmp_path / "ranks"), Vectors.load(tmp_path / "one")
    assert len(one) == 1400 and ranks.ids == one.ids and (ranks.matrix != one.matrix).nnz == 0


@pytest.mark.slow
def test_encode_compile_writes_the_vectors_of_the_eager_model(tiny_model_dirs, corpus, tmp_path, cli):
    """``encode --compile`` (the backbone compiled with its weights frozen in) encodes what the eager model does."""
    for name, flags in (("eager", []), ("compiled", ["--compile"])):
        result = cli("encode", tiny_model_dirs["bert"], "--corpus", corpus, "--output", tmp_path / name, *flags)
        assert result.returncode == 0, result.stderr
    eager, compiled = (Vectors.load(tmp_path / name) for name in ("eager", "compiled"))
    assert compiled.ids == eager.ids and eager.matrix.nnz > 0
    assert abs(compiled.matrix - eager.matrix).max() <= 1e-5
