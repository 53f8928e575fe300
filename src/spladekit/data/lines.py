"""Strict line and JSON readers: every problem is reported as ``file:line: what is wrong``.

Hand-written rather than ``open().readlines()`` / ``json.load`` because those raise bare
``UnicodeDecodeError`` / ``JSONDecodeError`` without the file name, and the CLI's contract is one
``error: FILE:LINE: …`` line for bad input.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar, overload

from spladekit.errors import InputError

_T = TypeVar("_T")


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file, gzip-compressed when its name ends in ``.gz``."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(
                    f"not valid UTF-8 (byte 0x{raw[error.start]:02x} at column {error.start + 1})", path, number
                ) from None


def json_records(lines: Iterable[tuple[int, str]], path: str | Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed JSON) for each non-blank line of ``lines`` ((number, text) pairs of ``path``)."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON ({error.msg} at column {error.colno})", path, number) from None


@overload
def read_json(path: str | Path, expected: type[_T]) -> _T: ...
@overload
def read_json(path: str | Path, expected: None = None) -> object: ...
def read_json(path: str | Path, expected: type | None = None) -> object:
    """A whole JSON file; a syntax error names its line, a top-level value of another type than
    ``expected`` (e.g. ``dict``) is refused."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise InputError(f"not valid UTF-8 (byte at offset {error.start})", path) from None
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON ({error.msg} at column {error.colno})", path, error.lineno) from None
    if expected is not None and not isinstance(value, expected):
        kinds: dict[type, str] = {dict: "a JSON object", list: "a JSON list"}
        kind = kinds.get(expected, expected.__name__)
        raise InputError(f"expected {kind}, got {type(value).__name__}", path)
    return value
