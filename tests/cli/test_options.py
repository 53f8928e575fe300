"""One meaning per option name (spladekit.cli.options): every name two commands share is declared once, and
every use's help starts with the declared meaning."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from spladekit.cli import app
from spladekit.cli.options import MEANINGS, option, violations


def test_every_shared_option_name_has_one_declared_meaning() -> None:
    assert violations(typer.main.get_command(app)) == []


def _toy(help_text: str) -> typer.Typer:
    toy = typer.Typer()

    @toy.command()
    def first(device: str = option("auto", "--device")) -> None:
        """first"""

    @toy.command()
    def second(device: str = typer.Option("0", "--device", help=help_text), target: str = "") -> None:
        """second"""

    @toy.command()
    def third(target: str = typer.Option("", "--target", help="a recall target")) -> None:
        """third"""

    return toy


def test_a_name_reused_with_another_meaning_is_caught() -> None:
    found = violations(typer.main.get_command(_toy("GPU index for the second command")))
    assert any(line.startswith("--device in `second` does not start with its declared meaning") for line in found)
    # --target: shared by two commands, declared nowhere
    assert "--target is used by second, third but not declared in MEANINGS" in found
    # the same name with the declared meaning and a detail after it is fine
    fine = violations(typer.main.get_command(_toy(MEANINGS["--device"] + " Here: the second one.")))
    assert not any(line.startswith("--device") for line in fine)


def test_undeclared_names_are_refused_at_declaration() -> None:
    try:
        option(None, "--no-such-option")
    except KeyError as error:
        assert "--no-such-option" in str(error)
    else:
        raise AssertionError("an undeclared name was accepted")


def test_per_side_token_limits_refuse_the_other_side(tmp_path) -> None:
    runner = CliRunner()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "1", "text": "a"}\n')
    common = ["encode", "no-model", "--corpus", str(corpus), "-o", str(tmp_path / "out")]
    query_side = runner.invoke(app, [*common, "--side", "query", "--doc-max-length", "16"])
    assert query_side.exit_code != 0
    assert "--doc-max-length is for documents" in str(query_side.exception or query_side.output)
    doc_side = runner.invoke(app, [*common, "--query-max-length", "16"])
    assert doc_side.exit_code != 0
    assert "--query-max-length is for queries" in str(doc_side.exception or doc_side.output)
    assert not (tmp_path / "out").exists()
    # the retired name is gone (click names the new ones)
    retired = runner.invoke(app, [*common, "--max-length", "16"])
    assert retired.exit_code == 2 and "No such option: --max-length" in retired.output
