"""Backend parameters, declared once: name, type, default, allowed range, help and role.

Every backend lists its :class:`Param` declarations, which carry the same :class:`Allowed` as config keys and
are worded and described by the same functions (:mod:`spladekit.common.schema`). The CLI help, the parsing of
``--param NAME=VALUE`` (values arrive as strings) and the checks of Python calls all come from them, so a value
no backend can use (``query_batch=-5``, ``bsize=0``, ``heap_factor=nan``) is refused with one clear line before
any work starts, instead of producing an empty run or a traceback later.

Roles: a ``build`` parameter is fixed when the index is built; a ``search`` parameter may change at every
search, and when given at build time it becomes the index's default (saved with it).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Literal

from spladekit.common.errors import SpladekitError
from spladekit.common.schema import Allowed, Declaration

ROLES = ("build", "search")
TYPES = (int, float, bool, str)
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class Param:
    """One backend parameter. ``minimum``/``maximum`` bound numbers (``exclusive_minimum``: the minimum itself
    is refused); ``choices`` lists the only values a ``str`` parameter takes; a ``str`` parameter whose default
    is None may be left unset."""

    name: str
    type: type
    default: object
    help: str
    role: str = "build"
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in TYPES or self.role not in ROLES:
            raise TypeError(f"{self.name}: type must be one of {TYPES} and role one of {ROLES}")
        if self.choices and (self.type is not str or self.default not in self.choices):
            raise TypeError(f"{self.name}: choices are for str parameters and must include the default")

    @property
    def hint(self) -> Any:
        """The declared type as a type hint (a str with choices: their Literal), as config keys declare theirs."""
        return Literal[self.choices] if self.choices else self.type

    @property
    def limits(self) -> Allowed:
        """The numeric range (a str: non-empty), as the config schema declares its keys."""
        if self.type is str:
            return Allowed(pattern=".+", pattern_words="a non-empty string")
        return Allowed(self.minimum, self.exclusive_minimum, self.maximum)

    @property
    def declaration(self) -> Declaration:
        """This parameter as the config schema declares a key (one wording, one help line for both)."""
        note = "search" if self.role == "search" else ""
        return Declaration(self.name, self.hint, self.default, self.help, self.limits, note)

    def allowed(self) -> str:
        """The accepted values in words, for the help and for error messages."""
        return self.declaration.expected()

    def describe(self) -> str:
        """One line of help: ``name ([search;] allowed values, which say the type; default): help``."""
        return self.declaration.describe()

    def convert(self, value: object) -> Any:
        """``value`` (a string from the command line, or a Python value) as the declared type, checked;
        ValueError when it is not one of the allowed values."""
        if value is None and self.default is None:
            return None
        if self.type is bool:
            return _to_bool(value)
        if self.type is str:
            if isinstance(value, str) and self.limits.accepts(value) and (not self.choices or value in self.choices):
                return value
            raise ValueError
        number = _to_number(value, self.type)
        if not self.limits.accepts(number):  # finite, within the bounds
            raise ValueError
        return number


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    raise ValueError


def _to_number(value: object, kind: type) -> int | float:
    """int: an integral number or its decimal string; float: any real number or its string (bools refused)."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, str):
        return kind(value.strip())  # int("2.5"), float("abc") raise ValueError
    if isinstance(value, numbers.Integral) or (kind is float and isinstance(value, numbers.Real)):
        return kind(value)
    raise ValueError


def check_values(backend: str, declared: tuple[Param, ...], values: dict, role: str) -> dict:
    """``values`` converted to their declared types and checked, or a one-line SpladekitError naming the
    backend, the parameter, the bad value and what is allowed (for an unknown name: the valid names).

    ``role="build"`` accepts every declared parameter; ``role="search"`` only the search ones.
    """
    accepted = {param.name: param for param in declared if role == "build" or param.role == "search"}
    unknown = sorted(set(values) - set(accepted))
    if unknown:
        when = " at search time" if role == "search" else ""
        raise SpladekitError(
            f"{backend} does not take {', '.join(unknown)}{when}; it takes: {', '.join(accepted) or 'no parameters'}"
        )
    checked = {}
    for name, value in values.items():
        try:
            checked[name] = accepted[name].convert(value)
        except ValueError:
            raise SpladekitError(f"{backend} parameter {name}={value}: must be {accepted[name].allowed()}") from None
    return checked
