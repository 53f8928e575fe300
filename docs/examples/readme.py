"""Run README.md's Python block with its model and collection replaced, checking every output it shows.

    python docs/examples/readme.py MODEL COLLECTION    # e.g. a splade-tiny-msmarco folder and a SciFact folder

The block's statements run in order; a statement followed by a ``# value`` comment line is an expression whose
``repr`` must be that value. Exits 1 naming the first output that differs (``tests/test_docs.py`` runs it).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
MODEL_ID, COLLECTION_ID = "naver/splade-v3", "beir/scifact"


def python_block(text: str) -> str:
    """The README's first ```python block."""
    found = re.search(r"```python\n(.*?)```", text, re.S)
    if not found:
        raise SystemExit("README.md has no python block")
    return found.group(1)


def steps(code: str) -> list[tuple[str, str | None]]:
    """(statement source, the output shown after it or None), in order."""
    lines = code.splitlines()
    tree = ast.parse(code)
    result = []
    for node in tree.body:
        source = ast.get_source_segment(code, node) or ""
        after = lines[node.end_lineno] if node.end_lineno is not None and node.end_lineno < len(lines) else ""
        shown = after.strip()[2:] if after.strip().startswith("# ") and isinstance(node, ast.Expr) else None
        result.append((source, shown))
    return result


def main(model: str, collection: str) -> int:
    code = python_block(README.read_text())
    if MODEL_ID not in code or COLLECTION_ID not in code:
        print(f"README.md's python block no longer names {MODEL_ID} and {COLLECTION_ID}", file=sys.stderr)
        return 1
    code = code.replace(MODEL_ID, model).replace(COLLECTION_ID, collection)
    namespace: dict = {}
    for source, shown in steps(code):
        if shown is None:
            exec(compile(source, "README.md", "exec"), namespace)
            continue
        value = repr(eval(compile(source, "README.md", "eval"), namespace))
        if value != shown:
            print(f"README.md shows {shown} for `{source}`, the code gives {value}", file=sys.stderr)
            return 1
        print(f"{source} -> {value}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
