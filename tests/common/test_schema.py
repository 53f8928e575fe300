"""One declaration per value (common/schema.py): the same declaration parses, checks, words the errors and
writes the help of training-config keys, sweep-file keys and backend parameters."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Literal

import pytest
from typer.testing import CliRunner

from spladekit.cli import app
from spladekit.cli.keys import KINDS, reference
from spladekit.common.errors import InputError
from spladekit.common.schema import MAX_SEED, all_keys, build_dataclass, check_declared, declarations, declared
from spladekit.experiments.sweep_config import BackboneSpec, SweepConfig, SweepEvaluation
from spladekit.index import BACKENDS
from spladekit.training.config import TrainConfig


@dataclass
class Toy:
    rate: float = declared(0.5, "a rate", minimum=0, exclusive=True, maximum=1)
    tags: list[str] = declared(["a"], "some tags", min_items=1, unique=True)
    seeds: list[int] | None = declared(None, "seeds", minimum=0, maximum=MAX_SEED)
    mode: Literal["x", "y", "z"] = declared("x", "a mode")


@pytest.mark.parametrize(
    "values, message",
    [
        ({"rate": 0}, "config key 'rate': expected a finite number > 0 and <= 1, got 0.0"),
        ({"rate": "fast"}, "config key 'rate': expected a finite number > 0 and <= 1, got 'fast'"),
        ({"rate": float("nan")}, "config key 'rate': expected a finite number > 0 and <= 1, got nan"),
        ({"tags": []}, "config key 'tags': expected a list of strings (at least 1, no repeats), got []"),
        (
            {"tags": ["a", "a"]},
            "config key 'tags': expected a list of strings (at least 1, no repeats), got ['a', 'a']",
        ),
        ({"tags": [1]}, "config key 'tags': expected a list of strings (at least 1, no repeats), got [1]"),
        ({"seeds": [3, -1]}, "config key 'seeds': expected a list of integers >= 0 and <= 4294967295 or null"),
        ({"seeds": [True]}, "config key 'seeds': expected a list of integers"),
        ({"mode": "w"}, "config key 'mode': expected one of 'x', 'y', 'z', got 'w'"),
        ({"rat": 1}, "unknown config key 'rat' (did you mean 'rate'?)"),
    ],
)
def test_a_declaration_refuses_what_it_does_not_allow_in_one_line_naming_the_key(values, message):
    with pytest.raises(InputError) as caught:
        build_dataclass(Toy, values, "", "toy.yaml")
    assert str(caught.value).startswith(f"toy.yaml: {message}") and "\n" not in str(caught.value)


def test_a_declaration_parses_what_it_allows():
    toy = build_dataclass(Toy, {"rate": "5e-1", "tags": ["b", "c"], "seeds": [0, MAX_SEED], "mode": "z"}, "", None)
    assert (toy.rate, toy.tags, toy.seeds, toy.mode) == (0.5, ["b", "c"], [0, MAX_SEED], "z")
    first, second = Toy(), Toy()
    first.tags.append("changed")
    assert second.tags == ["a"]  # a list default is copied for each instance
    with pytest.raises(InputError, match="'tags': expected a list of strings"):
        check_declared(Toy(tags=[]))  # built in Python: the same check


def test_the_help_line_is_derived_from_the_same_declaration():
    lines = [declaration.describe() for declaration in declarations(Toy)]
    assert lines == [
        "rate (a finite number > 0 and <= 1; default 0.5): a rate",
        'tags (a list of strings (at least 1, no repeats); default ["a"]): some tags',
        "seeds (a list of integers >= 0 and <= 4294967295 or null; default null): seeds",
        "mode (one of 'x', 'y', 'z'; default \"x\"): a mode",
    ]


@pytest.mark.parametrize("schema", [TrainConfig, SweepConfig, SweepEvaluation, BackboneSpec])
def test_every_key_is_declared_with_its_help(schema):
    for declaration in declarations(schema):
        assert declaration.help, f"{schema.__name__}.{declaration.key} has no help"
    leaves = [key for key in all_keys(schema) if not dataclasses.is_dataclass(_hint(schema, key))]
    assert [declaration.key for declaration in declarations(schema)] == leaves


def _hint(schema, key):
    for name in key.split("."):
        schema = typing.get_type_hints(schema)[name]
    return schema


def test_spladekit_keys_prints_every_declaration_and_backend_parameter():
    runner = CliRunner()
    for kind in KINDS:
        result = runner.invoke(app, ["keys", kind])
        assert result.exit_code == 0, result.output
        for section, declared_values in reference(kind).items():
            assert f"# {section}" in result.output
            for declaration in declared_values:
                assert declaration.describe() in result.output.splitlines()
    backends = runner.invoke(app, ["keys", "backends"]).output.splitlines()
    for searcher in BACKENDS.values():
        for param in searcher.declared_params:
            assert param.describe() in backends  # a backend parameter and a config key: one help line format
    assert "optimization.lr (a finite number > 0; default 2e-05): " in runner.invoke(app, ["keys"]).output
