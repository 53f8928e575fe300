"""One declaration system for every value a user sets: training-config and sweep keys, backend parameters.

A dataclass field declares its type (the annotation), default, allowed values and help once:
``lr: float = declared(2e-5, "AdamW's peak learning rate", minimum=0, exclusive=True)``. From that one
declaration come the parsing (:func:`build_dataclass`, key by key while a YAML file or ``--set`` is read),
the range checks (:func:`check_value`; :func:`check_declared` for an object built in Python), the error
wording (:func:`expected`: one line naming the key, the value and what is allowed) and the help
(:meth:`Declaration.describe`, :func:`declarations`: ``spladekit keys`` and the reference in docs/configuration.md).
Backend parameters (:class:`spladekit.index.params.Param`) carry the same :class:`Allowed` and are worded
and described by the same functions. Every number must be finite, declared or not.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Union

from spladekit.common.errors import InputError, SpladekitError

ALLOWED, HELP = "allowed", "help"  # the dataclass field metadata keys
MIN_TOKEN_LIMIT = 8  # the least token limit accepted anywhere (CLI options, configs, SparseEncoder.token_limit)
MAX_SEED = 2**32 - 1  # seeds are integers in [0, MAX_SEED] everywhere: numpy's generators accept no others


@dataclass(frozen=True)
class Allowed:
    """What a value accepts beyond its type: numbers within ``minimum`` (``exclusive``: the minimum itself is
    refused) and ``maximum``; strings matching ``pattern`` in full (``pattern_words`` says it for people). A list
    applies these to each item, and may require ``min_items`` items, ``unique`` ones. Every number must also be
    finite, declared or not."""

    minimum: float | None = None
    exclusive: bool = False
    maximum: float | None = None
    pattern: str | None = None
    pattern_words: str = ""
    min_items: int = 0
    unique: bool = False

    def accepts(self, value: object) -> bool:
        if isinstance(value, list):
            repeated = self.unique and len({json.dumps(item) for item in value}) != len(value)
            return len(value) >= self.min_items and not repeated and all(self.accepts(item) for item in value)
        if isinstance(value, str):
            return self.pattern is None or re.fullmatch(self.pattern, value) is not None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return True  # not ours to judge (types are checked by coerce)
        number = float(value)
        if not math.isfinite(number):
            return False
        if self.minimum is not None and (number < self.minimum or (self.exclusive and number == self.minimum)):
            return False
        return self.maximum is None or number <= self.maximum

    def bounds(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>' if self.exclusive else '>='} {_number(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"<= {_number(self.maximum)}")
        return " and ".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


NO_LIMITS = Allowed()


def declared(
    default: Any,
    help: str,
    minimum: float | None = None,
    exclusive: bool = False,
    maximum: float | None = None,
    pattern: str | None = None,
    pattern_words: str = "",
    min_items: int = 0,
    unique: bool = False,
) -> Any:
    """A dataclass field: its default, its help and its allowed values (see :class:`Allowed`); a list default
    or mapping is copied for each instance."""
    limits = Allowed(minimum, exclusive, maximum, pattern, pattern_words, min_items, unique)
    metadata = {ALLOWED: limits, HELP: help}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.copy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def type_options(hint: Any) -> tuple:
    """The alternatives of a type hint: ``float | None`` → (float, NoneType); a plain type → (type,)."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _item_hint(option: Any) -> Any:
    """``list[int]`` → int; a bare ``list`` → Any."""
    arguments = typing.get_args(option)
    return arguments[0] if arguments else Any


def expected(hint: Any, limits: Allowed = NO_LIMITS) -> str:
    """The values a declaration accepts, in words: ``a finite number > 0 or null``, ``true or false``,
    ``one of 'tied', 'untie', 'auto'``, ``a list of integers >= 0 and <= 4294967295 (at least 1, no repeats)``."""
    words = []
    for option in type_options(hint):
        if option is type(None):
            words.append("null")
        elif typing.get_origin(option) is Literal:
            choices = [repr(choice) for choice in typing.get_args(option)]
            words.append(f"one of {', '.join(choices)}" if len(choices) > 2 else " or ".join(choices))
        elif option is bool:
            words.append("true or false")
        elif option in (int, float):
            kind = "an integer" if option is int else "a finite number"
            words.append(" ".join(filter(None, [kind, limits.bounds()])))
        elif option is str:
            words.append(limits.pattern_words or "a string")
        elif option is list or typing.get_origin(option) is list:
            words.append(_list_words(_item_hint(option), limits))
        elif option is dict:
            words.append("a mapping")
        else:
            words.append(getattr(option, "__name__", str(option)))
    return " or ".join(words)


def _list_words(item: Any, limits: Allowed) -> str:
    if item is Any:
        return "a list"
    plural = {"an integer": "integers", "a finite number": "finite numbers", "a string": "strings"}
    each = expected(item, limits)
    for one, many in plural.items():
        each = each.replace(one, many)
    if each.startswith("one of "):
        each = f"items each {each}"
    rules = [f"at least {limits.min_items}"] if limits.min_items else []
    rules += ["no repeats"] if limits.unique else []
    return f"a list of {each}" + (f" ({', '.join(rules)})" if rules else "")


class Declaration(NamedTuple):
    """One declared value: a config key (nested sections flattened: ``optimization.lr``) or a backend parameter
    (``note``: ``search`` for one that may change at every search)."""

    key: str
    hint: Any
    default: Any
    help: str
    limits: Allowed = NO_LIMITS
    note: str = ""

    def expected(self) -> str:
        return expected(self.hint, self.limits)

    def describe(self) -> str:
        """One line of help, the same for every kind of value: ``key ([note; ]allowed values; default D): help``."""
        note = f"{self.note}; " if self.note else ""
        return f"{self.key} ({note}{self.expected()}; default {json.dumps(self.default)}): {self.help}"


def declarations(cls: Any, prefix: str = "") -> Iterator[Declaration]:
    """Every key of the dataclass ``cls``, nested sections flattened, in declaration order."""
    hints = typing.get_type_hints(cls)
    for item in dataclasses.fields(cls):
        hint = hints[item.name]
        if dataclasses.is_dataclass(hint):
            yield from declarations(hint, f"{prefix}{item.name}.")
            continue
        default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
        yield Declaration(
            prefix + item.name, hint, default, item.metadata.get(HELP, ""), item.metadata.get(ALLOWED, NO_LIMITS)
        )


def all_keys(cls: Any, prefix: str = "") -> list[str]:
    """Every key of ``cls``, sections included (``optimization`` and ``optimization.lr``)."""
    keys, hints = [], typing.get_type_hints(cls)
    for item in dataclasses.fields(cls):
        hint = hints[item.name]
        keys.append(prefix + item.name)
        if dataclasses.is_dataclass(hint):
            keys.extend(all_keys(hint, f"{prefix}{item.name}."))
    return keys


def unknown_key(key: str, candidates: list[str], source: str | None) -> SpladekitError:
    """The error for a key no declaration has, naming the closest one (``difflib``)."""
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return InputError(f"unknown config key {key!r}{hint}", source)


def coerce(value: Any, hint: Any, key: str, source: str | None, limits: Allowed = NO_LIMITS) -> Any:
    """``value`` (as YAML reads it) as the type ``hint`` allows (YAML gives '5e-5' as a string: floats are
    parsed); InputError naming the key, the value and what ``limits`` allows otherwise."""
    choices: list = []
    for option in type_options(hint):
        if option is type(None):
            if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "~")):
                return None
        elif typing.get_origin(option) is Literal:
            if value in typing.get_args(option):
                return value
            choices.extend(typing.get_args(option))
        elif option is bool:
            if isinstance(value, bool):
                return value
        elif option is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif option is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
        elif option is str and isinstance(value, str):
            return value
        elif (option is list or typing.get_origin(option) is list) and isinstance(value, list):
            item = _item_hint(option)
            try:
                return value if item is Any else [coerce(each, item, key, source) for each in value]
            except InputError:
                pass  # worded for the whole list below
    close = difflib.get_close_matches(str(value), [str(choice) for choice in choices], n=1)
    hint_text = f" (did you mean {close[0]!r}?)" if close else ""
    raise InputError(f"config key {key!r}: expected {expected(hint, limits)}, got {value!r}{hint_text}", source)


def check_value(value: Any, item: dataclasses.Field, hint: Any, key: str, source: str | None) -> None:
    """``value`` within what ``item`` declares (numbers always finite); InputError naming key, value and
    the allowed values otherwise."""
    limits = item.metadata.get(ALLOWED, NO_LIMITS)
    if value is None or isinstance(value, bool) or limits.accepts(value):
        return
    raise InputError(f"config key {key!r}: expected {expected(hint, limits)}, got {value!r}", source)


def build_dataclass(cls: Any, values: dict, prefix: str, source: str | None) -> Any:
    """``cls`` from a mapping read from YAML: unknown keys, types and declared ranges checked, key by key."""
    if not isinstance(values, dict):
        raise InputError(
            f"config section {prefix.rstrip('.') or '(top level)'!r} must be a mapping, "
            f"got {type(values).__name__} {values!r:.60}",
            source,
        )
    hints = typing.get_type_hints(cls)
    fields = {item.name: item for item in dataclasses.fields(cls)}
    for key in values:
        if key not in fields:
            raise unknown_key(prefix + str(key), [prefix + name for name in all_keys(cls)], source)
    kwargs = {}
    for name, value in values.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = build_dataclass(hint, {} if value is None else value, f"{prefix}{name}.", source)
        else:
            kwargs[name] = coerce(value, hint, prefix + name, source, fields[name].metadata.get(ALLOWED, NO_LIMITS))
            check_value(kwargs[name], fields[name], hint, prefix + name, source)
    return cls(**kwargs)


def check_declared(instance: Any, prefix: str = "", source: str | None = None) -> None:
    """Every field of the dataclass ``instance`` (nested ones included) against its declared range: the same
    check :func:`build_dataclass` applies while reading a file, for objects built in Python."""
    hints = typing.get_type_hints(type(instance))
    for item in dataclasses.fields(instance):
        value = getattr(instance, item.name)
        if dataclasses.is_dataclass(hints[item.name]):
            check_declared(value, f"{prefix}{item.name}.", source)
        else:
            check_value(value, item, hints[item.name], prefix + item.name, source)
