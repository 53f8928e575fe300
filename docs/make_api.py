"""Write docs/api.md, the reference of `import spladekit`'s public names, from their signatures and docstrings.

python docs/make_api.py > docs/api.md     # tests/test_docs.py fails when docs/api.md is out of date
"""

from __future__ import annotations

import inspect

import spladekit

HEADER = """# API reference

Generated from the code by `python docs/make_api.py > docs/api.md` (a test fails when it is out of date): every
name `import spladekit` exports, its signature and the first paragraph of its docstring. The guides say how the
pieces fit: [README](../README.md), [training](training.md), [evaluation](evaluation.md), [encoding](encoding.md).
"""


def summary(thing: object) -> str:
    """The first paragraph of ``thing``'s docstring, on one line."""
    text = inspect.getdoc(thing) or ""
    return " ".join(text.split("\n\n")[0].split())


def signature(thing: object) -> str:
    """``(a, b=1) -> T``, with defaults too long to read (the built-in sample pairs) shown as ``…``."""
    try:
        found = inspect.signature(thing)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(…)"
    parameters = [
        parameter.replace(default=Elided())
        if parameter.default is not inspect.Parameter.empty and len(repr(parameter.default)) > 40
        else parameter
        for parameter in found.parameters.values()
    ]
    return str(found.replace(parameters=parameters))


class Elided:
    def __repr__(self) -> str:
        return "…"


def item(text: str, thing: object) -> str:
    said = summary(thing)
    return f"- {text}" + (f": {said}" if said else "")


def methods(cls: type) -> list[str]:
    """The public methods and properties a class defines itself (not those it inherits from torch or object)."""
    lines = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            lines.append(item(f"`.{name}` (property)", member))
        elif isinstance(member, (classmethod, staticmethod)):
            lines.append(item(f"`{cls.__name__}.{name}{signature(getattr(cls, name))}`", member.__func__))
        elif inspect.isfunction(member):
            lines.append(item(f"`.{name}{signature(member)}`", member))
    return lines


def main() -> None:
    print(HEADER)
    for name in sorted(spladekit.__all__, key=str.lower):
        if name.startswith("__"):
            continue
        thing = getattr(spladekit, name)
        module = getattr(thing, "__module__", "spladekit")
        if inspect.isclass(thing):
            print(f"## `{name}` (class, `{module}`)\n\n{summary(thing)}\n")
            print("\n".join(methods(thing)) + "\n" if methods(thing) else "")
        else:
            print(f"## `{name}{signature(thing)}`\n\n`{module}`: {summary(thing)}\n")


if __name__ == "__main__":
    main()
