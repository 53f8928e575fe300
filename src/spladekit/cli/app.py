"""The typer application, its error handling and machine-readable output."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer

from spladekit.errors import SpladekitError

app = typer.Typer(
    name="spladekit",
    help="Turn any masked-LM backbone into a SPLADE sparse retriever: diagnose, rescale, encode, "
    "train, index, search, evaluate, sweep, report, export.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def emit(payload: dict, as_json: bool, output: Path | None, human: str) -> None:
    """Print ``human`` (or JSON with ``--json``) on stdout; also write JSON to ``output`` if given."""
    from spladekit.atomic import atomic_file

    text = json.dumps(payload, indent=2, default=str)
    if output is not None:
        with atomic_file(output) as stream:
            stream.write(text + "\n")
    typer.echo(text if as_json else human)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    # Our own progress messages (sweep cells, skipped runs) are INFO; other libraries stay at WARNING.
    logging.getLogger("spladekit").setLevel(logging.INFO)
    try:
        app()
    except SpladekitError as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
