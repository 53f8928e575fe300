"""experiments/: a 2-backbone × 2-k sweep of tiny models end to end (sweep → report), resumability, dry run."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

from spladekit.common.errors import InputError
from spladekit.experiments import sweep_cost
from spladekit.experiments.report import build_report
from spladekit.experiments.sweep import run_sweep
from spladekit.experiments.sweep_config import Cell, load_sweep, plan
from spladekit.experiments.sweep_cost import dry_run
from tiny_models import build_tiny_model
from train_helpers import write_sweep


@pytest.mark.slow
def test_sweep_then_report_end_to_end(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    sweep = load_sweep(write_sweep(tmp_path))
    assert [cell.name for cell in plan(sweep)] == [
        "bert__k1__none",
        "bert__k8__tied",
        "roberta-x8__k1__none",
        "roberta-x8__k8__tied",
    ]
    output = tmp_path / "out"
    records = run_sweep(sweep, output)
    assert [record["status"] for record in records] == ["done"] * 4

    # the inflated variant really has a head 8x larger than its source, and k = 8 was applied once
    bert_report = json.loads((output / "backbones" / "bert.diagnose.json").read_text())
    variant = json.loads((output / "backbones" / "roberta-x8.diagnose.json").read_text())
    assert variant["inflate"] == 8 and variant["rescale"] is None
    trained = json.loads((output / "runs" / "roberta-x8__k8__tied" / "model" / "config.json").read_text())
    assert trained["spladekit_rescale"]["k"] == 8.0
    assert bert_report["frobenius_norm"] > 0

    result = cli("report", output)
    assert result.returncode == 0, result.stderr
    with (output / "results.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    trained = [row for row in rows if not row["baseline"]]
    assert sorted((row["backbone"], row["k"], row["mode"]) for row in trained) == [
        ("bert", "1.0", "none"),
        ("bert", "8.0", "tied"),
        ("roberta-x8", "1.0", "none"),
        ("roberta-x8", "8.0", "tied"),
    ]
    for row in trained:  # the table's numbers are the run's own evaluation (a lost or mixed-up run would differ)
        evaluated = json.loads((output / "runs" / row["run"] / "evaluation.json").read_text())["collection"]
        assert float(row["collection nDCG@10"]) == evaluated["nDCG@10"] and float(row["FLOPS"]) == evaluated["flops"]
        assert (
            float(row["final loss"])
            == json.loads((output / "runs" / row["run"] / "metrics.jsonl").read_text().splitlines()[-1])["loss"]
        )
    # baseline rows: each backbone untouched (the inflated variant as training starts from it) and BM25
    baselines = {row["run"]: row for row in rows if row["baseline"]}
    assert sorted(baselines) == ["bert__untouched", "bm25", "roberta-x8__untouched"]
    bm25 = json.loads((output / "baselines" / "bm25" / "evaluation.json").read_text())["collection"]
    assert float(baselines["bm25"]["collection nDCG@10"]) == bm25["nDCG@10"] > 0  # BM25 finds the toy's answers
    assert bm25["per_query"]["nDCG@10"] and "flops" not in bm25
    markdown = (output / "results.md").read_text()
    assert "| bert__k8__tied |" in markdown and "Best k per backbone" in markdown and "spladekit report" in markdown
    # every claimed contrast is tested over queries: best vs k=1, vs the untouched backbone, vs BM25
    assert "Paired tests over queries" in markdown
    for backbone in ("bert", "roberta-x8"):
        assert f"| {backbone}__untouched |" in markdown.split("Paired tests")[1]
    for name in ("loss_curves.png", "effectiveness_vs_flops.png", "head_norm_vs_best_k.png"):
        assert (output / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # finished runs are skipped: the model folder is not rewritten
    stamp = (output / "runs" / "bert__k8__tied" / "model" / "model.safetensors").stat().st_mtime_ns
    run_sweep(sweep, output, only=["bert__k8"])
    assert (output / "runs" / "bert__k8__tied" / "model" / "model.safetensors").stat().st_mtime_ns == stamp
    # --only narrows what runs, not the recorded plan
    assert json.loads((output / "plan.json").read_text())["runs"] == [cell.name for cell in plan(sweep)]
    assert len(plan(sweep)) == 4


def test_interrupted_run_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    import spladekit.experiments.sweep as sweep_module
    import spladekit.training.loop as loop
    from spladekit.experiments.sweep import run_cell

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    sweep = load_sweep(write_sweep(tmp_path, k=[8]))
    cell, output = Cell("bert", 8.0, "tied"), tmp_path / "out"
    save_checkpoint = loop.save_checkpoint

    def save_then_die(*args, **kwargs):  # a kill right after the step-2 checkpoint
        save_checkpoint(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        run_cell(cell, sweep, output)
    run_dir = output / "runs" / cell.name
    assert not (run_dir / "model").exists()
    monkeypatch.setattr(loop, "save_checkpoint", save_checkpoint)
    resumed = []
    train = loop.train
    monkeypatch.setattr(sweep_module, "train", lambda *a, **kw: resumed.append(kw["resume"]) or train(*a, **kw))
    assert run_cell(cell, sweep, output)["status"] == "done"
    assert resumed == [True]
    assert [m["step"] for m in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())] == [1, 2, 3]


def test_backbone_set_overrides_only_that_backbones_recipe(tmp_path, monkeypatch):
    from spladekit.experiments.sweep import run_cell

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    bert = str(build_tiny_model("bert", tmp_path / "bert"))
    sweep = load_sweep(
        write_sweep(
            tmp_path,
            k=[1],
            backbones=[
                {"name": "bert", "id": bert},
                {"name": "bert-lq0.5", "id": bert, "set": ["regularizer.lambda_q=0.5", "optimization.steps=2"]},
                {"name": "bert-lq0.1", "id": bert, "set": ["regularizer.lambda_q=0.1", "optimization.steps=2"]},
            ],
        )
    )
    output = tmp_path / "out"
    for name in ("bert", "bert-lq0.5", "bert-lq0.1"):
        run_cell(Cell(name, 1.0, "none"), sweep, output)
    plain, variant = (
        yaml.safe_load((output / "runs" / f"{name}__k1__none" / "config.yaml").read_text())
        for name in ("bert", "bert-lq0.5")
    )
    assert (plain["regularizer"]["lambda_q"], plain["optimization"]["steps"]) == (1e-3, 3)
    assert (variant["regularizer"]["lambda_q"], variant["optimization"]["steps"]) == (0.5, 2)
    assert variant["regularizer"]["lambda_d"] == 1e-3  # untouched keys keep the shared recipe's value
    assert json.loads((output / "runs" / "bert-lq0.5__k1__none" / "run.json").read_text())["set"] == [
        "regularizer.lambda_q=0.5",
        "optimization.steps=2",
    ]

    # the report lists the overrides and joins the two recipe variants of k=1 into one trade-off curve
    import matplotlib.axes

    curves = []
    plot_line = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "plot",
        lambda axis, *a, **kw: curves.append((kw.get("label"), len(a[0]))) or plot_line(axis, *a, **kw),
    )
    build_report(output)
    with (output / "results.csv").open() as stream:
        overrides = {row["backbone"]: row["set"] for row in csv.DictReader(stream)}
    assert overrides == {
        "bert": "",
        "bert-lq0.5": "regularizer.lambda_q=0.5 optimization.steps=2",
        "bert-lq0.1": "regularizer.lambda_q=0.1 optimization.steps=2",
    }
    assert ("k=1 none across recipes", 2) in curves


def test_bad_sweep_files_are_clear_errors(tmp_path):
    def backbone_with(assignments):
        return [{"name": "b", "id": str(tmp_path / "bert"), "set": assignments}]

    with pytest.raises(InputError, match="did you mean 'regularizer.lambda_q'"):
        load_sweep(write_sweep(tmp_path, backbones=backbone_with(["regularizer.lamda_q=1"])))
    with pytest.raises(InputError, match="backbone and rescale are set by the sweep"):
        load_sweep(write_sweep(tmp_path, backbones=backbone_with(["rescale.k=2"])))
    with pytest.raises(InputError, match="did you mean 'backbones'"):
        load_sweep(write_sweep(tmp_path, backbone=[]))
    with pytest.raises(InputError, match=re.escape("'k': expected a list of finite numbers > 0 or 'auto' (at least 1")):
        load_sweep(write_sweep(tmp_path, k=[0]))
    with pytest.raises(InputError, match="'k': expected a list of finite numbers > 0 or 'auto' .*, got \\[\\]"):
        load_sweep(write_sweep(tmp_path, k=[]))
    with pytest.raises(
        InputError, match=re.escape("'modes': expected a list of items each one of 'tied', 'untie', 'auto'")
    ):
        load_sweep(write_sweep(tmp_path, modes=["sideways"]))
    with pytest.raises(
        InputError,
        match=re.escape(
            "'backbones[0].k': expected a list of finite numbers > 0 or 'auto' (no repeats) or null, got ['eight']"
        ),
    ):
        load_sweep(write_sweep(tmp_path, backbones=[{"name": "b", "id": str(tmp_path / "bert"), "k": ["eight"]}]))
    with pytest.raises(InputError, match="recipe.rescale is set per run"):
        load_sweep(write_sweep(tmp_path, recipe={"rescale": {"k": 2}, "data": {"path": "x"}}))


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../escape", "a__b", "with space", "", "caf\u00e9"])
def test_backbone_names_must_be_safe_folder_names(tmp_path, name):
    path = write_sweep(tmp_path, backbones=[{"name": name, "id": str(tmp_path / "bert")}])
    with pytest.raises(InputError) as caught:
        load_sweep(path)
    assert str(caught.value) == (
        f"{path}: config key 'backbones[0].name': expected a name of letters, digits, "
        f"'.', '_' and '-' (not '.' or '..', no '__'), got {name!r}"
    )


@pytest.mark.parametrize("name", ["tiny", "bert-base.v2", "x_8", "..x", "a.b"])
def test_safe_backbone_names_are_accepted(tmp_path, name):
    sweep = load_sweep(write_sweep(tmp_path, backbones=[{"name": name, "id": str(tmp_path / "bert")}]))
    assert sweep.backbones[0].name == name


SEEDS = "config key 'seeds': expected a list of integers >= 0 and <= 4294967295 (at least 1, no repeats) or null, got "


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"backbones": [{"name": "b", "id": "x", "inflate": float("inf")}]},
            "'backbones[0].inflate': expected a finite number > 0 or null, got inf",
        ),
        (
            {"backbones": [{"name": "b", "id": "x", "inflate": 0}]},
            "'backbones[0].inflate': expected a finite number > 0",
        ),
        ({"evaluation": {"data": [], "batch_size": 0}}, "'evaluation.batch_size': expected an integer >= 1, got 0"),
        ({"evaluation": {"data": [], "max_length": -1}}, "'evaluation.max_length': expected an integer >= 8 or null"),
        (
            {"recipe": {"data": {"path": "x"}, "optimization": {"max_grad_norm": -1}}},
            "'optimization.max_grad_norm': expected a finite number > 0 or null, got -1.0",
        ),
        (
            {"seeds": []},
            SEEDS + "[]",
        ),
        (
            {"seeds": [1, -1]},
            SEEDS + "[1, -1]",
        ),
        ({"seeds": [1, 1.5]}, SEEDS + "[1, 1.5]"),
        (
            {"seeds": [2, 2]},
            SEEDS + "[2, 2]",
        ),
        (
            {"baselines": ["bm26"]},
            "config key 'baselines': expected a list of 'untouched' or 'bm25' (no repeats), got ['bm26']",
        ),
        ({"baselines": ["bm25", "bm25"]}, "'baselines': expected a list of 'untouched' or 'bm25' (no repeats), got"),
    ],
)
def test_sweep_values_are_checked_against_the_same_declared_ranges(tmp_path, changes, message):
    with pytest.raises(InputError, match=re.escape(message)):
        load_sweep(write_sweep(tmp_path, **changes))


def test_a_sweep_says_how_to_allow_remote_code_in_the_sweep_file(tmp_path):
    """`sweep` has no --trust-remote-code option: the message names the backbone's key in the sweep file."""
    from spladekit.model.backbone import RemoteCodeRequired

    gte = build_tiny_model("gte", tmp_path / "gte")
    sweep = load_sweep(write_sweep(tmp_path, backbones=[{"name": "gte", "id": str(gte)}]))
    with pytest.raises(RemoteCodeRequired) as caught:
        run_sweep(sweep, tmp_path / "out")
    assert str(caught.value) == (
        f"{gte}: this model needs its own (remote) code; set trust_remote_code: true on "
        f"backbone 'gte' in the sweep file if you trust it"
    )


def test_dry_run_reports_missing_data_and_unreachable_hub(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path, evaluation={"data": [str(tmp_path / "missing-collection"), "nanobeir"]}))
    sweep.backbones[0].id = "nobody-has/this-model"
    result = dry_run(sweep)
    assert any("missing-collection" in problem for problem in result["problems"])
    checks = {row["backbone"]: row["backbone_check"] for row in result["runs"]}
    assert checks["bert"].startswith("not checked") and checks["roberta-x8"] == "ok"
    assert [row["estimated_train_seconds"] for row in result["runs"] if row["backbone"] == "bert"] == [None, None]


def test_dry_run_estimate_is_proportional_to_the_steps(tmp_path, monkeypatch):
    """The estimate is steps × a step's FLOPs ÷ the machine's speed: pinning the speed at a tiny value (so the
    seconds are large and rounding does not matter), twice the steps is twice the estimate."""
    monkeypatch.setattr(sweep_cost, "_machine_flops_per_second", lambda: 4.0)
    estimates = []
    for steps in (3, 6):
        sweep = load_sweep(write_sweep(tmp_path / str(steps)))
        sweep.recipe["optimization"]["steps"] = steps
        runs = dry_run(sweep)["runs"]
        estimates.append([row["estimated_train_seconds"] for row in runs])
    assert all(seconds > 1e6 for seconds in estimates[0])
    assert [2 * seconds for seconds in estimates[0]] == pytest.approx(estimates[1], rel=1e-9)


def test_paper_config_dry_run_passes_offline(cli):
    config = Path(__file__).resolve().parents[2] / "configs" / "paper.yaml"
    result = cli("sweep", config, "--output", "unused", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    plan_ = json.loads(result.stdout)
    assert len(plan_["runs"]) == 7 * (1 + 5 * 1) and plan_["problems"] == []


# ----------------------------------------------------------------------------------------- damaged sweep folders
def write_finished_run(sweep_dir: Path, name: str = "bert__k8__tied") -> Path:
    """A finished run as a sweep leaves it (run.json, evaluation.json, metrics.jsonl), without training one."""
    run_dir = sweep_dir / "runs" / name
    run_dir.mkdir(parents=True)
    record = {
        "run": name,
        "backbone": "bert",
        "backbone_id": "bert",
        "inflate": None,
        "inflate_mode": "tied",
        "set": [],
        "k": 8.0,
        "mode": "tied",
        "status": "done",
        "initial_head_norm": 12.5,
        "auto_k": 8.0,
        "initial_median_pair_score": 30.0,
        "seconds": 1.5,
    }
    (run_dir / "run.json").write_text(json.dumps(record))
    result = {
        "name": "collection",
        "measures": ["nDCG@10"],
        "nDCG@10": 0.5,
        "flops": 2.0,
        "avg_q_nnz": 3.0,
        "avg_d_nnz": 4.0,
        "docs": 8,
        "queries": 4,
        "search_ms_per_query": 0.1,
        "per_query": {"nDCG@10": {"q1": 0.5}},
    }
    (run_dir / "evaluation.json").write_text(json.dumps({"collection": result}))
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": step, "loss": 1.0 / step}) + "\n" for step in (1, 2, 3))
    )
    return run_dir


REPORT_DAMAGES = {
    "run.json garbage": ("run.json", "{not json", "run.json:1: not valid JSON"),
    "run.json a list": ("run.json", "[]", "run.json: expected a JSON object, got list"),
    "run.json k a word": ("run.json", {"k": "eight"}, "run.json: 'k' must be a number or 'auto', got 'eight'"),
    "run.json backbone a number": ("run.json", {"backbone": 3}, "run.json: 'backbone' must be a string, got 3"),
    "run.json set a string": ("run.json", {"set": "a=1"}, "run.json: 'set' must be a JSON list or null, got 'a=1'"),
    "run.json no status": ("run.json", {"status": None}, "run.json: 'status' must be a string, got null"),
    "evaluation.json garbage": ("evaluation.json", "\x00\x01", "evaluation.json:1: not valid JSON"),
    "evaluation.json result a list": (
        "evaluation.json",
        '{"collection": [1]}',
        "evaluation.json: 'collection' must be a JSON object, got a JSON list",
    ),
    "evaluation.json metric a string": (
        "evaluation.json",
        None,
        "evaluation.json: 'collection.nDCG@10' must be a number, got 'x'",
    ),
    "metrics.jsonl loss missing": (
        "metrics.jsonl",
        '{"step": 1}\n',
        "metrics.jsonl:1: 'loss' must be a number, got null",
    ),
    "metrics.jsonl record a list": ("metrics.jsonl", "[1, 2]\n", "metrics.jsonl:1: a record must be a JSON object"),
}


def damage_run_file(run_dir: Path, damage: str) -> str:
    """Spoil one file of ``run_dir`` as ``REPORT_DAMAGES[damage]`` says; return the expected message."""
    name, content, message = REPORT_DAMAGES[damage]
    path = run_dir / name
    if isinstance(content, dict):  # change one key of run.json
        path.write_text(json.dumps(json.loads(path.read_text()) | content))
    elif content is None:  # a metric of the wrong type in evaluation.json
        results = json.loads(path.read_text())
        results["collection"]["nDCG@10"] = "x"
        path.write_text(json.dumps(results))
    else:
        path.write_text(content)
    return message


@pytest.mark.parametrize("damage", list(REPORT_DAMAGES))
def test_report_on_damaged_run_files_is_an_error_naming_the_file_and_writes_nothing(tmp_path, damage):
    sweep_dir = tmp_path / "sweep"
    run_dir = write_finished_run(sweep_dir)
    message = damage_run_file(run_dir, damage)
    with pytest.raises(InputError) as error:
        build_report(sweep_dir)
    assert str(error.value).startswith(f"{run_dir}/") and message in str(error.value)
    assert sorted(path.name for path in sweep_dir.iterdir()) == ["runs"]


@pytest.mark.parametrize("damage", ["run.json garbage", "evaluation.json metric a string"])
def test_cli_report_on_damaged_run_files_is_one_error_line(tmp_path, damage, cli):
    sweep_dir = tmp_path / "sweep"
    run_dir = write_finished_run(sweep_dir)
    message = damage_run_file(run_dir, damage)
    result = cli("report", sweep_dir)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {run_dir}/") and message in lines[0], lines
    assert sorted(path.name for path in sweep_dir.iterdir()) == ["runs"]


def test_report_of_the_undamaged_stand_in_works(tmp_path, cli):
    write_finished_run(tmp_path / "sweep")
    result = cli("report", tmp_path / "sweep")
    assert result.returncode == 0, result.stderr
    assert "| bert__k8__tied |" in (tmp_path / "sweep" / "results.md").read_text()


# ----------------------------------------------------------------------------------------- seeds and paired tests
def test_seeds_repeat_every_run_and_set_the_recipe_seed(tmp_path):
    from spladekit.experiments.sweep_config import run_values

    sweep = load_sweep(write_sweep(tmp_path, seeds=[3, 5]))
    cells = plan(sweep)
    assert [cell.name for cell in cells][:4] == [
        "bert__k1__none__s3",
        "bert__k1__none__s5",
        "bert__k8__tied__s3",
        "bert__k8__tied__s5",
    ]
    assert len(cells) == 8 and {cell.seed for cell in cells} == {3, 5}
    assert run_values(sweep, sweep.backbones[0], cells[1], "x")["seed"] == 5
    assert "seed" not in run_values(
        load_sweep(write_sweep(tmp_path)), sweep.backbones[0], Cell("bert", 1.0, "none"), "x"
    )


def test_a_backbone_can_divide_the_bias_too_and_scale_the_lr(tmp_path):
    from spladekit.experiments.sweep_config import run_values

    model = str(build_tiny_model("bert", tmp_path / "b"))
    sweep = load_sweep(
        write_sweep(tmp_path, backbones=[{"name": "b", "id": model, "rescale_bias": True, "lr_scale": True}])
    )
    assert run_values(sweep, sweep.backbones[0], Cell("b", 8.0, "tied"), "x")["rescale"] == {
        "k": 8.0,
        "mode": "tied",
        "rescale_bias": True,
        "lr_scale": True,
    }
    assert run_values(sweep, sweep.backbones[0], Cell("b", 1.0, "none"), "x")["rescale"] == {"k": None}


def write_seeded_run(
    sweep_dir: Path, name: str, values: list[float], seed: int | None, baseline: str | None = None
) -> None:
    """A finished run (or baseline) whose per-query nDCG@10 are ``values`` (queries q0, q1, …)."""
    run_dir = sweep_dir / ("baselines" if baseline else "runs") / name
    run_dir.mkdir(parents=True)
    backbone, k, mode = ("bm25", 1.0, "none") if name == "bm25" else (name.split("__")[0], 1.0, "none")
    if not baseline:
        k, mode = float(name.split("__")[1][1:]), name.split("__")[2]
    record = {
        "run": name,
        "backbone": backbone,
        "k": k,
        "mode": mode,
        "status": "done",
        "seed": seed,
        "baseline": baseline,
        "auto_k": 8.0,
        "initial_head_norm": 10.0,
    }
    (run_dir / "run.json").write_text(json.dumps(record))
    result = {
        "name": "collection",
        "measures": ["nDCG@10"],
        "nDCG@10": sum(values) / len(values),
        "per_query": {"nDCG@10": {f"q{i}": value for i, value in enumerate(values)}},
    }
    (run_dir / "evaluation.json").write_text(json.dumps({"collection": result}))


def test_report_gives_mean_and_std_over_seeds_and_tests_each_claimed_contrast(tmp_path):
    import numpy as np

    sweep_dir = tmp_path / "sweep"
    rng = np.random.default_rng(0)
    base = rng.random(30) * 0.7
    for seed in (0, 1):
        noise = rng.normal(0, 0.01, 30)
        write_seeded_run(sweep_dir, f"bert__k1__none__s{seed}", list(base + noise), seed)
        write_seeded_run(sweep_dir, f"bert__k8__tied__s{seed}", list(base + 0.1 + noise), seed)
        write_seeded_run(sweep_dir, f"bert__k8__untie__s{seed}", list(base + 0.1 - noise), seed)
    write_seeded_run(sweep_dir, "bert__untouched", list(base - 0.2), None, "untouched")
    write_seeded_run(sweep_dir, "bm25", list(base), None, "bm25")
    report = build_report(sweep_dir)

    assert report["best"]["bert"]["best_run"] in ("bert__k8__tied", "bert__k8__untie")
    tests = {(test["a"], test["b"]): test for test in report["paired_tests"]}
    best = report["best"]["bert"]["best_run"]
    assert set(tests) == {
        (best, "bert__k1__none"),
        (best, "bert__untouched"),
        (best, "bm25"),
        ("bert__k8__tied", "bert__k8__untie"),
    }
    against_k1 = tests[(best, "bert__k1__none")]
    assert against_k1["units"] == 30 and against_k1["p_value"] < 0.001
    assert against_k1["mean_difference"] == pytest.approx(0.1, abs=0.01)  # seeds averaged per query
    assert tests[("bert__k8__tied", "bert__k8__untie")]["p_value"] > 0.05  # tied and untie differ by noise only
    markdown = (sweep_dir / "results.md").read_text()
    configurations = markdown.split("## Configurations")[1].split("##")[0]
    assert "| bert__k8__tied | 2 |" in configurations and " ± " in configurations
    with (sweep_dir / "results.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    assert [row["run"] for row in rows][-2:] == ["bert__untouched", "bm25"]
    assert {row["configuration"] for row in rows if not row["baseline"]} == {
        "bert__k1__none",
        "bert__k8__tied",
        "bert__k8__untie",
    }


def test_report_tests_the_contrasts_asked_for_and_refuses_unknown_names(tmp_path, cli):
    sweep_dir = tmp_path / "sweep"
    for seed in (0, 1):
        write_seeded_run(sweep_dir, f"bert__k1__none__s{seed}", [0.1, 0.2, 0.3, 0.4], seed)
        write_seeded_run(sweep_dir, f"bert__k8__untie__s{seed}", [0.3, 0.5, 0.6, 0.9], seed)
    write_seeded_run(sweep_dir, "bm25", [0.2, 0.2, 0.2, 0.2], None, "bm25")
    report = build_report(sweep_dir, contrasts=["bert__k1__none:bert__k8__untie", "bm25:bert__k1__none"])
    pairs = [(test["a"], test["b"]) for test in report["paired_tests"]]
    # the report's own (best, k = 1) pair is asked the other way round: tested once, as asked
    assert ("bert__k8__untie", "bm25") in pairs and ("bert__k8__untie", "bert__k1__none") not in pairs
    assert pairs[-2:] == [("bert__k1__none", "bert__k8__untie"), ("bm25", "bert__k1__none")]
    asked = report["paired_tests"][-1]
    assert (asked["a"], asked["b"], asked["units"]) == ("bm25", "bert__k1__none", 4)
    assert asked["mean_difference"] == pytest.approx(-0.05)
    assert "| bm25 | bert__k1__none | 4 |" in (sweep_dir / "results.md").read_text()
    (sweep_dir / "results.md").unlink()
    # A:B:MARGIN adds a TOST within the stated margin to that contrast only (the report's own pairs get none)
    report = build_report(sweep_dir, contrasts=["bm25:bert__k1__none:0.01"])
    asked = report["paired_tests"][-1]
    assert (asked["a"], asked["b"], asked["margin"]) == ("bm25", "bert__k1__none", 0.01)
    assert asked["tost_p_value"] is not None and not asked["equivalent"]  # a 0.05 gap is not within ±0.01
    assert all(test["margin"] is None for test in report["paired_tests"][:-1])
    assert all(test["p_holm"] >= test["p_value"] for test in report["paired_tests"])
    assert "±0.01: " in (sweep_dir / "results.md").read_text()
    (sweep_dir / "results.md").unlink()
    for contrast, message in [
        ("bert__k2__tied:bm25", "--contrast names bert__k2__tied: no finished run"),
        ("bm25", "--contrast 'bm25': expected A:B"),
        ("bm25:bm25", "a configuration against itself tests nothing"),
        ("bm25:bert__k1__none:wide", "the equivalence margin 'wide' is not a positive number"),
        ("bm25:bert__k1__none:0", "the equivalence margin '0' is not a positive number"),
        ("bm25:bert__k1__none:0.01:x", "expected A:B or A:B:MARGIN"),
    ]:
        result = cli("report", sweep_dir, "--contrast", contrast)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
        assert not (sweep_dir / "results.md").exists()


def test_shards_split_the_grid_and_its_baselines_with_no_run_twice_or_missed(tmp_path, monkeypatch):
    import spladekit.experiments.sweep as sweep_module
    from spladekit.vectors.encoding import ShardSelection

    ran: dict[int, list[str]] = {}
    sweep = load_sweep(write_sweep(tmp_path, baselines=["untouched", "bm25"]))
    for index in range(3):
        names = ran.setdefault(index, [])
        monkeypatch.setattr(sweep_module, "run_cell", lambda cell, *a, names=names: names.append(cell.name) or {})
        monkeypatch.setattr(sweep_module, "run_baseline", lambda name, *a, names=names: names.append(name) or {})
        run_sweep(sweep, tmp_path / "out", shard=ShardSelection(index, 3))
    everything = [cell.name for cell in plan(sweep)] + [name for name, _ in sweep_module.baseline_plan(sweep)]
    assert sorted(sum(ran.values(), [])) == sorted(everything) and len(everything) == 7
    assert all(ran.values())  # every worker got work


def test_report_of_a_partly_run_grid_names_the_missing_runs(tmp_path, monkeypatch):
    from spladekit.experiments.report import build_report

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    sweep = load_sweep(write_sweep(tmp_path, k=[1], baselines=[]))
    run_sweep(sweep, tmp_path / "out", only=["bert__"])
    result = build_report(tmp_path / "out")
    assert result["missing_runs"] == ["roberta-x8__k1__none"]
    markdown = Path(result["markdown"]).read_text()
    assert "**Partial grid: 1 of the 2 planned runs has no result:**\n\n- roberta-x8__k1__none: not run\n" in markdown


def test_report_lists_every_planned_run_without_a_result_the_baselines_first(tmp_path, cli):
    """A planned baseline that never ran was not listed at all (only trained runs were compared with the plan),
    so a report without its BM25 row looked complete."""
    sweep_dir = tmp_path / "sweep"
    write_finished_run(sweep_dir)  # bert__k8__tied
    write_seeded_run(sweep_dir, "bm25", [0.5, 0.25], None, "bm25")
    started = sweep_dir / "runs" / "bert__k1__none"
    started.mkdir()
    record = json.loads((sweep_dir / "runs" / "bert__k8__tied" / "run.json").read_text())
    (started / "run.json").write_text(json.dumps(record | {"run": "bert__k1__none", "k": 1.0, "status": "training"}))
    runs = ["bert__k1__none", "bert__k8__tied", "bert__k16__tied"]
    (sweep_dir / "plan.json").write_text(
        json.dumps({"name": "s", "runs": runs, "baselines": ["bert__untouched", "bm25"]})
    )
    report = build_report(sweep_dir)
    assert report["missing_runs"] == ["bert__untouched", "bert__k1__none", "bert__k16__tied"]
    assert report["missing_baselines"] == ["bert__untouched"]
    assert (
        "**Partial grid: 3 of the 5 planned runs have no result:**\n\n"
        "- baseline bert__untouched: not run\n"
        "- bert__k1__none: training, unfinished\n"
        "- bert__k16__tied: not run\n"
    ) in (sweep_dir / "results.md").read_text()
    result = cli("report", sweep_dir, "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["missing_runs"][0] == "bert__untouched"


def test_report_of_a_grid_where_only_a_baseline_finished(tmp_path, cli):
    """A worker (--shard, --only bm25) may finish a baseline before any trained run: that was "not a sweep folder"."""
    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "baselines").mkdir(parents=True)
    (sweep_dir / "plan.json").write_text(json.dumps({"name": "s", "runs": ["bert__k1__none"], "baselines": ["bm25"]}))
    result = cli("report", sweep_dir)
    assert result.returncode == 2 and "no run or baseline of plan.json has started yet" in result.stderr
    assert sorted(path.name for path in sweep_dir.iterdir()) == ["baselines", "plan.json"]
    write_seeded_run(sweep_dir, "bm25", [0.5, 0.25], None, "bm25")
    report = build_report(sweep_dir)
    assert report["missing_runs"] == ["bert__k1__none"] and report["rows"] == 1
    assert "| bm25 |" in (sweep_dir / "results.md").read_text()


@pytest.mark.slow
def test_two_shard_workers_and_two_device_workers_give_the_report_of_one(tmp_path, monkeypatch, cli):
    """`sweep --shard 0/2` and `--shard 1/2` as two processes side by side, and `--devices cpu,cpu`: the same
    runs, scores and report rows as one worker (training is deterministic given the config)."""
    import subprocess
    import sys

    from spladekit.experiments.report import build_report

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    config = write_sweep(tmp_path, k=[1, 8], baselines=["bm25"])
    run_sweep(load_sweep(config), tmp_path / "one")
    command = [sys.executable, "-m", "spladekit", "sweep", str(config), "--output", str(tmp_path / "shards")]
    workers = [subprocess.Popen([*command, "--shard", f"{i}/2", "--device", "cpu"]) for i in range(2)]
    assert [worker.wait() for worker in workers] == [0, 0]
    done = cli("sweep", config, "--output", tmp_path / "devices", "--devices", "cpu,cpu")
    assert done.returncode == 0, done.stderr
    logs = sorted(path.name for path in (tmp_path / "devices" / "workers").iterdir())
    assert logs == ["worker-0.log", "worker-1.log"]

    def scores(folder: Path) -> dict:  # what training and evaluation computed (timings aside)
        runs = sorted((folder / "runs").iterdir()) + [folder / "baselines" / "bm25"]
        evaluations = {run.name: json.loads((run / "evaluation.json").read_text()) for run in runs}
        return {run: {name: value["per_query"] for name, value in one.items()} for run, one in evaluations.items()}

    reference = scores(tmp_path / "one")
    assert len(reference) == 5
    for folder in ("shards", "devices"):
        assert scores(tmp_path / folder) == reference, folder
        assert build_report(tmp_path / folder)["missing_runs"] == []


def test_two_workers_needing_one_inflated_backbone_build_it_once(tmp_path, monkeypatch):
    """Two sweep workers (--shard, --devices) whose cells share an inflated backbone reach prepare_backbone together:
    one builds the variant (slowly, here), the other waits for it instead of failing on the folder's lock."""
    import threading
    import time

    import spladekit.experiments.sweep as sweep_module

    sweep = load_sweep(write_sweep(tmp_path))
    spec = next(spec for spec in sweep.backbones if spec.inflate is not None)
    inflate, builds = sweep_module.inflate, []

    def slow_inflate(*args):
        builds.append(1)
        time.sleep(1.5)
        return inflate(*args)

    monkeypatch.setattr(sweep_module, "inflate", slow_inflate)
    results, errors = [], []

    def worker():
        try:
            results.append(sweep_module.prepare_backbone(spec, tmp_path / "out", sweep))
        except Exception as error:  # what a worker would exit with
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 2 and results[0] == results[1] and builds == [1]
    assert (tmp_path / "out" / "backbones" / spec.name / "config.json").is_file()


def test_the_backbone_reports_auto_k_is_the_k_an_auto_cell_trains_with(tmp_path, monkeypatch):
    """prepare_backbone diagnoses what `rescale.k: auto` diagnoses in training (the first auto_pairs training pairs
    at doc_max_length); it diagnosed the 12 built-in pairs at 256 tokens, so the report's auto_k was another k."""
    import spladekit.experiments.sweep as sweep_module
    from spladekit.data.training import load_training_set
    from spladekit.model.encoder import SparseEncoder
    from spladekit.model.rescaling import resolve_rescale
    from spladekit.training.config import config_from_dict

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    sweep = load_sweep(write_sweep(tmp_path))
    spec = sweep.backbones[1]  # the inflated one: its k is not 1
    seen = []
    diagnose = sweep_module.diagnose
    monkeypatch.setattr(
        sweep_module, "diagnose", lambda *args, **kwargs: seen.append((args, kwargs)) or diagnose(*args, **kwargs)
    )
    path, initial = sweep_module.prepare_backbone(spec, tmp_path / "out", sweep)
    recipe = config_from_dict(
        sweep_module.run_values(sweep, spec, sweep_module.Cell(spec.name, "auto", "auto"), path), "t"
    )
    pairs = load_training_set(recipe.data).pairs(recipe.rescale.auto_pairs)
    ((args, kwargs),) = seen
    assert list(args[1]) == list(pairs) and kwargs["max_length"] == recipe.data.doc_max_length == 16
    trained_with = resolve_rescale(SparseEncoder.from_pretrained(path), "auto", "auto", pairs=pairs, max_length=16)
    assert initial["recommended_k"] == trained_with.k
