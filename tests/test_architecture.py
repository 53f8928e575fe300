"""docs/architecture.md's structural claims: imports go only down the layers (type-only and function-level
imports included), every module has its place in them, and the CLI's help loads no torch."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "spladekit"

# The layers, bottom first, and inside each package its modules bottom first: a module may import only
# modules listed before it (docs/architecture.md draws the same picture). A package's ``__init__`` sits
# above its own modules (it re-exports them); the ``spladekit`` package itself is the top.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "common",
        [
            "errors",
            "checksums",
            "version",
            "lines",
            "sources",
            "schema",
            "devices",
            "atomic",
            "scratch",
            "distributed",
            "sparse",
        ],
    ),
    (
        "data",
        [
            "trec",
            "jsonl",
            "triplets",
            "teacher",
            "samples",
            "collections",
            "stream",
            "suites",
            "training_store",
            "training",
        ],
    ),
    (
        "model",
        [
            "foreign",
            "backbone",
            "head",
            "metadata",
            "head_options",
            "folding",
            "bf16_screen",
            "ties",
            "pooling",
            "triton_head",
            "packing",
            "batches",
            "card",
            "encoder",
            "inference_free",
            "onnx",
            "loading",
            "diagnosis",
            "rescaling",
        ],
    ),
    ("vectors", ["shards", "artifact", "encoding"]),
    (
        "index",
        [
            "params",
            "store",
            "base",
            "engine",
            "exact",
            "seismic",
            "bmp",
            "pisa",
            "anserini",
            "qdrant",
            "milvus",
            "registry",
            "building",
        ],
    ),
    (
        "evaluation",
        ["run", "searching", "result", "bm25", "evaluate", "fidelity", "tuning", "cost", "baselines", "explain"],
    ),
    (
        "training",
        [
            "config",
            "losses",
            "regularizers",
            "monitors",
            "periodic_evaluation",
            "checkpoint",
            "setup",
            "step",
            "loop",
            "mining",
        ],
    ),
    ("export", ["feature_names", "search_engine", "ciff", "qdrant_collection", "sentence_transformers_folder"]),
    (
        "experiments",
        ["stats", "inflate", "sweep_config", "sweep_records", "sweep_cost", "sweep", "report", "quickstart"],
    ),
    ("serve", ["settings", "tei", "metrics", "security", "encoding", "search", "batching", "page", "app"]),
    (
        "cli",
        [
            "app",
            "options",
            "core",
            "retrieval",
            "train",
            "explain",
            "export",
            "experiments",
            "quickstart",
            "keys",
            "serve",
        ],
    ),
]


def ranks() -> dict[str, tuple[int, int]]:
    rank = {"spladekit": (len(LAYERS), 0), "spladekit.__main__": (len(LAYERS), 1)}
    for layer, (package, modules) in enumerate(LAYERS):
        rank[f"spladekit.{package}"] = (layer, len(modules))
        rank |= {f"spladekit.{package}.{module}": (layer, position) for position, module in enumerate(modules)}
    return rank


def _module_name(path: Path) -> str:
    return ".".join(("spladekit", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """module → the spladekit modules it imports anywhere in its file (under ``if TYPE_CHECKING:`` too)."""
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            # a package importing its own submodules (re-exports) is going down, not up
            graph[name] |= {t for t in targets if t in files and t != name and not t.startswith(name + ".")}
    return graph


def upward_imports(graph: dict[str, set[str]], rank: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if rank[target] >= rank[source]
    )


def test_the_checker_flags_an_import_that_goes_up():
    rank = {"low": (0, 0), "high": (1, 0), "peer": (1, 1)}
    assert upward_imports({"low": {"high"}, "high": {"low"}, "peer": {"high"}}, rank) == ["low -> high"]


def test_every_module_has_a_layer():
    assert sorted(set(import_graph()) - set(ranks())) == []
    assert sorted(set(ranks()) - set(import_graph())) == []  # no layer lists a module that is gone


def test_imports_only_go_down_the_layers():
    graph = import_graph()
    assert "spladekit.model.encoder" in graph["spladekit.model.diagnosis"]  # the graph is really built
    assert upward_imports(graph, ranks()) == []


def test_cli_help_imports_neither_torch_nor_transformers():
    code = (
        "import sys, runpy; sys.argv = ['spladekit', '--help']\n"
        "try:\n    runpy.run_module('spladekit', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout and done.stdout.strip().splitlines()[-1] == "[]"


def drawn_modules(page: Path) -> dict[str, list[str]]:
    """docs/architecture.md's picture: each package's modules, in the order drawn (notes in parentheses dropped)."""
    block = page.read_text().split("```", 2)[1]
    drawn: dict[str, list[str]] = {}
    package = None
    for line in block.splitlines():
        found = re.match(r"^ (\w+)/\s+(.*)$", line)
        if found:
            package, text = found.group(1), found.group(2)
        elif package is not None:
            text = line.replace("│", " ")
        else:
            continue
        text = re.sub(r"\([^)]*\)?", "", text)  # notes, even one cut at the end of a line
        for part in text.split("·"):
            name = part.strip().split(" ")[0] if part.strip() else ""
            if re.fullmatch(r"[a-z_0-9]+", name) and not re.match(r"^\s*\(", part):
                drawn.setdefault(package, []).append(name)
    return drawn


def test_the_architecture_page_draws_every_module_of_layers_in_order():
    drawn = drawn_modules(PACKAGE.parents[1] / "docs" / "architecture.md")
    for package, modules in LAYERS:
        assert drawn.get(package) == modules, f"docs/architecture.md, {package}/: {drawn.get(package)} != {modules}"


# Test folders that are not a package of src/spladekit: the benchmark suite's own tests, and the end-to-end runs on
# the shared collections that cross every package.
TEST_FOLDERS_BESIDE_PACKAGES = {"bench", "end_to_end", "fixtures"}


def test_the_tests_mirror_the_packages():
    """tests/<package>/test_*.py for src/spladekit/<package>/; only the repository-wide tests (API, layering, docs)
    sit in tests/ itself. A new test file in tests/ or in a folder no package has fails here."""
    tests = PACKAGE.parents[1] / "tests"
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    folders = {path.name for path in tests.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders - packages - TEST_FOLDERS_BESIDE_PACKAGES == set()
    at_top = {path.name for path in tests.glob("test_*.py")}
    assert at_top == {"test_api.py", "test_architecture.py", "test_docs.py"}
    for folder in folders & packages:
        assert list((tests / folder).glob("test_*.py")), f"tests/{folder}/ has no tests"
