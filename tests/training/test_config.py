"""Training configuration: schema, overrides, closest-key suggestions, incompatible options, CLI errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spladekit.common.errors import InputError
from spladekit.training.config import TrainConfig, load_config, save_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs" / "train-example.yaml"


def write(tmp_path, values: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


MINIMAL = {"backbone": {"id": "some/model"}, "data": {"path": "triplets.tsv"}}


def test_example_config_is_valid_and_complete():
    config = load_config(EXAMPLE)
    assert config.backbone.id == "google/bert_uncased_L-2_H-128_A-2"  # a portable hub id, no machine path
    assert config.data.path == "mined.tsv"
    assert config.optimization.lr == pytest.approx(5e-5) and config.seed == 13


def test_overrides_are_typed_and_win(tmp_path):
    config = load_config(
        write(tmp_path, MINIMAL),
        [
            "optimization.lr=1e-4",
            "rescale.k=auto",
            "rescale.mode=untie",
            "optimization.max_grad_norm=null",
            "data.negatives=3",
        ],
    )
    assert config.optimization.lr == pytest.approx(1e-4)  # YAML reads 1e-4 as a string: parsed as a float
    assert (config.rescale.k, config.rescale.mode, config.data.negatives) == ("auto", "untie", 3)
    assert config.optimization.max_grad_norm is None


def test_resolved_config_round_trips(tmp_path):
    config = load_config(write(tmp_path, MINIMAL), ["rescale.k=16"])
    save_config(config, tmp_path / "resolved.yaml", header="# note\n")
    again = load_config(tmp_path / "resolved.yaml")
    assert again == config and again.rescale.k == 16.0 and isinstance(again, TrainConfig)


@pytest.mark.parametrize(
    "values, overrides, message",
    [
        (
            {**MINIMAL, "optimization": {"lrate": 1}},
            [],
            "unknown config key 'optimization.lrate' (did you mean 'optimization.lr'?)",
        ),
        ({**MINIMAL, "regulariser": {}}, [], "did you mean 'regularizer'?"),
        (
            MINIMAL,
            ["optimisation.steps=3"],
            "unknown config key 'optimisation.steps' (did you mean 'optimization.steps'?)",
        ),
        (MINIMAL, ["loss.name=infonse"], "did you mean 'infonce'?"),
        (MINIMAL, ["optimization.steps=abc"], "config key 'optimization.steps': expected an integer >= 1, got 'abc'"),
        (MINIMAL, ["rescale.k=0"], "config key 'rescale.k': expected a finite number > 0 or 'auto' or null, got 0.0"),
        (MINIMAL, ["rescale.k=automatic"], "config key 'rescale.k'"),
        (MINIMAL, ["loss.name=margin_mse"], "set data.teacher"),
        (MINIMAL, ["data.teacher=t.jsonl", "loss.name=kl"], "cannot be matched"),
        (MINIMAL, ["data.teacher=t.jsonl"], "does not use teacher scores"),
        (MINIMAL, ["data.format=id_triplets"], "needs data.queries and data.collection"),
        (MINIMAL, ["optimization.batch_size=6", "optimization.accumulation=4"], "must be a multiple of"),
        (
            MINIMAL,
            ["optimization.activation_checkpointing=1", "backbone.dropout=false"],
            "optimization.activation_checkpointing needs backbone.dropout: true",
        ),
        (
            MINIMAL,
            ["optimization.packing=true", "optimization.length_groups=4"],
            "optimization.packing and optimization.length_groups (4) exclude each other",
        ),
        ({"data": {"path": "x"}}, [], "backbone.id is required"),
    ],
)
def test_bad_configs_name_the_problem(tmp_path, values, overrides, message):
    with pytest.raises(InputError) as caught:
        load_config(write(tmp_path, values), overrides)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "override, allowed",
    [
        ("optimization.max_grad_norm=-1", "a finite number > 0 or null"),  # clipped "uphill" before
        ("optimization.max_grad_norm=0", "a finite number > 0 or null"),  # meant "no clipping" before
        ("optimization.lr=.inf", "a finite number > 0"),
        ("optimization.lr=inf", "a finite number > 0"),
        ("optimization.lr=.nan", "a finite number > 0"),
        ("optimization.lr=0", "a finite number > 0"),
        ("optimization.lr=-1e-5", "a finite number > 0"),
        ("regularizer.lambda_q=.nan", "a finite number >= 0"),
        ("regularizer.lambda_d=nan", "a finite number >= 0"),
        ("regularizer.lambda_q=.inf", "a finite number >= 0"),
        ("regularizer.lambda_d=-0.1", "a finite number >= 0"),
        ("optimization.weight_decay=-0.01", "a finite number >= 0"),
        ("optimization.weight_decay=.nan", "a finite number >= 0"),
        ("optimization.warmup_steps=-1", "an integer >= 0"),
        ("regularizer.warmup_steps=-5", "an integer >= 0"),
        ("optimization.steps=0", "an integer >= 1"),
        ("optimization.batch_size=0", "an integer >= 1"),
        ("optimization.accumulation=0", "an integer >= 1"),
        ("data.negatives=0", "an integer >= 1"),
        ("data.limit=0", "an integer >= 1 or null"),
        ("data.columns=2", "an integer >= 3 or null"),
        ("data.query_max_length=7", "an integer >= 8"),
        ("logging.every=0", "an integer >= 1"),
        ("logging.checkpoint_every=-1", "an integer >= 1"),
        ("logging.keep_checkpoints=0", "an integer >= 1"),
        ("logging.collapse_patience=0", "an integer >= 1"),
        ("logging.explosion_factor=.nan", "a finite number > 1"),
        ("evaluation.batch_size=0", "an integer >= 1"),
        ("evaluation.max_length=4", "an integer >= 8 or null"),
        ("evaluation.max_active_dims=0", "an integer >= 1 or null"),
        ("rescale.auto_pairs=0", "an integer >= 1"),
        ("rescale.k=.inf", "a finite number > 0 or 'auto' or null"),
        ("seed=-1", "an integer >= 0 and <= 4294967295"),
    ],
)
def test_values_outside_their_declared_range_are_refused_with_key_value_and_allowed(tmp_path, override, allowed):
    key, _, _ = override.partition("=")
    path = write(tmp_path, MINIMAL)
    with pytest.raises(InputError) as caught:
        load_config(path, [override])
    message = str(caught.value)
    assert message.startswith(f"{path}: config key {key!r}: expected {allowed}, got ")
    assert "\n" not in message


def test_every_default_is_within_its_declared_range():
    from spladekit.training.config import check_declared

    check_declared(TrainConfig())


def test_a_config_built_in_python_is_checked_by_validate():
    from spladekit.training.config import config_from_dict, validate

    config = config_from_dict(MINIMAL)
    config.optimization.lr = float("nan")
    with pytest.raises(InputError, match=r"config key 'optimization.lr': expected a finite number > 0, got nan"):
        validate(config)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "- backbone\n- data\n",
            "a training config is a mapping of sections (backbone:, data:, optimization: …); this file holds a list",
        ),
        ("42\n", "this file holds a number"),
        ("false\n", "this file holds a boolean"),
    ],
)
def test_a_top_level_list_or_scalar_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_config(path, ["optimization.lr=1e-4"])  # an override on a list used to raise AttributeError
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


@pytest.mark.parametrize(
    "override, message",
    [
        ("optimization.lr=[", "--set 'optimization.lr=[': the value is not valid YAML"),
        ("data.path={a: [}", "the value is not valid YAML"),
        ("optimization.lr", "--set 'optimization.lr': expected section.key=value"),
        ("=1", "--set '=1': expected section.key=value"),
    ],
)
def test_a_malformed_override_is_one_clear_error(tmp_path, override, message):
    from spladekit.common.errors import SpladekitError

    with pytest.raises(SpladekitError) as caught:
        load_config(write(tmp_path, MINIMAL), [override])
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "config_text, overrides, message",
    [
        (
            None,
            ["optimization.max_grad_norm=-1"],
            "config key 'optimization.max_grad_norm': expected a finite number > 0 or null, got -1.0",
        ),
        ("- a\n- b\n", [], "is a mapping of sections"),
        (None, ["optimization.lr=["], "the value is not valid YAML"),
    ],
)
def test_cli_refuses_bad_values_in_one_line_before_any_work(tmp_path, config_text, overrides, message, cli):
    path = write(tmp_path, MINIMAL) if config_text is None else tmp_path / "config.yaml"
    if config_text is not None:
        path.write_text(config_text)
    command = ["train", path, "--output", tmp_path / "run"]
    for override in overrides:
        command += ["--set", override]
    result = cli(*command)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not (tmp_path / "run").exists()


def test_cli_train_says_how_to_allow_remote_code_in_its_own_terms(tmp_path, cli):
    """`train` has no --trust-remote-code option: the message names the config key instead."""
    from tiny_models import build_tiny_model

    model = build_tiny_model("gte", tmp_path / "gte")  # a model with its own code
    triplets = tmp_path / "triplets.tsv"
    triplets.write_text("a query\ta positive\ta negative\n")
    path = write(tmp_path, {"backbone": {"id": str(model)}, "data": {"path": str(triplets)}})
    result = cli("train", path, "--output", tmp_path / "run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {model}: this model needs its own (remote) code; set backbone.trust_remote_code: true in the "
        f"training config if you trust it"
    ]


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("backbone:\n  id: x\ndata: [unclosed\n")
    with pytest.raises(InputError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}:")


def test_cli_reports_a_bad_key_in_one_line_and_exits_2(tmp_path, cli):
    path = write(tmp_path, {**MINIMAL, "optimization": {"stepz": 3}})
    result = cli("train", path, "--output", tmp_path / "run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: unknown config key 'optimization.stepz' (did you mean 'optimization.steps'?)"
    ]
    assert not (tmp_path / "run").exists()


def test_cli_help_documents_every_option():
    result = subprocess.run(
        [sys.executable, "-m", "spladekit", "train", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={"COLUMNS": "200", "PATH": ""},
    )
    assert result.returncode == 0
    for option in ("--output", "--set", "--resume", "--overwrite", "--stop-on-collapse"):
        assert option in result.stdout


def test_the_pooling_key_offers_every_head_the_encoder_has():
    import typing

    from spladekit.model.encoder import POOLINGS
    from spladekit.training.config import OptimizationConfig

    offered = typing.get_args(typing.get_type_hints(OptimizationConfig)["pooling"])
    assert set(offered) == set(POOLINGS)


def test_every_entry_point_defaults_to_the_encoder_s_pooling():
    """The config and the CLI (which do not import torch to start fast) spell the default: it must be the encoder's."""
    import inspect

    from spladekit.cli.core import encode
    from spladekit.model.encoder import DEFAULT_POOLING
    from spladekit.training.config import OptimizationConfig

    assert OptimizationConfig().pooling == DEFAULT_POOLING
    assert inspect.signature(encode).parameters["pooling"].default.default == DEFAULT_POOLING
