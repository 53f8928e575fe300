"""Generated documentation stays in step with the code."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "script, page, expected",
    [
        ("make_api.py", "api.md", ["## `SparseEncoder` (class", "## `train("]),
        ("make_config.py", "configuration.md", ["| `optimization.lr` | a finite number > 0 | `2e-05` |"]),
    ],
)
def test_a_generated_page_is_up_to_date(script, page, expected):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(ROOT / "docs" / script), run_name="__main__")
    assert (ROOT / "docs" / page).read_text() == out.getvalue(), (
        f"docs/{page} is out of date: python docs/{script} > docs/{page}"
    )
    assert all(text in out.getvalue() for text in expected)
