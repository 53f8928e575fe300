"""Training configuration: schema, overrides, closest-key suggestions, incompatible options, CLI errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spladekit.errors import InputError
from spladekit.train.config import TrainConfig, load_config, save_config

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "configs" / "train-example.yaml"


def write(tmp_path, values: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


MINIMAL = {"backbone": {"id": "some/model"}, "data": {"path": "triplets.tsv"}}


def test_example_config_is_valid_and_complete():
    config = load_config(EXAMPLE)
    assert config.backbone.id.endswith("splade-tiny-msmarco")
    assert config.optimization.lr == pytest.approx(5e-5) and config.seed == 13


def test_overrides_are_typed_and_win(tmp_path):
    config = load_config(write(tmp_path, MINIMAL), ["optimization.lr=1e-4", "rescale.k=auto", "rescale.mode=untie",
                                                    "optimization.max_grad_norm=null", "data.negatives=3"])
    assert config.optimization.lr == pytest.approx(1e-4)  # YAML reads 1e-4 as a string: parsed as a float
    assert (config.rescale.k, config.rescale.mode, config.data.negatives) == ("auto", "untie", 3)
    assert config.optimization.max_grad_norm is None


def test_resolved_config_round_trips(tmp_path):
    config = load_config(write(tmp_path, MINIMAL), ["rescale.k=16"])
    save_config(config, tmp_path / "resolved.yaml", header="# note\n")
    again = load_config(tmp_path / "resolved.yaml")
    assert again == config and again.rescale.k == 16.0 and isinstance(again, TrainConfig)


@pytest.mark.parametrize("values, overrides, message", [
    ({**MINIMAL, "optimization": {"lrate": 1}}, [], "unknown config key 'optimization.lrate' (did you mean 'optimization.lr'?)"),
    ({**MINIMAL, "regulariser": {}}, [], "did you mean 'regularizer'?"),
    (MINIMAL, ["optimisation.steps=3"], "unknown config key 'optimisation.steps' (did you mean 'optimization.steps'?)"),
    (MINIMAL, ["loss.name=infonse"], "did you mean 'infonce'?"),
    (MINIMAL, ["optimization.steps=abc"], "config key 'optimization.steps': expected int"),
    (MINIMAL, ["rescale.k=0"], "rescale.k must be positive"),
    (MINIMAL, ["rescale.k=automatic"], "config key 'rescale.k'"),
    (MINIMAL, ["loss.name=margin_mse"], "set data.teacher"),
    (MINIMAL, ["data.teacher=t.jsonl", "loss.name=kl"], "cannot be matched"),
    (MINIMAL, ["data.teacher=t.jsonl"], "does not use teacher scores"),
    (MINIMAL, ["data.format=id_triplets"], "needs data.queries and data.collection"),
    (MINIMAL, ["optimization.batch_size=6", "optimization.accumulation=4"], "must be a multiple of"),
    ({"data": {"path": "x"}}, [], "backbone.id is required"),
])
def test_bad_configs_name_the_problem(tmp_path, values, overrides, message):
    with pytest.raises(InputError) as caught:
        load_config(write(tmp_path, values), overrides)
    assert message in str(caught.value)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("backbone:\n  id: x\ndata: [unclosed\n")
    with pytest.raises(InputError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}:")


def test_cli_reports_a_bad_key_in_one_line_and_exits_2(tmp_path):
    path = write(tmp_path, {**MINIMAL, "optimization": {"stepz": 3}})
    result = subprocess.run([sys.executable, "-m", "spladekit", "train", str(path), "--output", str(tmp_path / "run")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: unknown config key 'optimization.stepz' (did you mean 'optimization.steps'?)"]
    assert not (tmp_path / "run").exists()


def test_cli_help_documents_every_option():
    result = subprocess.run([sys.executable, "-m", "spladekit", "train", "--help"], capture_output=True, text=True, check=False,
                            env={"COLUMNS": "200", "PATH": ""})
    assert result.returncode == 0
    for option in ("--output", "--set", "--resume", "--overwrite", "--stop-on-collapse"):
        assert option in result.stdout
