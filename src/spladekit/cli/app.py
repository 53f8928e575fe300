"""The typer application, its error handling and machine-readable output."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import overload

import typer

from spladekit.common.errors import SpladekitError

app = typer.Typer(
    name="spladekit",
    help="Turn any masked-LM backbone into a SPLADE sparse retriever: diagnose, rescale, encode, "
    "train, index, search, evaluate, sweep, report, export.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@overload
def opened(output: Path, folder: bool, overwrite: bool) -> contextlib.AbstractContextManager[Path]: ...
@overload
def opened(output: Path | None, folder: bool, overwrite: bool) -> contextlib.AbstractContextManager[Path | None]: ...
def opened(output: Path | None, folder: bool, overwrite: bool) -> contextlib.AbstractContextManager[Path | None]:
    """Open a command's output before its work (:func:`spladekit.common.atomic.open_output`: refused if it exists
    without ``--overwrite``, locked, staging created) and yield the staging path to save into (``None``
    when the option was not given); the output is moved into place when the block succeeds."""
    return _opened(output, folder, overwrite)


@contextlib.contextmanager
def _opened(output: Path | None, folder: bool, overwrite: bool) -> Iterator[Path | None]:
    if output is None:
        yield None
        return
    from spladekit.common.atomic import open_output

    with open_output(output, folder=folder, overwrite=overwrite) as staged:
        yield staged.staging


def write_json(output: Path | None, payload: dict) -> None:
    """Write ``payload`` as JSON to ``output`` (atomically; a staging path from :func:`opened` is written into)."""
    from spladekit.common.atomic import atomic_file

    if output is not None:
        with atomic_file(output) as stream:
            stream.write(json.dumps(payload, indent=2, default=str) + "\n")


def emit(payload: dict, as_json: bool, output: Path | None, human: str) -> None:
    """Print ``human`` (or JSON with ``--json``) on stdout; also write JSON to ``output`` if given."""
    write_json(output, payload)
    typer.echo(json.dumps(payload, indent=2, default=str) if as_json else human)


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
