"""The sharded vectors folder (shards.py) as `spladekit encode` writes it and every reader reads it:
sharded == unsharded, both layouts load, damage is an error naming the file, resume, --shard I/N, bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from spladekit.common.atomic import open_output
from spladekit.common.errors import InputError
from spladekit.model.encoder import SparseEncoder
from spladekit.vectors.artifact import Vectors
from spladekit.vectors.shards import MANIFEST, read_manifest, shard_folder

DOCS = [
    f"document {i} about " + " ".join(["paris", "vaccine", "river", "python", "light"][: i % 5 + 1]) * (i % 3 + 1)
    for i in range(11)
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n" for i, text in enumerate(DOCS)))
    return path


@pytest.fixture
def model(tiny_model_dirs):
    return tiny_model_dirs["bert"]


def encode(cli, model, corpus, output, *options) -> dict:
    done = cli("encode", model, "--corpus", corpus, "--output", output, "--json", *options)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def error_lines(stderr: str) -> list[str]:
    """The error lines of a failed command (progress bars are not errors); no traceback."""
    assert "Traceback" not in stderr
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def assert_same(first: Vectors, second: Vectors) -> None:
    assert first.ids == second.ids and first.matrix.shape == second.matrix.shape
    assert (first.matrix != second.matrix).nnz == 0


@pytest.mark.parametrize("shard_size", [1, 4, 11])
def test_sharded_equals_unsharded_exactly_and_blocks_are_the_shards(cli, model, corpus, tmp_path, shard_size):
    # batch size 1: every text is encoded alone in both runs, so the vectors cannot differ by batch padding
    whole = encode(cli, model, corpus, tmp_path / "whole", "--shard-size", 1000, "--batch-size", 1)
    sharded = encode(cli, model, corpus, tmp_path / "sharded", "--shard-size", shard_size, "--batch-size", 1)
    assert whole["shards"] == 1 and sharded["shards"] == -(-11 // shard_size) and sharded["complete"]
    assert_same(Vectors.load(tmp_path / "sharded"), Vectors.load(tmp_path / "whole"))
    blocks = list(Vectors.blocks(tmp_path / "sharded"))
    assert [len(block) for block in blocks] == [min(shard_size, 11 - start) for start in range(0, 11, shard_size)]
    assert [doc_id for block in blocks for doc_id in block.ids] == [f"d{i}" for i in range(11)]
    encoder = SparseEncoder.from_pretrained(model)
    direct = encoder.encode(DOCS, batch_size=1, show_progress=False)
    assert (Vectors.load(tmp_path / "sharded").matrix != direct).nnz == 0
    meta = Vectors.load(tmp_path / "sharded").meta
    assert meta["documents"] == 11 and meta["shard_size"] == shard_size and meta["side"] == "document"


def test_batch_composition_changes_only_the_last_bits(cli, model, corpus, tmp_path):
    """With batches of several texts, a shard boundary changes which texts are padded together: the same
    vectors up to float rounding (the reason the exact comparison above uses batch size 1)."""
    encode(cli, model, corpus, tmp_path / "whole", "--batch-size", 4)
    encode(cli, model, corpus, tmp_path / "sharded", "--batch-size", 4, "--shard-size", 3)
    whole, sharded = Vectors.load(tmp_path / "whole"), Vectors.load(tmp_path / "sharded")
    assert whole.ids == sharded.ids
    np.testing.assert_allclose(sharded.matrix.toarray(), whole.matrix.toarray(), rtol=1e-5, atol=1e-6)


def test_single_file_folder_loads_as_one_block(model, tmp_path):
    encoder = SparseEncoder.from_pretrained(model)
    Vectors(encoder.encode(DOCS[:3], show_progress=False), ["a", "b", "c"], {"model": "m"}).save(tmp_path / "single")
    blocks = list(Vectors.blocks(tmp_path / "single"))
    assert len(blocks) == 1 and blocks[0].ids == ["a", "b", "c"]
    assert_same(blocks[0], Vectors.load(tmp_path / "single"))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:40])


@pytest.mark.parametrize(
    "damage, named, message",
    [
        ("truncated npz", "shards/00001/vectors.npz", "sha256 mismatch"),
        ("edited ids", "shards/00001/ids.json", "sha256 mismatch"),
        ("missing shard", "shards/00001/vectors.npz", "missing shard file"),
        ("no manifest", "", "incomplete sharded vectors folder"),
        ("renamed entry", MANIFEST, "expected 'shards/00001'"),
    ],
)
def test_damaged_or_incomplete_folder_is_an_input_error_naming_the_file(
    cli, model, corpus, tmp_path, damage, named, message
):
    folder = tmp_path / "vectors"
    encode(cli, model, corpus, folder, "--shard-size", 4)
    if damage == "truncated npz":
        _truncate(shard_folder(folder, 1) / "vectors.npz")
    elif damage == "edited ids":
        (shard_folder(folder, 1) / "ids.json").write_text(json.dumps(["x4", "x5", "x6", "x7"]))
    elif damage == "missing shard":
        shutil.rmtree(shard_folder(folder, 1))
    elif damage == "no manifest":
        (folder / MANIFEST).unlink()
    else:
        manifest = json.loads((folder / MANIFEST).read_text())
        manifest["shards"][1]["name"] = "../elsewhere"
        (folder / MANIFEST).write_text(json.dumps(manifest))
    where = str(folder / named) if named else str(folder)
    for read in (Vectors.load, lambda path: list(Vectors.blocks(path))):
        with pytest.raises(InputError, match=message) as error:
            read(folder)
        assert str(error.value).startswith(where + ":")
    done = cli("index", folder, "--output", tmp_path / "index")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: {where}: " + str(error.value).split(": ", 1)[1]
    ]
    assert not (tmp_path / "index").exists()


def test_index_of_a_sharded_folder_equals_that_of_a_single_file_one(cli, model, corpus, tmp_path):
    encode(cli, model, corpus, tmp_path / "sharded", "--shard-size", 3, "--batch-size", 1)
    single = Vectors.load(tmp_path / "sharded")
    Vectors(single.matrix, single.ids, {"model": str(model)}).save(tmp_path / "single")
    runs = []
    for name in ("sharded", "single"):
        done = cli("index", tmp_path / name, "--output", tmp_path / f"{name}-index", "--max-active-dims", 8, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["docs"] == 11
        done = cli(
            "search",
            tmp_path / f"{name}-index",
            "--query-vectors",
            tmp_path / "single",
            "--hits",
            5,
            "--output",
            tmp_path / f"{name}.trec",
        )
        assert done.returncode == 0, done.stderr
        runs.append((tmp_path / f"{name}.trec").read_text().replace(f"{name}-index", ""))
    assert runs[0] == runs[1] and "d0" in runs[0]


def test_resume_keeps_intact_shards_and_redoes_missing_and_damaged_ones(cli, model, corpus, tmp_path):
    folder = tmp_path / "vectors"
    encode(cli, model, corpus, folder, "--shard-size", 3)
    reference = Vectors.load(folder)
    kept = (shard_folder(folder, 0) / "vectors.npz").stat()
    (folder / MANIFEST).unlink()
    shutil.rmtree(shard_folder(folder, 2))
    _truncate(shard_folder(folder, 1) / "vectors.npz")
    (folder / ".00003.partial").mkdir()  # what a killed writer could leave beside the shards: ignored
    done = cli("encode", model, "--corpus", corpus, "--output", folder)
    assert done.returncode == 2 and "pass --resume" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    result = encode(cli, model, corpus, folder, "--shard-size", 3, "--resume")
    assert result["reused_shards"] == [0, 3] and result["encoded_shards"] == [1, 2] and result["complete"]
    assert_same(Vectors.load(folder), reference)
    assert (shard_folder(folder, 0) / "vectors.npz").stat().st_mtime_ns == kept.st_mtime_ns
    again = encode(cli, model, corpus, folder, "--shard-size", 3, "--resume")
    assert again["encoded_shards"] == [] and again["reused_shards"] == [0, 1, 2, 3]


@pytest.mark.parametrize("damage", ['{"bad', '{"index": 0}', "[]"])
def test_resume_redoes_a_shard_whose_sidecar_is_damaged(cli, model, corpus, tmp_path, damage):
    """Today's dead end: "shard.json: not valid JSON … rerun with --resume", and the rerun failed the same way."""
    folder = tmp_path / "vectors"
    encode(cli, model, corpus, folder, "--shard-size", 3)
    reference = Vectors.load(folder)
    (folder / MANIFEST).unlink()
    (shard_folder(folder, 0) / "shard.json").write_text(damage)  # the first sidecar: also where the plan is read
    result = encode(cli, model, corpus, folder, "--shard-size", 3, "--resume")
    assert result["encoded_shards"] == [0] and result["reused_shards"] == [1, 2, 3] and result["complete"]
    assert_same(Vectors.load(folder), reference)


@pytest.mark.parametrize("damage", ['{"broken', '{"format": "spladekit-sharded-vectors", "version": 1}'])
def test_resume_rewrites_a_damaged_manifest_from_the_shards(cli, model, corpus, tmp_path, damage):
    """Today --resume refused a damaged manifest.json ("rerun with --resume") forever."""
    folder = tmp_path / "vectors"
    encode(cli, model, corpus, folder, "--shard-size", 3)
    reference = Vectors.load(folder)
    (folder / MANIFEST).write_text(damage)
    result = encode(cli, model, corpus, folder, "--shard-size", 3, "--resume")
    assert result["encoded_shards"] == [] and result["reused_shards"] == [0, 1, 2, 3] and result["complete"]
    assert_same(Vectors.load(folder), reference)


def test_resume_with_another_model_or_shard_size_is_one_error_line(cli, model, tiny_model_dirs, corpus, tmp_path):
    folder = tmp_path / "vectors"
    encode(cli, model, corpus, folder, "--shard-size", 3)
    (folder / MANIFEST).unlink()
    before = sorted(path.name for path in folder.rglob("*"))
    for options, differs in ((["--shard-size", 3], "model_sha256"), (["--shard-size", 5], "shard_size")):
        other = tiny_model_dirs["distilbert"] if differs == "model_sha256" else model
        done = cli("encode", other, "--corpus", corpus, "--output", folder, "--resume", *options)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "encoded with another model, corpus or settings" in done.stderr and differs in done.stderr
    assert sorted(path.name for path in folder.rglob("*")) == before


def test_shard_i_of_n_processes_fill_one_folder_equal_to_one_process(cli, model, corpus, tmp_path):
    encode(cli, model, corpus, tmp_path / "one", "--shard-size", 3)
    first = encode(cli, model, corpus, tmp_path / "two", "--shard-size", 3, "--shard", "1/2")
    assert first["encoded_shards"] == [1, 3] and not first["complete"]
    with pytest.raises(InputError, match="incomplete sharded vectors folder"):
        Vectors.load(tmp_path / "two")
    second = encode(cli, model, corpus, tmp_path / "two", "--shard-size", 3, "--shard", "0/2")
    assert second["encoded_shards"] == [0, 2] and second["complete"]
    assert_same(Vectors.load(tmp_path / "two"), Vectors.load(tmp_path / "one"))
    assert read_manifest(tmp_path / "two")["shards"] == read_manifest(tmp_path / "one")["shards"]


def test_a_second_writer_of_the_same_shard_fails_clearly(cli, model, corpus, tmp_path):
    folder = tmp_path / "vectors"
    with open_output(shard_folder(folder, 0), folder=True):  # another process is writing shard 0
        done = cli("encode", model, "--corpus", corpus, "--output", folder, "--shard-size", 3, "--shard", "0/2")
    assert done.returncode == 2 and "is writing this output" in done.stderr and "00000" in done.stderr
    assert len(error_lines(done.stderr)) == 1 and "encoding documents" not in done.stderr  # failed before encoding


@pytest.mark.parametrize(
    "options, message",
    [
        (["--shard", "3/2"], "--shard must be I/N with integers 0 <= I < N, got '3/2'"),
        (["--shard", "1"], "--shard must be I/N with integers 0 <= I < N, got '1'"),
        (["--shard-size", "0"], "--shard-size must be an integer >= 1, got 0"),
        (["--resume", "--overwrite"], "--resume keeps complete shards, --overwrite replaces the folder: give only one"),
        (
            ["--shard", "0/2", "--overwrite"],
            "--overwrite cannot be combined with --shard or torchrun ranks (several "
            "processes write the folder in place): remove the old folder first",
        ),
    ],
)
def test_bad_sharding_options_are_one_line_and_write_nothing(cli, model, corpus, tmp_path, options, message):
    done = cli("encode", model, "--corpus", corpus, "--output", tmp_path / "out", *options)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (tmp_path / "out").exists()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".out")]


def test_a_complete_folder_is_refused_without_overwrite_and_replaced_with_it(cli, model, corpus, tmp_path):
    folder = tmp_path / "vectors"
    encode(cli, model, corpus, folder, "--shard-size", 4)
    done = cli("encode", model, "--corpus", corpus, "--output", folder)
    assert done.returncode == 2 and "output already exists" in done.stderr
    result = encode(cli, model, corpus, folder, "--shard-size", 20, "--overwrite")
    assert result["shards"] == 1 and read_manifest(folder)["meta"]["shard_size"] == 20
    assert not shard_folder(folder, 1).exists()
