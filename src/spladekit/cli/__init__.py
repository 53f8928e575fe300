"""The ``spladekit`` command line: thin wrappers over the Python API, one module per pipeline stage."""

from spladekit.cli.app import app, main
from spladekit.cli import core  # noqa: F401  (registers diagnose, rescale, encode)
from spladekit.cli import retrieval  # noqa: F401
from spladekit.cli import export  # noqa: F401
from spladekit.cli import quickstart  # noqa: F401
from spladekit.cli import train  # noqa: F401
from spladekit.cli import experiments  # noqa: F401

__all__ = ["app", "main"]
