"""The typer application, its error handling and machine-readable output."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO, cast, overload

import typer

from spladekit.common.errors import SpladekitError
from spladekit.common.lines import error_reason

app = typer.Typer(
    name="spladekit",
    help="Turn any masked-LM backbone into a SPLADE sparse retriever: diagnose, rescale, encode, "
    "train, index, search, evaluate, sweep, report, export.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@overload
def opened(
    output: Path, folder: bool, overwrite: bool, option: str = "--overwrite"
) -> contextlib.AbstractContextManager[Path]: ...
@overload
def opened(
    output: Path | None, folder: bool, overwrite: bool, option: str = "--overwrite"
) -> contextlib.AbstractContextManager[Path | None]: ...
def opened(
    output: Path | None, folder: bool, overwrite: bool, option: str = "--overwrite"
) -> contextlib.AbstractContextManager[Path | None]:
    """Open a command's output before its work (:func:`spladekit.common.atomic.open_output`: refused if it exists
    without ``--overwrite`` (or the ``option`` that asks for it), locked, staging created) and yield the staging
    path to save into (``None`` when the option was not given); the output is moved into place when the block
    succeeds."""
    return _opened(output, folder, overwrite, option)


@contextlib.contextmanager
def _opened(output: Path | None, folder: bool, overwrite: bool, option: str) -> Iterator[Path | None]:
    if output is None:
        yield None
        return
    from spladekit.common.atomic import open_output

    with open_output(output, folder=folder, overwrite=overwrite, option=option) as staged:
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


class _LineTracker:
    """sys.stderr, remembering whether the last text written ended a line (progress bars end theirs with a
    carriage return): an error line then starts a line of its own instead of landing in a bar's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.at_line_start = stream, True

    def write(self, text: str) -> int:
        if text:
            self.at_line_start = text.endswith("\n")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding…: the stream's own
        return getattr(self.stream, name)


def _error_line(message: str, stderr: _LineTracker) -> None:
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):  # bars an error left open (their loops are in the traceback)
        bar.close()
    stderr.write(("" if stderr.at_line_start else "\n") + message + "\n")
    stderr.flush()


def main() -> None:
    stderr = _LineTracker(sys.stderr)
    sys.stderr = cast(TextIO, stderr)  # before logging and the bars take it
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    # Our own progress messages (sweep cells, skipped runs) are INFO; other libraries stay at WARNING.
    logging.getLogger("spladekit").setLevel(logging.INFO)
    try:
        app()
    except SpladekitError as error:
        _error_line(f"error: {error}", stderr)
        sys.exit(2)
    except (MemoryError, RuntimeError) as error:  # the host's memory, or torch.OutOfMemoryError (a RuntimeError)
        if not isinstance(error, MemoryError) and type(error).__name__ != "OutOfMemoryError":
            raise
        _error_line(f"error: out of memory ({error_reason(error)}): lower --batch-size (or the token limit)", stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        _error_line("interrupted", stderr)
        sys.exit(130)
    finally:
        sys.stderr = stderr.stream
