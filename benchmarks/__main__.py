"""python -m benchmarks: run the summary rows of docs/benchmarks.md (benchmarks/registry.py) on this machine, record
the machine with the results, and rewrite the summary table from every machine's recorded results.

Why one entry point: the summary table was filled by hand from runs on different machines. Here every row is rerun
by the same command, each results file belongs to one machine (``DIR/<hardware label>.json``, its rows merged run
after run) and the table gives each row's hardware label, date and the command that reproduces it.

    python -m benchmarks --list                              # the rows
    python -m benchmarks --dry-run                           # the commands, nothing run
    python -m benchmarks --rows exact-search-100k            # one row, results in docs/results/bench/
    python -m benchmarks --quick                             # smoke sizes: results marked quick, never in the docs
    python -m benchmarks --update-docs                       # this machine's rows, then the table (make bench)
    python -m benchmarks --update-docs --no-run              # the table from the results already recorded

By default the rows of this machine's kind run: the GPU rows where torch sees CUDA, the CPU rows elsewhere (name
CPU rows with ``--rows`` to run them on a GPU machine too). Each row runs as a subprocess with a timeout; a failing
row is reported with the end of its stderr and the others go on; the exit status is 1 when any row failed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.registry import ROWS, Row

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DEFAULT_OUTPUT = ROOT / "docs" / "results" / "bench"
DEFAULT_DOCS = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench:summary:start -->", "<!-- bench:summary:end -->"
HEADER = ("| workload | spladekit | anchor | ratio | hardware | date | script |", "|---|---|---|---:|---|---|---|")
GENERATED = "python -m benchmarks --rows "  # in the script cell of every generated row, in no hand-made one
NOT_YET = "Not yet measured on any machine:"
BY_HAND = "Measured by hand (not yet in the registry)"
NOT_A_RATIO = "Not a ratio (kept out of the tables):"
P_VALUE = re.compile(r"\bp\s*[=<]")
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
ISA_LABELS = (("amx_tile", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"), ("avx2", "AVX2"))
STDERR_TAIL = 2000


def say(message: str) -> None:
    """Progress goes to stderr: stdout carries only what was asked for (--list, --dry-run)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ hardware
def cpu_model_and_flags() -> tuple[str, set[str]]:
    """The first processor's ``model name`` and ``flags`` in /proc/cpuinfo; elsewhere platform's name, no flags."""
    model, flags = "", set[str]()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "model name" and not model:
            model = value
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model or platform.processor() or "unknown CPU", flags


def usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's share), not the host's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def ram_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, ValueError, OSError):
        return None


def cuda_devices() -> list[str]:
    """The names of the GPUs torch can use (imported here only: --list needs no torch)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]


def git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def short_cpu(model: str) -> str:
    """``AMD EPYC 9654 96-Core Processor`` → ``AMD EPYC 9654``; ``Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz`` →
    ``Intel Xeon Gold 6338``: the core count and clock are given apart (the cores usable here, not the chip's)."""
    text = re.sub(r"\((?:R|TM)\)", "", model, flags=re.IGNORECASE)
    text = re.sub(r"@.*$", "", text)
    text = re.sub(r"\b(?:\d+-Core|CPU|Processor)\b", "", text, flags=re.IGNORECASE)
    return " ".join(text.split()) or "unknown CPU"


def hardware_label(cpu: str, cores: int, flags: set[str], gpus: list[str]) -> str:
    """A short name for the machine, e.g. ``AMD EPYC 2-core AVX512-BF16``: the widest vector unit is what moves
    the CPU ratios most (the bf16 screen pays only with native bf16), the core count the next."""
    isa = next((name for flag, name in ISA_LABELS if flag in flags), "")
    label = " ".join(part for part in (short_cpu(cpu), f"{cores}-core", isa) if part)
    if gpus:
        label += f", {len(gpus)}× {gpus[0]}" if len(gpus) > 1 else f", {gpus[0]}"
    return label


def slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "unknown"


def detect_hardware(gpus: list[str]) -> dict[str, Any]:
    """This machine, once per run: what the label is made of, and the software every row ran with."""
    import torch

    cpu, flags = cpu_model_and_flags()
    cores = usable_cores()
    return {
        "label": hardware_label(cpu, cores, flags, gpus),
        "cpu": cpu,
        "cores": cores,
        "flags": [flag for flag in FLAGS if flag in flags],
        "ram_gib": ram_gib(),
        "gpu": gpus[0] if gpus else None,
        "gpu_count": len(gpus),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "commit": git_commit(),
    }


# ------------------------------------------------------------------------------------------------ running
def shown_path(path: Path) -> str:
    """Relative to the repository (the commands run there) so no recorded command names this machine's home."""
    return os.path.relpath(path, ROOT) if path.is_absolute() else str(path)


def scratch_dir(row: Row) -> Path:
    """A fixed folder per row, so that --dry-run prints the exact command; emptied before the run, removed after."""
    return Path(tempfile.gettempdir()) / f"spladekit-bench-{row.name}"


def command(row: Row, quick: bool) -> list[str]:
    """The row's command line as run from the repository root, recorded with ``python`` for the interpreter: the
    run uses this one (``sys.executable``), whose path names a machine's environment, not the measurement."""
    scratch = scratch_dir(row)
    values = {"{output}": str(scratch / "output.json"), "{scratch}": str(scratch), "{shared}": shown_path(SHARED)}
    arguments = []
    for argument in row.arguments(quick):
        for placeholder, value in values.items():
            argument = argument.replace(placeholder, value)
        arguments.append(argument)
    return ["python", f"benchmarks/{row.script}", *arguments]


def portable(value: Any) -> Any:
    """``value`` with this checkout's and ../shared's absolute paths written relative to the repository root, where
    every row runs: a committed result names no machine's folders (scripts record their arguments as given)."""
    if isinstance(value, str):
        return value.replace(str(SHARED), shown_path(SHARED)).replace(f"{ROOT}{os.sep}", "")
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item) for item in value]
    return value


def read_raw(row: Row, stdout: str) -> dict[str, Any]:
    """The script's JSON file, or the JSON objects it printed one per line (scripts without an output option)."""
    if row.writes_output:
        return json.loads((scratch_dir(row) / "output.json").read_text())
    found = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    if not found:
        raise ValueError("it printed no JSON line")
    return {"stdout_json": found}


def tail(text: str) -> str:
    return text[-STDERR_TAIL:].strip()


def run_row(row: Row, quick: bool, timeout: float, hardware: dict[str, Any]) -> dict[str, Any]:
    """Run one row in its own process group (a timeout ends its workers too) and parse what it wrote."""
    scratch = scratch_dir(row)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    line = command(row, quick)
    record: dict[str, Any] = {
        "quick": quick,
        "date": datetime.date.today().isoformat(),
        "commit": hardware["commit"],
        "torch": hardware["torch"],
        "command": shlex.join(line),
    }
    started = time.perf_counter()
    try:
        stdout, stderr, error = run_command(line, timeout)
        record["wall_s"] = round(time.perf_counter() - started, 1)
        if error is None:
            try:
                raw = portable(read_raw(row, stdout))
                cells = row.parse(raw)
            except Exception as problem:  # a parser's bug is that row's failure, not the whole run's
                error = one_line(f"its JSON could not be read: {type(problem).__name__}: {problem}")
            else:
                return record | {"status": "ok", "raw": raw, "parsed": cells._asdict()}
        return record | {"status": "failed", "error": error, "stderr_tail": tail(stderr)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_command(line: list[str], timeout: float) -> tuple[str, str, str | None]:
    """stdout, stderr and why it failed (None when it did not). The command runs in a session of its own, and on a
    timeout or an interruption here (Ctrl-C reaches only this process then) the whole session is ended: a script's
    worker processes would otherwise go on measuring, and loading the machine, after it."""
    process = subprocess.Popen(
        [sys.executable, *line[1:]],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end_group(process.pid)
        stdout, stderr = process.communicate()
        return stdout, stderr, f"timed out after {timeout:g} s"
    except BaseException:
        end_group(process.pid)
        raise
    return stdout, stderr, f"exit status {process.returncode}" if process.returncode else None


def end_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def one_line(text: str) -> str:
    return " ".join(text.split())


def skip_reason(row: Row, quick: bool, gpus: list[str]) -> str | None:
    if row.hardware_kind == "gpu" and not gpus:
        return "a GPU row and torch.cuda.is_available() is false here"
    if quick and not row.quick:
        return "no quick form (its script cannot be made tiny)"
    return None


def results_path(output: Path, label: str, quick: bool) -> Path:
    return output / f"{slug(label)}{'-quick' if quick else ''}.json"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write-then-rename: an interrupted run never leaves half a results file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    os.replace(partial, path)


def save(output: Path, hardware: dict[str, Any], records: dict[str, dict[str, Any]], quick: bool) -> Path:
    """Merge this run into the machine's results file: a row measured now replaces its earlier result; failed and
    skipped rows keep their earlier result and are listed under ``last_run`` only."""
    path = results_path(output, hardware["label"], quick)
    earlier = read_earlier(path)
    rows = earlier.get("rows", {}) | {name: record for name, record in records.items() if record["status"] == "ok"}
    last_run = {
        "date": datetime.date.today().isoformat(),
        "rows": {
            name: {key: value for key, value in record.items() if key not in ("raw", "parsed")}
            for name, record in records.items()
        },
    }
    data = {"label": hardware["label"], "quick": quick, "hardware": hardware, "rows": rows, "last_run": last_run}
    write_json(path, data)
    return path


def read_earlier(path: Path) -> dict[str, Any]:
    """The machine's results so far; a file that is not JSON is set aside (``….unreadable``), not overwritten, so
    no measurement is lost to a damaged file."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        aside = path.with_name(f"{path.name}.unreadable")
        os.replace(path, aside)
        say(f"{path}: not JSON ({one_line(str(error))}); moved to {aside}, a new file started")
        return {}
    return data if isinstance(data, dict) else {}


def run_rows(rows: list[Row], args: argparse.Namespace, gpus: list[str]) -> bool:
    """Every row in turn; True when none failed. The results file is written even when some did."""
    hardware = detect_hardware(gpus)
    say(f"hardware: {hardware['label']} (torch {hardware['torch']}, commit {hardware['commit'][:12]})")
    records: dict[str, dict[str, Any]] = {}
    for row in rows:
        reason = skip_reason(row, args.quick, gpus)
        if reason is not None:
            say(f"{row.name}: skipped, {reason}")
            records[row.name] = {"status": "skipped", "reason": reason}
            continue
        timeout = args.timeout or row.timeout_s
        say(f"{row.name}: start (timeout {timeout:g} s): {shlex.join(command(row, args.quick))}")
        record = run_row(row, args.quick, timeout, hardware)
        records[row.name] = record
        if record["status"] == "ok":
            say(f"{row.name}: done in {record['wall_s']} s: {record['parsed']['ratio_text']}")
        else:
            say(f"{row.name}: FAILED in {record['wall_s']} s: {record['error']}")
            if record["stderr_tail"]:
                print(record["stderr_tail"], file=sys.stderr, flush=True)
    path = save(args.output, hardware, records, args.quick)
    failed = [name for name, record in records.items() if record["status"] == "failed"]
    say(f"results: {path}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return not failed


# ------------------------------------------------------------------------------------------------ the docs
def split_cells(line: str) -> list[str]:
    """A Markdown table line's cells (``\\|`` inside a cell is not a separator)."""
    inner = line.strip().removeprefix("|")
    if inner.endswith("|") and not inner.endswith("\\|"):
        inner = inner[:-1]
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", inner)]


def load_results(output: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{row name: {hardware label: result}} from every results file in ``output``; quick results are left out, and
    of two results of one row on one label the later date counts."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted(output.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            say(f"{path}: not read ({error}); left out of the table")
            continue
        if not isinstance(data, dict) or data.get("quick") or not isinstance(data.get("rows"), dict):
            continue  # quick results, or not a results file of this runner
        label = str(data.get("label") or path.stem)
        for name, record in data["rows"].items():
            if not isinstance(record, dict) or record.get("status") != "ok" or record.get("quick"):
                continue
            earlier = found.setdefault(name, {}).get(label)
            if earlier is None or str(record.get("date")) >= str(earlier.get("date")):
                found[name][label] = record
    return found


@dataclass
class HandMade:
    """What the marked region holds besides the generated rows: the hand-made rows (verbatim lines) and the notes
    under the tables (paragraphs, verbatim)."""

    rows: list[str]
    notes: list[str]


def as_sentence(cells: list[str]) -> str:
    """A hand-made row whose "ratio" is a p-value, as a sentence: the ratio column holds ratios only."""
    workload, ours, anchor, test, hardware, date, script = cells
    return f"{NOT_A_RATIO} {workload}: {ours} against {anchor}, {test} ({hardware}, {date}, {script})."


def read_region(lines: list[str]) -> HandMade:
    """Split the current region: generated rows and lines are dropped (they are regenerated), hand-made rows kept
    verbatim except p-value rows (turned into notes), other text kept as notes."""
    rows: list[str] = []
    notes: list[str] = []
    paragraph: list[str] = []

    def end_paragraph() -> None:
        if paragraph:
            notes.append("\n".join(paragraph))
            paragraph.clear()

    for line in lines:
        text = line.strip()
        if text.startswith("|"):
            end_paragraph()
            cells = split_cells(text)
            if cells[0] == "workload" or set(text) <= set("|-: ") or GENERATED in cells[-1]:
                continue
            if len(cells) == 7 and P_VALUE.search(cells[3]):
                notes.append(as_sentence(cells))
            else:
                rows.append(line.rstrip())
        elif not text:
            end_paragraph()
        elif not paragraph and text.startswith((NOT_YET, BY_HAND)):
            continue
        else:
            paragraph.append(line.rstrip())
    end_paragraph()
    return HandMade(rows, notes)


def escape(cell: str) -> str:
    return re.sub(r"(?<!\\)\|", r"\\|", cell)


def table_line(row: Row, label: str, record: dict[str, Any]) -> str:
    parsed = record["parsed"]
    values = [
        row.workload,
        parsed["spladekit"],
        parsed["anchor"],
        parsed["ratio_text"],
        label,
        str(record.get("date", "—")),
    ]
    script = f"`{GENERATED}{row.name}`" + (f" ({row.section})" if row.section else "")
    return "| " + " | ".join([*map(escape, values), script]) + " |"


def superseded(line: str, measured: list[Row]) -> bool:
    workload = split_cells(line)[0]
    return any(workload.startswith(prefix) for row in measured for prefix in row.replaces)


def render_region(results: dict[str, dict[str, dict[str, Any]]], hand: HandMade) -> str:
    """The region between the markers: the generated table (one line per row and hardware label, in the registry's
    order), the rows never measured, the hand-made rows no measured row supersedes, then the notes."""
    measured = [row for row in ROWS if results.get(row.name)]
    lines = [START, ""]
    if measured:
        lines += HEADER
        lines += [
            table_line(row, label, results[row.name][label]) for row in measured for label in sorted(results[row.name])
        ]
        lines.append("")
    missing = [row.name for row in ROWS if not results.get(row.name)]
    if missing:
        lines += [f"{NOT_YET} {', '.join(f'`{name}`' for name in missing)}.", ""]
    kept = [line for line in hand.rows if not superseded(line, measured)]
    if kept:
        lines += [f"{BY_HAND}, copied as they were:", "", *HEADER, *kept, ""]
    for note in hand.notes:
        lines += [note, ""]
    return "\n".join([*lines, END])


def rewrite_docs(docs: Path, output: Path) -> None:
    """Replace the marked region of ``docs`` and nothing else."""
    text = docs.read_text()
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"python -m benchmarks: {docs} has no {START} … {END} region to rewrite")
    hand = read_region(text[start + len(START) : end].splitlines())
    results = load_results(output)
    updated = text[:start] + render_region(results, hand) + text[end + len(END) :]
    partial = docs.with_name(f".{docs.name}.partial")
    partial.write_text(updated)
    os.replace(partial, docs)
    say(f"{docs}: summary rewritten from {output} ({sum(map(len, results.values()))} results)")


# ------------------------------------------------------------------------------------------------ command line
def select_rows(names: str | None, gpus: list[str]) -> list[Row]:
    """The named rows, or those of this machine's kind (GPU rows where CUDA is, CPU rows elsewhere)."""
    if names is None:
        kind = "gpu" if gpus else "cpu"
        return [row for row in ROWS if row.hardware_kind == kind]
    by_name = {row.name: row for row in ROWS}
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in by_name]
    if unknown or not wanted:
        what = f"no row named {unknown[0]!r}" if unknown else "--rows names no row"
        raise SystemExit(f"python -m benchmarks: {what}; the rows: {', '.join(by_name)} (--list)")
    return [by_name[name] for name in wanted]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list", action="store_true", help="list the rows, one per line, and exit")
    parser.add_argument("--rows", metavar="NAME[,NAME]", help="these rows (default: every row of this machine's kind)")
    parser.add_argument("--quick", action="store_true", help="smoke sizes; results marked quick, never in the docs")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, one per row; run nothing")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    parser.add_argument("--update-docs", action="store_true", help="then rewrite the summary table from --output")
    parser.add_argument("--no-run", action="store_true", help="with --update-docs: rewrite only, run no row")
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="the page to rewrite (default: %(default)s)")
    parser.add_argument("--timeout", type=float, help="seconds per row, instead of each row's own limit")
    args = parser.parse_args(argv)
    if args.quick and args.update_docs:
        parser.error("--quick results never rewrite the docs: drop --quick or --update-docs")
    if args.no_run and not args.update_docs:
        parser.error("--no-run goes with --update-docs (rewrite the table from the recorded results)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for row in ROWS:
            print(f"{row.name:<26} {row.hardware_kind}  {'quick' if row.quick else '-    '}  {row.workload}")
        return 0
    if args.no_run:
        rewrite_docs(args.docs, args.output)
        return 0
    gpus = cuda_devices()
    rows = select_rows(args.rows, gpus)
    if args.dry_run:
        for row in rows:
            if args.quick and not row.quick:
                say(f"{row.name}: would be skipped, no quick form")
                continue
            if row.hardware_kind == "gpu" and not gpus:
                say(f"{row.name}: would be skipped here, torch sees no CUDA (printed for a GPU machine)")
            print(shlex.join(command(row, args.quick)))
        return 0
    succeeded = run_rows(rows, args, gpus)
    if args.update_docs:
        rewrite_docs(args.docs, args.output)
    return 0 if succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
