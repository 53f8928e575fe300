"""Atomic writes: output appears complete under its final name, or not at all."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from spladekit.errors import SpladekitError


def check_new_output(target: str | Path, overwrite: bool = False) -> None:
    """Refuse an existing, non-empty output unless ``overwrite`` (checked before any slow work)."""
    target = Path(target)
    if target.exists() and not overwrite and (not target.is_dir() or any(target.iterdir())):
        raise SpladekitError(f"{target}: output already exists (choose another path or pass --overwrite)")


@contextlib.contextmanager
def atomic_directory(target: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``target``, on error it is removed."""
    target = Path(target)
    check_new_output(target, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old.{os.getpid()}")
        target.rename(old)
    staging.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(target: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Yield an open temporary file next to ``target``; renamed onto it only if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, mode, encoding=None if "b" in mode else "utf-8") as stream:
            yield stream
        os.replace(staging, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        raise
