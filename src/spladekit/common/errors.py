"""Errors that the CLI turns into one clear line and a non-zero exit code."""

from __future__ import annotations

from pathlib import Path


class SpladekitError(Exception):
    """A problem the user can fix (bad path, bad option, bad model); never a bug in spladekit."""


class InputError(SpladekitError):
    """Bad input data, located as precisely as possible: ``file:line: message``."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(where + message)
