"""The ``spladekit`` command line: thin wrappers over the Python API, one module per pipeline stage.
May import: everything (each stage inside its command, so ``--help`` loads no torch)."""

from spladekit.cli import (
    core,  # noqa: F401  (registers diagnose, rescale, encode)
    experiments,  # noqa: F401
    explain,  # noqa: F401
    export,  # noqa: F401
    keys,  # noqa: F401
    quickstart,  # noqa: F401
    retrieval,  # noqa: F401
    serve,  # noqa: F401
    train,  # noqa: F401
)
from spladekit.cli.app import app, main

__all__ = ["app", "main"]
