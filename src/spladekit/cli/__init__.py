"""The ``spladekit`` command line: thin wrappers over the Python API, one module per pipeline stage."""

from spladekit.cli.app import app, main
from spladekit.cli import core  # noqa: F401  (registers diagnose, rescale, encode)

__all__ = ["app", "main"]
