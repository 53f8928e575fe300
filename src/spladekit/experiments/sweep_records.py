"""The files of a sweep folder and how they are read back: ``plan.json``, each run's ``run.json`` and
``evaluation.json``, each backbone's initial head report (what :mod:`spladekit.experiments.report` reads)."""

from __future__ import annotations

import json
from pathlib import Path

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import InputError
from spladekit.common.lines import expect, read_json
from spladekit.evaluation.result import EvaluationResult

RUN_FILE = "run.json"
BASELINES_DIR = "baselines"
EVALUATION_FILE = "evaluation.json"
PLAN_FILE = "plan.json"


# run.json: the keys a report and a resumed sweep read, with their JSON types (the first five are required).
RUN_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "run": str,
    "backbone": str,
    "k": (float, str),
    "mode": str,
    "status": str,
    "backbone_id": (str, type(None)),
    "inflate": (float, type(None)),
    "inflate_mode": (str, type(None)),
    "set": (list, type(None)),
    "initial_head_norm": (float, type(None)),
    "auto_k": (float, type(None)),
    "initial_median_pair_score": (float, type(None)),
    "seconds": (float, type(None)),
    "seed": (int, type(None)),
    "baseline": (str, type(None)),
}


def write_json(path: Path, payload: dict) -> None:
    with atomic_file(path) as stream:
        stream.write(json.dumps(payload, indent=2, default=str) + "\n")


HEAD_REPORT_NUMBERS = ("frobenius_norm", "recommended_k", "median_pair_score")


def read_run_record(path: Path) -> dict:
    """A ``run.json``: a JSON object with ``run``, ``backbone``, ``k`` (a number or ``"auto"``), ``mode`` and
    ``status``, every known value of its type; anything else is an :class:`InputError` naming the file."""
    record = read_json(path, dict)
    for key, kinds in RUN_RECORD_TYPES.items():
        if key in record:
            expect(record[key], kinds, repr(key), path)
        elif key in ("run", "backbone", "k", "mode", "status"):
            raise InputError(f"no {key!r} in the run record", path)
    if isinstance(record["k"], str) and record["k"] != "auto":
        raise InputError(f"'k' must be a number or 'auto', got {record['k']!r}", path)
    for item in record.get("set") or []:
        expect(item, str, "a 'set' entry", path)
    return record


def read_head_report(path: Path) -> dict:
    """A ``backbones/<name>.diagnose.json`` written by an earlier attempt, with the numbers runs copy."""
    report = read_json(path, dict)
    for key in HEAD_REPORT_NUMBERS:
        expect(report.get(key), float, repr(key), path)
    return report


def read_evaluation(run_dir: Path) -> dict[str, EvaluationResult]:
    """A run's ``evaluation.json`` ({name: result}); empty when the run has not been evaluated."""
    path = run_dir / EVALUATION_FILE
    if not path.is_file():
        return {}
    payload = read_json(path, dict)
    return {name: EvaluationResult.from_dict(result, path, f"{name}.") for name, result in payload.items()}
