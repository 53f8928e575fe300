"""python -m benchmarks (benchmarks/__main__.py and benchmarks/registry.py): every registered row's command is one its
script accepts, --list and --dry-run name every row, the docs rewrite changes only the marked summary region of a
copy of docs/benchmarks.md, and the cheapest row runs end to end at its quick size."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_docs import anchors, markdown_links

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ is a folder of scripts run as `python -m benchmarks` from the root
registry = importlib.import_module("benchmarks.registry")
runner = importlib.import_module("benchmarks.__main__")
ROWS = registry.ROWS
DOCS = ROOT / "docs" / "benchmarks.md"


def bench(*args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_rows_are_well_formed():
    names = [row.name for row in ROWS]
    assert len(names) == len(set(names)) and all(re.fullmatch(r"[a-z0-9-]+", name) for name in names)
    for row in ROWS:
        assert row.hardware_kind in ("cpu", "gpu") and (ROOT / "benchmarks" / row.script).is_file(), row.name
        placeholders = set(re.findall(r"\{(\w+)\}", " ".join(row.arguments(quick=True))))
        assert placeholders <= {"output", "scratch", "shared"}, (row.name, placeholders)


def test_every_row_names_options_its_script_has():
    """Each script's --help (all at once: each imports torch) names every option a row gives it, quick or not."""
    scripts = sorted({row.script for row in ROWS})
    running = {
        script: subprocess.Popen(
            [sys.executable, f"benchmarks/{script}", "--help"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script in scripts
    }
    helps = {script: process.communicate(timeout=300) for script, process in running.items()}
    for script, process in running.items():
        assert process.returncode == 0, f"{script} --help: {helps[script][1][-500:]}"
    for row in ROWS:
        for option, _ in registry.option_groups([*row.args, *(row.quick_args or ())]):
            pattern = rf"(?<![\w-]){re.escape(option)}(?![\w-])"
            assert re.search(pattern, helps[row.script][0]), f"{row.name}: {row.script} has no {option}"


def test_quick_arguments_replace_the_options_they_name():
    row = next(row for row in ROWS if row.name == "exact-search-100k")
    quick = row.arguments(quick=True)
    assert quick.count("--docs") == 1 and quick[quick.index("--docs") + 1] == "2000"
    assert "--extrapolate-to" in quick and row.arguments(quick=False) == list(row.args)


@pytest.mark.parametrize(
    "name, committed, expected",
    [
        (
            "real-inputs-bert-base",
            "real-inputs-checkpointing.json",
            "1.53–1.75× at 0.57–0.59× peak RSS / 1.68–1.87× at 0.68–0.70× peak RSS / 1.28–1.35× at 0.84–0.85× peak RSS",
        ),
        ("precision-bert-base", "precision-bench.json", "4.30× / 1.84× (1.49× against sentence-transformers"),
        ("gpu-encode-fp32", "gpu-h200/bench-256.json", "1.01× / 1.02× speed"),
        ("gpu-train-bf16", "gpu-h200/bench-256.json", "speed, "),
    ],
)
def test_parsers_read_the_committed_results_of_their_scripts(name, committed, expected):
    """The JSON these scripts wrote for docs/results gives the ratios the hand-made summary quoted."""
    row = next(row for row in ROWS if row.name == name)
    cells = row.parse(json.loads((ROOT / "docs" / "results" / committed).read_text()))
    assert expected in cells.ratio_text and cells.ratio is not None and cells.ratio > 0


def test_list_names_every_row():
    done = bench("--list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [row.name for row in ROWS]


def test_dry_run_prints_one_command_per_row():
    every = ",".join(row.name for row in ROWS)
    done = bench("--dry-run", "--rows", every)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(ROWS)
    for line, row in zip(lines, ROWS):
        assert f"benchmarks/{row.script}" in line and "{" not in line, line
    default = bench("--dry-run")
    kind = "gpu" if "gpu" in {row.hardware_kind for row in ROWS} and _cuda() else "cpu"
    assert len(default.stdout.splitlines()) == sum(row.hardware_kind == kind for row in ROWS)
    assert bench("--rows", "no-such-row", "--dry-run").returncode != 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _results(label: str, rows: dict[str, str]) -> dict:
    """A results file as the runner writes it, for ``rows`` (name → date), with made-up cells."""
    cells = {"spladekit": "2.0 queries/s", "anchor": "scipy: 1.0 queries/s", "ratio": 2.0, "ratio_text": "2.0×"}
    return {
        "label": label,
        "quick": False,
        "hardware": {"label": label},
        "rows": {name: {"status": "ok", "quick": False, "date": date, "parsed": cells} for name, date in rows.items()},
    }


def _outside(text: str) -> tuple[str, str]:
    return text[: text.index(runner.START)], text[text.index(runner.END) :]


HAND_MADE_ROWS = (  # the summary's hand-made rows as they were, shortened: workload … script
    ("`make demo` in a fresh clone: install, then the quickstart", "2 min 46 s wall", "—", "—", "2-core CPU")
    + ("2026-12-01", "`make demo`"),
    ("exact search, 100k synthetic documents, 1,000 queries, k = 10, 1 thread", "764.2 queries/s", "scipy: 76.2")
    + ("10.0×", "2-core CPU", "2026-11", "`benchmarks/search_bench.py` ([Search](#search))"),
    ("encode, ModernBERT-base (random init), same batch, fp32", "fused head", "sentence-transformers", "1.02× speed")
    + ("H200", "2026-11-30", "`benchmarks/gpu_bench.py`"),
    ("train step, BERT-base / ModernBERT-base, fp32", "fused head", "sentence-transformers", "1.04× / 1.06× speed")
    + ("H200", "2026-11-30", "`benchmarks/gpu_bench.py`"),
    ("SciFact nDCG@10, splade-tiny, bf16 autocast vs fp32 encoding", "0.6443", "0.6436 (fp32)", "p = 0.83", "H200")
    + ("2026-11-30", "`benchmarks/autocast_parity.py` ([GPU](#gpu))"),
)
HAND_MADE = "\n".join([*runner.HEADER, *(f"| {' | '.join(row)} |" for row in HAND_MADE_ROWS)]) + "\n"


def _page_before_any_run(path: Path) -> None:
    """docs/benchmarks.md with the summary region as it was before the first run: the hand-made table only."""
    page = DOCS.read_text()
    start, end = page.index(runner.START), page.index(runner.END)
    path.write_text(f"{page[:start]}{runner.START}\n\n{HAND_MADE}\n{page[end:]}")


def test_update_docs_rewrites_only_the_marked_region(tmp_path):
    docs, results = tmp_path / "benchmarks.md", tmp_path / "results"
    _page_before_any_run(docs)
    before = docs.read_text()
    results.mkdir()
    first, second = "AMD EPYC 2-core AVX512-BF16", "Intel Xeon Gold 6338 32-core AVX512, NVIDIA H200"
    (results / "one.json").write_text(json.dumps(_results(first, {"exact-search-100k": "2026-12-05"})))
    both = {"exact-search-100k": "2026-12-06", "gpu-encode-fp32": "2026-12-06"}
    (results / "two.json").write_text(json.dumps(_results(second, both)))
    quick = _results("quick machine", {"onnx-scifact": "2026-12-06"}) | {"quick": True}
    (results / "quick-quick.json").write_text(json.dumps(quick))  # quick results never reach the docs

    done = bench("--update-docs", "--no-run", "--output", results, "--docs", docs)
    assert done.returncode == 0, done.stderr
    after = docs.read_text()
    assert _outside(after) == _outside(before)
    region = after[after.index(runner.START) : after.index(runner.END)]
    generated = [line for line in region.splitlines() if "`python -m benchmarks --rows " in line]
    assert [line.split(" | ")[4] for line in generated] == [first, second, second]
    assert all(" | 2.0× | " in line for line in generated)
    measured_nowhere = [row.name for row in ROWS if row.name not in both]
    not_yet = next(line for line in region.splitlines() if line.startswith(runner.NOT_YET))
    assert all(f"`{name}`" in not_yet for name in measured_nowhere) and "`exact-search-100k`" not in not_yet
    # hand-made rows: those the measured rows supersede are gone, the others kept verbatim under the generated table
    hand = region[region.index(runner.BY_HAND) :]
    assert "| `make demo` in a fresh clone" in hand and "| train step, BERT-base / ModernBERT-base, fp32 |" in hand
    assert "764.2 queries/s" not in region and "| encode, ModernBERT-base (random init), same batch" not in region
    kept = [line for line in before.splitlines() if line.startswith("| `make demo`")]
    assert kept and kept[0] in hand.splitlines()
    # a p-value is not a ratio: the row becomes a sentence under the tables
    assert "p = 0.83 |" not in region and f"{runner.NOT_A_RATIO} SciFact nDCG@10" in region
    # every link of the page still reaches a heading of it
    headings = anchors(docs)
    broken = [target for target, _ in markdown_links(docs) if target.startswith("#") and target[1:] not in headings]
    assert not broken
    # a second rewrite from the same results changes nothing
    assert bench("--update-docs", "--no-run", "--output", results, "--docs", docs).returncode == 0
    assert docs.read_text() == after


def test_quick_results_never_rewrite_the_docs():
    done = bench("--quick", "--update-docs")
    assert done.returncode == 2 and "--quick results never rewrite the docs" in done.stderr


def test_the_cheapest_row_runs_end_to_end(tmp_path):
    done = bench("--rows", "exact-search-100k", "--quick", "--output", tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"exact-search-100k: start .*\n.*exact-search-100k: done in", done.stderr)
    (written,) = tmp_path.glob("*-quick.json")
    data = json.loads(written.read_text())
    hardware = data["hardware"]
    assert data["quick"] is True and written.name == f"{runner.slug(hardware['label'])}-quick.json"
    assert {"cpu", "cores", "flags", "ram_gib", "gpu", "torch", "commit", "label"} <= hardware.keys()
    row = data["rows"]["exact-search-100k"]
    assert row["quick"] and row["parsed"]["ratio"] > 0 and row["wall_s"] >= 0
    assert row["raw"]["rows"][0][0]["method"] == "exact" and "--docs 2000" in row["command"]


def test_a_failing_row_is_reported_and_the_exit_status_says_so(tmp_path):
    done = bench("--rows", "exact-search-100k", "--quick", "--output", tmp_path, "--timeout", "0.01")
    assert done.returncode == 1
    assert "exact-search-100k: FAILED" in done.stderr and "timed out after 0.01 s" in done.stderr
    (written,) = tmp_path.glob("*-quick.json")
    data = json.loads(written.read_text())
    assert data["rows"] == {} and data["last_run"]["rows"]["exact-search-100k"]["status"] == "failed"


def test_recorded_results_name_no_machine_folders():
    raw = {
        "settings": {"model": f"{runner.SHARED}/models/m", "paths": [f"{ROOT}/docs/x.json", "/tmp/y"]},
        "count": 3,
    }
    assert runner.portable(raw) == {
        "settings": {"model": "../shared/models/m", "paths": ["docs/x.json", "/tmp/y"]},
        "count": 3,
    }
