"""Declared values of the YAML schemas (training configs, sweep files): what each dataclass field accepts.

A field declares its allowed values once, next to its default: ``lr: float = allowed(2e-5, minimum=0,
exclusive=True)``. :func:`check_value` (called by ``train.config.build_dataclass`` for every key it
reads) and :func:`check_declared` (for a dataclass built in Python) refuse a value outside them with one
line naming the key, the value and what is allowed. Every number must be finite, declared or not.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from spladekit.common.errors import InputError

ALLOWED = "allowed"  # the dataclass field metadata key holding an :class:`Allowed`
MIN_TOKEN_LIMIT = 8  # the least token limit accepted anywhere (CLI options, configs, SparseEncoder.token_limit)
MAX_SEED = 2**32 - 1  # seeds are integers in [0, MAX_SEED] everywhere: numpy's generators accept no others


@dataclass(frozen=True)
class Allowed:
    """What a field accepts beyond its type: numbers within ``minimum`` (``exclusive``: the minimum itself is
    refused) and ``maximum``; strings matching ``pattern`` in full (``pattern_words`` says it for people).
    Every number must also be finite, declared or not."""

    minimum: float | None = None
    exclusive: bool = False
    maximum: float | None = None
    pattern: str | None = None
    pattern_words: str = ""

    def accepts(self, value: object) -> bool:
        if isinstance(value, str):
            return self.pattern is None or re.fullmatch(self.pattern, value) is not None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return True  # not ours to judge (types are checked by train.config's _coerce)
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


def allowed(
    default: Any,
    minimum: float | None = None,
    exclusive: bool = False,
    maximum: float | None = None,
    pattern: str | None = None,
    pattern_words: str = "",
) -> Any:
    """A dataclass field with a default and its allowed values (see :class:`Allowed`)."""
    return field(default=default, metadata={ALLOWED: Allowed(minimum, exclusive, maximum, pattern, pattern_words)})


def type_options(hint: Any) -> tuple:
    """The alternatives of a type hint: ``float | None`` → (float, NoneType); a plain type → (type,)."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _expected(hint: Any, limits: Allowed) -> str:
    """The values a field accepts, in words: ``a finite number > 0 or null``."""
    words = []
    for option in type_options(hint):
        if option is type(None):
            words.append("null")
        elif typing.get_origin(option) is Literal:
            words.extend(repr(choice) for choice in typing.get_args(option))
        elif option in (int, float):
            words.append(
                " ".join(filter(None, ["an integer" if option is int else "a finite number", limits.bounds()]))
            )
        elif option is str:
            words.append(limits.pattern_words or "a string")
        else:
            words.append(getattr(option, "__name__", str(option)))
    return " or ".join(words)


def check_value(value: Any, item: dataclasses.Field, hint: Any, key: str, source: str | None) -> None:
    """``value`` within what ``item`` declares (numbers always finite); InputError naming key, value and
    the allowed values otherwise."""
    limits = item.metadata.get(ALLOWED, NO_LIMITS)
    if value is None or isinstance(value, bool) or limits.accepts(value):
        return
    raise InputError(f"config key {key!r}: expected {_expected(hint, limits)}, got {value!r}", source)


def check_declared(instance: Any, prefix: str = "", source: str | None = None) -> None:
    """Every field of the dataclass ``instance`` (nested ones included) against its declared range: the same
    check ``train.config.build_dataclass`` applies while reading a file, for objects built in Python."""
    hints = typing.get_type_hints(type(instance))
    for item in dataclasses.fields(instance):
        value = getattr(instance, item.name)
        if dataclasses.is_dataclass(hints[item.name]):
            check_declared(value, f"{prefix}{item.name}.", source)
        else:
            check_value(value, item, hints[item.name], prefix + item.name, source)
