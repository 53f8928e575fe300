"""Generated documentation stays in step with the code."""

from __future__ import annotations

import contextlib
import io
import re
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


@pytest.mark.slow
@pytest.mark.realdata
def test_the_readme_python_block_gives_the_outputs_it_shows(request, tmp_path):
    """docs/examples/readme.py runs README.md's block on local copies (the hub ids replaced) and compares every
    output shown; the corpus cache is the real-data tests' (one encoding of SciFact)."""
    import os
    import subprocess
    import sys

    from conftest import shared_path

    model, scifact = shared_path("models", "splade-tiny-msmarco"), shared_path("data", "scifact")
    cache = request.config.cache.mkdir("spladekit-vectors")
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "readme.py"), str(model), str(scifact)],
        capture_output=True,
        text=True,
        env={**os.environ, "SPLADEKIT_CACHE": str(cache), "HF_HUB_OFFLINE": "1"},
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count(" -> ") == 5  # every output the README shows was compared


def markdown_links(page: Path) -> list[tuple[str, int]]:
    """(target, line) of every relative link ``[text](target)`` outside code blocks."""
    links, fenced = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            links += [(target, number) for target in re.findall(r"\]\(([^)\s]+)\)", line)]
    return [(target, number) for target, number in links if not re.match(r"[a-z]+:", target)]


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_in_the_docs_resolves():
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target, line in markdown_links(page):
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}:{line}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}:{line}: {target} (no heading #{anchor})")
    assert len(pages) > 10 and not broken, "\n".join(broken)


MEASURED = re.compile(r"\d(?:\.\d+)?\s*[x×](?![\w-])|\bthis (?:CPU|machine)\b|\bH200\b|\d+(?:\.\d+)? ?%")


def test_help_texts_carry_no_measurements():
    """Speeds and "this machine" belong in docs/benchmarks.md with their command and hardware; a --help text or a
    config key's help stays true on every machine (it may link to the page)."""
    import typer

    import spladekit.cli
    from spladekit.common.schema import declarations
    from spladekit.training.config import TrainConfig

    command = typer.main.get_command(spladekit.cli.app)
    assert command.commands  # typer's own group class (not click's)
    commands = [(name, sub) for name, sub in command.commands.items() if not hasattr(sub, "commands")]
    commands += [  # a group's sub-commands (export: one per format)
        (f"{name} {leaf}", inner)
        for name, sub in command.commands.items()
        for leaf, inner in getattr(sub, "commands", {}).items()
    ]
    helps = [
        (f"{name} {param.opts[0]}", getattr(param, "help", None) or "")
        for name, sub in commands
        for param in sub.params
    ]
    helps += [(declaration.key, declaration.help) for declaration in declarations(TrainConfig)]
    assert len(helps) > 200
    found = [
        f"{where}: {MEASURED.search(text)[0]!r} in {text[:80]!r}" for where, text in helps if MEASURED.search(text)
    ]
    assert not found, "\n".join(found)
