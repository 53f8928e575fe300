"""docs/architecture.md's structural claims: no import cycles, and the CLI's help loads no torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "spladekit"


def _module_name(path: Path) -> str:
    return ".".join(("spladekit", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def _runtime_imports(tree: ast.Module) -> list[ast.AST]:
    """Every import statement, function-level ones included, except those under ``if TYPE_CHECKING:``."""
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for node in ast.walk(block)}
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            and id(node) not in typing_only]


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                targets = [alias.name for alias in getattr(node, "names", [])]
            # a package importing its own submodules (re-exports) is not a cycle
            graph[name] |= {t for t in targets if t in files and t != name and not t.startswith(name + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_even_through_function_level_imports():
    graph = import_graph()
    assert "spladekit.encoder" in graph["spladekit.diagnosis"]  # the graph is really built
    assert cycles(graph) == []


def test_cli_help_imports_neither_torch_nor_transformers():
    code = ("import sys, runpy; sys.argv = ['spladekit', '--help']\n"
            "try:\n    runpy.run_module('spladekit', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout and done.stdout.strip().splitlines()[-1] == "[]"
