"""quickstart end to end, offline, on a tiny model and a tiny BEIR folder (a few training steps)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import spladekit.experiments.quickstart as quickstart_module
from conftest import shared_path
from hub_caches import hf_cache, ir_datasets_cranfield, ir_datasets_home, offline_env
from spladekit.common.atomic import OUTPUT_MARK
from spladekit.data.collections import load_collection
from spladekit.evaluation.evaluate import evaluate
from spladekit.evaluation.run import Run
from spladekit.experiments.quickstart import DEFAULT_BACKBONE, DEFAULT_DATA, DEFAULT_EVAL_DATA, default_assets
from spladekit.model.encoder import SparseEncoder

DOCS = {
    "d1": "paris is the capital city of france on the river seine",
    "d2": "a vaccine trains the immune system against a virus",
    "d3": "vitamin d deficiency causes bone pain and muscle pain",
    "d4": "water boils at lower temperature when the pressure is low",
    "d5": "the quick brown fox jumps over the lazy dog",
    "d6": "inflation is the rise of the price of goods",
    "d7": "diabetes treatment with diet and exercise",
    "d8": "plants make glucose and oxygen from light",
}
QUERIES = {
    "q1": ("what is the capital of france", "d1", "d5"),
    "q2": ("how does a vaccine work", "d2", "d6"),
    "q3": ("vitamin d and bone pain", "d3", "d4"),
    "q4": ("why does water boil", "d4", "d7"),
    "q5": ("treatment of diabetes", "d7", "d8"),
    "q6": ("price inflation", "d6", "d1"),
}


@pytest.fixture(autouse=True)
def _own_evaluation_cache(tmp_path_factory, monkeypatch):
    """quickstart caches the backbone's corpus vectors: in a folder of this test, not the user's cache."""
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path_factory.mktemp("spladekit-cache")))


@pytest.fixture
def beir_folder(tmp_path):
    folder = tmp_path / "tinybeir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in DOCS.items()))
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": text}) + "\n" for q, (text, _, _) in QUERIES.items())
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{pos}\t1\n" for q, (_, pos, _) in QUERIES.items())
    )
    (folder / "triplets-train.tsv").write_text(
        "".join(f"{text}\t{DOCS[pos]}\t{DOCS[neg]}\n" for text, pos, neg in QUERIES.values())
    )
    return folder


def test_quickstart_end_to_end(tiny_model_dirs, beir_folder, tmp_path, cli):
    out = tmp_path / "qs"
    result = cli(
        "quickstart",
        "--backbone",
        tiny_model_dirs["bert"],
        "--train-data",
        beir_folder,
        "--output",
        out,
        "--steps",
        "4",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    diagnosed = json.loads((out / "diagnose.json").read_text())
    assert summary["recommended_k"] == diagnosed["recommended_k"]
    model = out / "train" / "model"
    assert summary["model"] == str(model)
    # the trained model really differs from the backbone, and "after" is its evaluation
    collection = load_collection(beir_folder, "test")
    trained = SparseEncoder.from_pretrained(model)
    again = evaluate(trained, collection, cache=False, show_progress=False)
    assert summary["after"]["nDCG@10"] == pytest.approx(again.metrics["nDCG@10"])
    backbone = evaluate(
        SparseEncoder.from_pretrained(tiny_model_dirs["bert"]), collection, cache=False, show_progress=False
    )
    assert summary["before"]["nDCG@10"] == pytest.approx(backbone.metrics["nDCG@10"])
    assert summary["before"]["corpus_cached"] is False and summary["before"]["cache_dir"]  # cached for the next run
    assert trained.model.config.spladekit_rescale["k"] == summary["k"]
    texts = [text for text, _, _ in QUERIES.values()]
    original = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], rescale_k=summary["k"])
    assert abs(trained.encode(texts, show_progress=False) - original.encode(texts, show_progress=False)).max() > 0
    metrics = [json.loads(line) for line in (out / "train" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["step"] == 4
    assert any((out / "train" / "plots").glob("*.png"))
    table = (out / "summary.md").read_text()
    assert (
        f"| trained (W_head / {summary['k']:g}, mode {summary['mode']} (k and mode chosen automatically), 4 steps) | "
        f"{summary['after']['nDCG@10']:.4f} |" in table
    )
    card = (model / "README.md").read_text()
    assert "## Training recipe" in card and "| steps | 4 |" in card
    assert "| tinybeir | " in card and "| head norm | initial | final |" in card
    # the explain view of three sample queries against their top document of the trained model's run
    run = Run.read(out / "run.trec")
    explained = json.loads((out / "explain" / "summary.json").read_text())
    assert [record["query_id"] for record in explained] == ["q1", "q2", "q3"]
    for record in explained:
        assert record["doc_id"] == run.ranking(record["query_id"])[0]
        assert record["score"] == pytest.approx(run.scores[record["query_id"]][record["doc_id"]], rel=1e-4)
        assert (out / "explain" / record["page"]).read_text().startswith("<!DOCTYPE html>")
    assert "(query-q1.html)" in (out / "explain" / "summary.md").read_text()


def test_quickstart_compare_trains_the_backbone_as_is_beside_the_fix(tiny_model_dirs, beir_folder, tmp_path, cli):
    """--compare: a second run without rescaling, same seed and data; its evaluation in the table; one plot."""
    from spladekit.model.head import divide_head
    from spladekit.training.monitors import read_metrics

    inflated = tmp_path / "inflated"
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    divide_head(encoder.model, 1 / 8, mode="untie")  # a head 8× too large: auto-k picks k > 1
    encoder.save(inflated)
    out = tmp_path / "qs"
    result = cli(
        "quickstart",
        "--backbone",
        inflated,
        "--train-data",
        beir_folder,
        "--output",
        out,
        "--steps",
        "4",
        "--compare",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["k"] > 1
    as_is_model = SparseEncoder.from_pretrained(out / "train-as-is" / "model")
    assert as_is_model.model.config.to_dict().get("spladekit_rescale") is None  # trained without rescaling
    collection = load_collection(beir_folder, "test")
    again = evaluate(as_is_model, collection, cache=False, show_progress=False)
    assert summary["as_is"]["nDCG@10"] == pytest.approx(again.metrics["nDCG@10"])
    fixed, plain = read_metrics(out / "train"), read_metrics(out / "train-as-is")
    assert [r["step"] for r in fixed] == [r["step"] for r in plain] and fixed[0]["loss"] != plain[0]["loss"]
    table = (out / "summary.md").read_text()
    assert f"| trained as is (k = 1, 4 steps) | {summary['as_is']['nDCG@10']:.4f} |" in table
    assert (out / "compare.png").read_bytes().startswith(b"\x89PNG") and summary["compare_plot"] == str(
        out / "compare.png"
    )


def test_quickstart_refuses_existing_output(tiny_model_dirs, beir_folder, tmp_path, cli):
    (tmp_path / "qs").mkdir()
    (tmp_path / "qs" / "x").write_text("keep")
    result = cli(
        "quickstart",
        "--backbone",
        tiny_model_dirs["bert"],
        "--train-data",
        beir_folder,
        "--output",
        tmp_path / "qs",
        "--steps",
        "2",
    )
    assert result.returncode == 2 and "already exists" in result.stderr
    assert (tmp_path / "qs" / "x").read_text() == "keep"


def test_quickstart_failing_half_way_leaves_nothing_that_blocks_the_rerun(tiny_model_dirs, beir_folder, tmp_path, cli):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a query without documents\n")  # read by the training, after diagnose.json was written
    command = [
        "quickstart",
        "--backbone",
        tiny_model_dirs["bert"],
        "--train-data",
        beir_folder,
        "--output",
        tmp_path / "qs",
        "--steps",
        "2",
    ]
    failed = cli(*command, "--triplets", bad)
    assert failed.returncode == 2 and "bad.tsv:1" in failed.stderr, failed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv", "tinybeir"]
    rerun = cli(*command)
    assert rerun.returncode == 0, rerun.stderr
    assert {p.name for p in (tmp_path / "qs").iterdir()} == {
        OUTPUT_MARK,
        "diagnose.json",
        "train",
        "summary.json",
        "summary.md",
        "run.trec",
        "explain",
    }


def test_quickstart_mines_triplets_when_the_data_folder_has_none(cli, tiny_model_dirs, beir_folder, tmp_path):
    (beir_folder / "triplets-train.tsv").unlink()
    (beir_folder / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{pos}\t1\n" for q, (_, pos, _) in QUERIES.items())
    )
    out = tmp_path / "qs"
    done = cli(
        "quickstart",
        "--backbone",
        tiny_model_dirs["bert"],
        "--train-data",
        beir_folder,
        "--output",
        out,
        "--steps",
        "2",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    mined = [line.split("\t") for line in (out / "triplets-train.tsv").read_text().splitlines()]
    assert len({query for query, _, _ in mined}) == 3  # the others share no word with a document but their positive
    assert all(
        DOCS[pos] == positive and negative != positive
        for text, pos, _ in QUERIES.values()
        for query, positive, negative in mined
        if query == text
    )
    assert json.loads((out / "train" / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 2
    assert "nDCG@10" in summary["after"] and "nDCG@10" in summary["before"]
    assert f"| training data | {out / 'triplets-train.tsv'} |" in (out / "train" / "model" / "README.md").read_text()


def test_quickstart_trains_on_data_and_evaluates_on_eval_data(cli, tiny_model_dirs, beir_folder, tmp_path):
    """--train-data gives the training triplets, --eval-data the collection evaluated before and after (whole), with
    its documents cut to --doc-max-length tokens."""
    other = tmp_path / "otherbeir"
    (other / "qrels").mkdir(parents=True)
    texts = {
        f"e{i}": f"{word} is the word of document number {i}"
        for i, word in enumerate(["rocket", "engine", "wing", "glacier", "violin"])
    }
    (other / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in texts.items()))
    (other / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"x{n}", "text": word}) + "\n" for n, word in enumerate(["rocket", "violin"]))
    )
    (other / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nx0\te0\t1\nx1\te4\t1\n")
    out = tmp_path / "qs"
    done = cli(
        "quickstart",
        "--backbone",
        tiny_model_dirs["bert"],
        "--train-data",
        beir_folder,
        "--eval-data",
        other,
        "--doc-max-length",
        "12",
        "--output",
        out,
        "--steps",
        "2",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["data"] == str(beir_folder) and summary["eval_data"] == str(other)
    for side in ("before", "after"):
        assert (summary[side]["docs"], summary[side]["queries"], summary[side]["max_length"]) == (5, 2, 12)
    assert set(Run.read(out / "run.trec").scores) == {"x0", "x1"}
    assert (
        f"| training data | {beir_folder / 'triplets-train.tsv'} |"
        in (out / "train" / "model" / "README.md").read_text()
    )
    trained = SparseEncoder.from_pretrained(out / "train" / "model")
    again = evaluate(trained, load_collection(other, "test"), max_length=12, cache=False, show_progress=False)
    assert summary["after"]["nDCG@10"] == pytest.approx(again.metrics["nDCG@10"])


def test_default_assets_are_the_shared_copies_else_the_public_ids(tmp_path, monkeypatch):
    monkeypatch.setattr(quickstart_module, "shared_folder", lambda: None)
    assert default_assets() == (DEFAULT_BACKBONE, DEFAULT_DATA, DEFAULT_EVAL_DATA)
    for parts in (("models", "splade-tiny-msmarco"), ("data", "scifact")):
        tmp_path.joinpath(*parts).mkdir(parents=True)
    monkeypatch.setattr(quickstart_module, "shared_folder", lambda: tmp_path)
    # each asset on its own: a shared folder without Cranfield evaluates on the public id
    assert default_assets() == (
        str(tmp_path / "models" / "splade-tiny-msmarco"),
        str(tmp_path / "data" / "scifact"),
        DEFAULT_EVAL_DATA,
    )
    (tmp_path / "data" / "cranfield").mkdir()
    assert default_assets()[2] == str(tmp_path / "data" / "cranfield")


# ----------------------------------------------------------------------------------------- the hub path, offline
def _summary_ok(result: subprocess.CompletedProcess, out: Path) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert 0 < summary["after"]["nDCG@10"] <= 1 and summary["before"]["docs"] == summary["after"]["docs"]
    return summary


@pytest.fixture(scope="module")
def offline_caches(tmp_path_factory) -> Path:
    """A HF cache holding splade-tiny as the default backbone id and an ir_datasets home holding SciFact and
    Cranfield."""
    model, scifact = shared_path("models", "splade-tiny-msmarco"), shared_path("data", "scifact")
    root = tmp_path_factory.mktemp("caches")
    hf_cache(model, DEFAULT_BACKBONE, root / "hf" / "hub")
    ir_datasets_home(scifact, root / "ir_datasets")
    ir_datasets_cranfield(shared_path("data", "cranfield"), root / "ir_datasets")
    return root


@pytest.mark.slow
@pytest.mark.realdata
def test_quickstart_by_ids_from_the_caches(offline_caches, tmp_path):
    """quickstart with a hub id and an ir_datasets id, HF_HUB_OFFLINE=1: resolved from the caches alone."""
    out = tmp_path / "qs"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "quickstart",
            "--backbone",
            DEFAULT_BACKBONE,
            "--train-data",
            DEFAULT_DATA,
            "--triplets",
            str(shared_path("data", "scifact", "triplets-train.tsv")),
            "--steps",
            "2",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=offline_env(offline_caches),
        cwd=tmp_path,
    )
    summary = _summary_ok(result, out)
    assert summary["backbone"] == DEFAULT_BACKBONE and summary["data"] == DEFAULT_DATA
    assert summary["before"]["source"] == "beir/scifact/test"
    assert summary["before"]["queries"] == 300  # SciFact test: every judged query, read through ir_datasets
    for stage in ("[1/5] diagnose", "[2/5] evaluate before", "[3/5] train", "[4/5] evaluate after", "[5/5] plots"):
        assert stage in result.stderr
    assert "auto-k: k = " in result.stderr and "training:" in result.stderr  # the k explained; a progress bar


@pytest.mark.slow
@pytest.mark.realdata
def test_quickstart_offline_and_not_cached_is_one_line(offline_caches, tmp_path):
    out = tmp_path / "qs"
    env = offline_env(offline_caches) | {"HF_HOME": str(tmp_path / "empty")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "quickstart",
            "--backbone",
            DEFAULT_BACKBONE,
            "--train-data",
            DEFAULT_DATA,
            "--triplets",
            str(shared_path("data", "scifact", "triplets-train.tsv")),
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert (
        DEFAULT_BACKBONE in errors[0] and str(tmp_path / "empty" / "hub") in errors[0] and "HF_HUB_OFFLINE" in errors[0]
    )
    assert not out.exists()


DEMO_MAX_LENGTH = int(re.search(r"--doc-max-length (\d+)", (Path(__file__).parents[2] / "Makefile").read_text())[1])


@pytest.mark.slow
@pytest.mark.realdata
def test_demo_in_a_clone_without_shared_uses_the_public_defaults(offline_caches, tmp_path):
    """`make demo` in a copy of the repository with no `shared` folder beside it: the public default ids,
    resolved from the prepared caches. The copy holds what a clone of this working tree would (tracked
    and untracked, not ignored files); the project's venv stands in for the one `make install` builds."""
    repository = Path(__file__).resolve().parents[2]
    clone = tmp_path / "spladekit"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repository,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, files):
        if (repository / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repository / name, clone / name)
    assert not (tmp_path / "shared").exists()
    bin_dir = Path(sys.executable).parent
    triplets = shared_path("data", "scifact", "triplets-train.tsv")
    env = offline_env(offline_caches) | {"PYTHONPATH": str(clone / "src")}
    result = subprocess.run(
        [
            "make",
            "-o",
            str(bin_dir / "spladekit"),
            "demo",
            f"BIN={bin_dir}",
            f"DEMO_ARGS=--steps 2 --triplets {triplets}",
        ],
        cwd=clone,
        capture_output=True,
        text=True,
        env=env,
    )
    summary = _summary_ok(result, clone / "demo-output")
    assert summary["backbone"] == DEFAULT_BACKBONE and summary["data"] == DEFAULT_DATA
    assert summary["eval_data"] == DEFAULT_EVAL_DATA and summary["before"]["source"] == DEFAULT_EVAL_DATA
    # Cranfield whole, read through ir_datasets: every document, every judged query, the demo's token limit
    assert (summary["before"]["docs"], summary["before"]["queries"]) == (1400, 225)
    assert summary["after"]["max_length"] == DEMO_MAX_LENGTH
    assert "| trained (" in result.stdout and "plots:" in result.stdout
