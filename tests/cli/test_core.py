"""CLI diagnose / rescale / encode, run as a user would (`python -m spladekit`): output, exit codes, errors."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from spladekit import SparseEncoder
from spladekit.model.backbone import MLMHead
from spladekit.model.head import rescale_record
from spladekit.vectors.artifact import Vectors


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    lines = [
        {"_id": "d1", "title": "France", "text": "paris is the capital"},
        {"_id": "d2", "text": "a cat sat"},
        {"_id": "d3", "text": "vitamin d and bone pain in the cat of france"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_diagnose_json(tiny_model_dirs, tmp_path, cli):
    result = cli("diagnose", tiny_model_dirs["roberta"], "--json", "--json-out", tmp_path / "d.json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == json.loads((tmp_path / "d.json").read_text())
    assert report["architecture"] == "RobertaForMaskedLM" and report["tied"] is True
    assert report["head_param"] == "lm_head.decoder.weight"


def test_rescale_then_encode(tiny_model_dirs, tmp_path, corpus, cli):
    out = tmp_path / "rescaled"
    result = cli("rescale", tiny_model_dirs["modernbert"], "--k", "4", "--mode", "untie", "--output", out)
    assert result.returncode == 0, result.stderr
    encoder = SparseEncoder.from_pretrained(out)
    assert rescale_record(encoder.model)["k"] == 4.0 and not MLMHead.of(encoder.model).tied
    assert json.loads((out / "spladekit.json").read_text())["rescale"]["mode"] == "untie"

    vectors_dir = tmp_path / "vectors"
    result = cli("encode", out, "--corpus", corpus, "--output", vectors_dir, "--batch-size", "2")
    assert result.returncode == 0, result.stderr
    loaded = Vectors.load(vectors_dir)
    vectors = loaded.matrix
    assert loaded.ids == ["d1", "d2", "d3"] and vectors.shape == (3, encoder.vocab_size)
    expected = encoder.encode(
        ["France paris is the capital", "a cat sat", "vitamin d and bone pain in the cat of france"],
        show_progress=False,
    )
    assert abs(vectors - expected).max() < 1e-5
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp leftovers

    again = cli("encode", out, "--corpus", corpus, "--output", vectors_dir)
    assert again.returncode == 2 and "already exists" in again.stderr


@pytest.mark.parametrize("arch, expected", [("bert", "untie"), ("modernbert", "tied")])  # positions table or rotary
def test_rescale_auto_mode(arch, expected, tiny_model_dirs, tmp_path, cli):
    result = cli("rescale", tiny_model_dirs[arch], "--k", "8", "--mode", "auto", "--output", tmp_path / "r", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["mode"] == expected
    assert json.loads((tmp_path / "r" / "spladekit.json").read_text())["rescale"]["mode"] == expected


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"_id": "a", "text": "x"}\n{oops\n', "corpus.jsonl:2: not valid JSON"),
        ('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', "corpus.jsonl:2: duplicate id"),
        ("", "corpus.jsonl: empty corpus"),
        (
            '{"_id": "a", "text": "x"}\n{"_id": "b c", "text": "y"}\n',
            "corpus.jsonl:2: field '_id' 'b c' contains whitespace",
        ),
        ('{"_id": "a\\tb", "text": "x"}\n', "corpus.jsonl:1: field '_id' 'a\\tb' contains whitespace"),
        (
            '{"_id": "a", "text": "x"}\n\n{"_id": "b\\nc", "text": "y"}\n',
            "corpus.jsonl:3: field '_id' 'b\\nc' contains whitespace",
        ),
    ],
)
def test_encode_bad_corpus_is_one_line_and_leaves_nothing(tiny_model_dirs, tmp_path, content, needle, cli):
    bad = tmp_path / "corpus.jsonl"
    bad.write_text(content)
    result = cli("encode", tiny_model_dirs["bert"], "--corpus", bad, "--output", tmp_path / "out")
    assert result.returncode == 2
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_bad_model_paths_and_bad_k(tmp_path, tiny_model_dirs, corpus, cli):
    result = cli("encode", tmp_path / "nope", "--corpus", corpus, "--output", tmp_path / "o")
    assert result.returncode == 2 and "no such model folder" in result.stderr
    result = cli("rescale", tiny_model_dirs["bert"], "--k", "0", "--output", tmp_path / "r")
    assert result.returncode == 2 and "positive finite" in result.stderr and not (tmp_path / "r").exists()


def readable(text: str) -> str:
    """Help output without rich's panel borders and line wrapping."""
    return " ".join(text.replace("│", " ").split())


def test_every_command_documents_every_option():
    """Each command, option and argument has a description, and --help shows the name and the description."""
    from typer.main import get_command
    from typer.testing import CliRunner

    from spladekit.cli import app

    commands = get_command(app).commands
    assert {"diagnose", "rescale", "encode", "train", "index", "search", "evaluate", "export"} <= set(commands)
    runner = CliRunner()
    listing = readable(runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output)
    entries = [([name], command, listing) for name, command in commands.items()]
    for group, sub in commands.items():  # a group's sub-commands (export: one per format), hidden ones aside
        if getattr(sub, "commands", None):
            shown_in = readable(runner.invoke(app, [group, "--help"], env={"COLUMNS": "200"}).output)
            entries += [([group, leaf], inner, shown_in) for leaf, inner in sub.commands.items() if not inner.hidden]
    for path, command, listing in entries:
        name = " ".join(path)
        summary = readable(command.help or "").split(". ")[0]
        assert summary and f"{path[-1]} {summary}" in listing, name
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        shown = readable(result.output)
        for param in command.params:
            label = param.opts[0] if param.param_type_name == "option" else param.metavar or param.name
            assert readable(param.help or ""), f"{name} {label}: no description"
            assert f"{label} " in shown and readable(param.help) in shown, f"{name} {label}"


def test_every_command_that_writes_an_output_has_overwrite():
    """The "already exists" error suggests --overwrite: every command with an --output offers it (sweep
    resumes its folder instead)."""
    from typer.main import get_command

    from spladekit.cli import app

    commands = get_command(app).commands
    for name, command in [
        *commands.items(),
        *(
            (f"{group} {leaf}", inner)
            for group, sub in commands.items()
            for leaf, inner in getattr(sub, "commands", {}).items()
        ),
    ]:
        options = {opt for param in command.params for opt in param.opts}
        if "--output" in options and name != "sweep":
            assert "--overwrite" in options, name


def test_output_file_existing_refused_replaced_with_overwrite_and_umask_respected(tiny_model_dirs, tmp_path, cli):
    model = tiny_model_dirs["bert"]
    report = tmp_path / "report.json"
    report.write_text("keep")
    result = cli("diagnose", model, "--json-out", report)
    assert result.returncode == 2 and "already exists" in result.stderr and "--overwrite" in result.stderr
    assert report.read_text() == "keep"
    result = subprocess.run(
        [sys.executable, "-m", "spladekit", "diagnose", str(model), "--json-out", str(report), "--overwrite"],
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(0o002),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(report.read_text())["architecture"] == "BertForMaskedLM"
    assert stat.S_IMODE(report.stat().st_mode) == 0o664  # not mkstemp's 0600
    (tmp_path / "folder.json").mkdir()
    result = cli("diagnose", model, "--json-out", tmp_path / "folder.json", "--overwrite")
    assert result.returncode == 2 and "is a folder" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_unwritable_output_fails_at_once_as_one_line(tiny_model_dirs, tmp_path, corpus, cli):
    (tmp_path / "a-file").write_text("x")
    result = cli("encode", tiny_model_dirs["bert"], "--corpus", corpus, "--output", tmp_path / "a-file" / "vectors")
    assert result.returncode == 2, result.stderr
    assert "a parent is a file" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = cli("rescale", tiny_model_dirs["bert"], "--k", "2", "--output", tmp_path / "a-file")
    assert result.returncode == 2 and "a file is in the way" in result.stderr
    assert (tmp_path / "a-file").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_folder_fails_at_once(tiny_model_dirs, tmp_path, corpus, cli):
    (tmp_path / "ro").mkdir(mode=0o555)
    result = cli("encode", tiny_model_dirs["bert"], "--corpus", corpus, "--output", tmp_path / "ro" / "vectors")
    assert result.returncode == 2 and "permission denied" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_second_encode_into_the_same_output_fails_while_the_first_writes(tiny_model_dirs, tmp_path, corpus, cli):
    from spladekit.common.atomic import OUTPUT_MARK, open_output

    target = tmp_path / "vectors"
    with open_output(target, folder=True) as first:  # the first writer, still encoding
        result = cli("encode", tiny_model_dirs["bert"], "--corpus", corpus, "--output", target)
        assert result.returncode == 2 and "is writing this output" in result.stderr
        (first.staging / "mine").write_text("mine")
    assert sorted(p.name for p in target.iterdir()) == [OUTPUT_MARK, "mine"]  # marked: --overwrite may replace it
    result = cli("encode", tiny_model_dirs["bert"], "--corpus", corpus, "--output", target, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert Vectors.load(target).ids == ["d1", "d2", "d3"] and not (target / "mine").exists()


def test_encode_side_and_max_active_dims(tiny_model_dirs, tmp_path, corpus, cli):
    import numpy as np

    from spladekit.common.sparse import keep_top_weights

    model = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], max_length=64, query_max_length=8).save(
        tmp_path / "model"
    )
    encoder = SparseEncoder.from_pretrained(model)
    texts = ["France paris is the capital", "a cat sat", "vitamin d and bone pain in the cat of france"]

    done = cli("encode", model, "--corpus", corpus, "--output", tmp_path / "documents")
    assert done.returncode == 0, done.stderr
    documents = Vectors.load(tmp_path / "documents")
    assert documents.meta["side"] == "document" and documents.meta["max_length"] == 64
    assert documents.meta["max_active_dims"] is None
    np.testing.assert_allclose(
        documents.matrix.toarray(), encoder.encode_document(texts, show_progress=False).toarray(), atol=1e-6
    )

    done = cli("encode", model, "--corpus", corpus, "--side", "query", "--output", tmp_path / "queries")
    assert done.returncode == 0, done.stderr
    queries = Vectors.load(tmp_path / "queries")
    assert queries.meta["side"] == "query" and queries.meta["max_length"] == 8  # the model's query limit
    np.testing.assert_allclose(
        queries.matrix.toarray(), encoder.encode(texts, max_length=8, show_progress=False).toarray(), atol=1e-6
    )
    assert (queries.matrix != documents.matrix).nnz > 0

    done = cli(
        "encode",
        model,
        "--corpus",
        corpus,
        "--side",
        "query",
        "--query-max-length",
        16,
        "--max-active-dims",
        2,
        "--output",
        tmp_path / "pruned",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    pruned = Vectors.load(tmp_path / "pruned")
    assert pruned.meta["max_length"] == 16 and pruned.meta["max_active_dims"] == 2
    assert json.loads(done.stdout)["avg_nnz"] == 2
    expected = keep_top_weights(encoder.encode(texts, max_length=16, show_progress=False), 2)
    np.testing.assert_allclose(pruned.matrix.toarray(), expected.toarray(), atol=1e-6)

    for bad, message in (
        (["--side", "passage"], "unknown side 'passage'; choose one of query, document"),
        (["--max-active-dims", 0], "max_active_dims must be a whole number >= 1, got 0"),
    ):
        done = cli("encode", model, "--corpus", corpus, *bad, "--output", tmp_path / "bad")
        assert done.returncode == 2 and done.stderr.strip() == f"error: {message}", done.stderr
        assert not (tmp_path / "bad").exists()


def test_an_error_during_encoding_starts_a_line_of_its_own(tiny_model_dirs, corpus, tmp_path, cli, monkeypatch):
    """Today the error line was written right after the progress bar's carriage return, in the middle of its line."""
    from spladekit.common.errors import SpladekitError

    def broken(self, batch):
        raise SpladekitError("the model broke mid-corpus")

    monkeypatch.setattr(SparseEncoder, "forward", broken)
    done = cli("encode", tiny_model_dirs["bert"], "--corpus", corpus, "--output", tmp_path / "out", "--shard-size", 1)
    assert done.returncode == 2
    assert "encoding shards" in done.stderr  # a bar was drawn
    assert "\nerror: the model broke mid-corpus" in done.stderr, repr(done.stderr[-300:])
