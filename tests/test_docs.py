"""Generated documentation stays in step with the code."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_api_reference_is_up_to_date():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(ROOT / "docs" / "make_api.py"), run_name="__main__")
    assert (ROOT / "docs" / "api.md").read_text() == out.getvalue(), (
        "docs/api.md is out of date: python docs/make_api.py > docs/api.md"
    )
    assert "## `SparseEncoder` (class" in out.getvalue() and "## `train(" in out.getvalue()


def test_the_configuration_reference_is_up_to_date():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(ROOT / "docs" / "make_config.py"), run_name="__main__")
    assert (ROOT / "docs" / "configuration.md").read_text() == out.getvalue(), (
        "docs/configuration.md is out of date: python docs/make_config.py > docs/configuration.md"
    )
    assert "| `optimization.lr` | a finite number > 0 | `2e-05` |" in out.getvalue()
