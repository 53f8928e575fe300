"""Strict readers: every problem with a file spladekit reads is reported as ``file[:line]: what is wrong``.

Hand-written rather than ``open().readlines()`` / ``json.load`` because those raise bare
``UnicodeDecodeError`` / ``JSONDecodeError`` without the file name, and the CLI's contract is one
``error: FILE:LINE: …`` line for bad input.

The one loader path for artifacts (model folders, vectors, indexes, runs, results) is built from:

* :func:`numbered_lines` / :func:`json_records` / :func:`read_json`: text and JSON, syntax and top-level type;
* :func:`expect`: the type of one value read from JSON (``"max_length" must be an integer, got 'abc'``);
* :func:`reading`: around a third-party deserializer (safetensors, numpy, transformers' config), it turns
  whatever that library raises on a damaged file into an :class:`InputError` naming the file;
* :func:`check_id`: the one rule for document and query ids (what a TREC run or qrels line can carry).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import struct
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar, overload

from spladekit.common.errors import InputError, SpladekitError

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


# ----------------------------------------------------------------------------------------- value types
_KIND_NAMES: dict[type, str] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a JSON list",
    dict: "a JSON object",
    type(None): "null",
}


def _is_kind(value: object, kind: type) -> bool:
    if isinstance(value, bool) and kind is not bool:  # JSON true/false is not a number
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def describe(value: object) -> str:
    """A short description of a JSON value for error messages: ``'abc'``, ``a list``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return f"a JSON {'list' if isinstance(value, list) else 'object'}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def expect(
    value: object, kinds: type | tuple[type, ...], what: str, path: str | Path | None, line: int | None = None
) -> Any:
    """``value`` when it is of one of ``kinds`` (``float`` accepts integers; ``bool`` is never a number),
    else an :class:`InputError` ``what must be …, got …`` naming ``path``."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if any(_is_kind(value, kind) for kind in kinds):
        return value
    wanted = " or ".join(_KIND_NAMES.get(kind, kind.__name__) for kind in kinds)
    raise InputError(f"{what} must be {wanted}, got {describe(value)}", path, line)


# ----------------------------------------------------------------------------------------- deserializers
# What third-party readers (numpy/scipy, zipfile, safetensors via ``errors``, transformers' config
# classes…) raise on a truncated, empty or garbled file.
CORRUPTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    struct.error,
    zipfile.BadZipFile,
)


REASON_CHARACTERS = 240  # a library's reason beyond this is cut (zipfile quotes whole damaged headers: ~30 KB)


def first_line(error: BaseException) -> str:
    """The first non-blank line of an exception's message (libraries' messages can span many lines), with
    the next one when the first only introduces it (``Validation error for field 'x':``), cut to
    :data:`REASON_CHARACTERS`."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    text = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return text if len(text) <= REASON_CHARACTERS else f"{text[:REASON_CHARACTERS]}… ({len(text):,} characters)"


def error_reason(error: BaseException) -> str:
    """:func:`first_line`, except that a library's advice to unpickle (``allow_pickle=True``,
    ``weights_only=False``: "if you trust the file") is replaced: spladekit never loads pickles."""
    text = first_line(error)
    if "pickle" in text.lower() or "weights_only" in text:
        return "not in the expected format, or it holds pickled Python objects, which spladekit never loads"
    return text


@contextlib.contextmanager
def reading(path: str | Path, what: str, *errors: type[BaseException]) -> Iterator[None]:
    """Run a deserializer of ``path``; its failure (:data:`CORRUPTION_ERRORS` or ``errors``) becomes
    ``InputError("corrupt or unreadable <what> (<reason>)", path)``. Our own errors pass through."""
    try:
        yield
    except SpladekitError:
        raise
    except (*CORRUPTION_ERRORS, *errors) as error:
        raise InputError(f"corrupt or unreadable {what} ({error_reason(error)})", path) from None


# ----------------------------------------------------------------------------------------- ids
def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a document or query id, or None.

    TREC runs and qrels are whitespace-separated columns, so an id must be non-empty and hold no
    whitespace of any kind (space, tab, newline, non-breaking space…: whatever ``str.split`` splits on).
    """
    if not value:
        return "is empty"
    if any(character.isspace() for character in value):
        return f"{value!r} contains whitespace, which a TREC run or qrels line cannot carry"
    return None


def check_id(value: object, what: str, path: str | Path | None, line: int | None = None) -> str:
    """A valid id from a record field (an integer becomes its decimal string); anything else is an
    :class:`InputError` ``what …`` at ``path:line``."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise InputError(f"{what} must be a non-empty string or an integer, got {describe(value)}", path, line)
    problem = id_problem(value)
    if problem is not None:
        raise InputError(f"{what} {problem}", path, line)
    return value


def read_id_list(path: str | Path) -> list[str]:
    """An ``ids.json`` (vectors and index folders): a JSON list of strings, each a valid id."""
    ids = read_json(path, list)
    for position, item in enumerate(ids, start=1):
        if not isinstance(item, str):
            raise InputError(f"id #{position} must be a string, got {describe(item)}", path)
        problem = id_problem(item)
        if problem is not None:
            raise InputError(f"id #{position} {problem}", path)
    return ids
