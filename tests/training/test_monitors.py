"""monitors.py: metrics.jsonl is read strictly, except for a last write cut short by a kill."""

from __future__ import annotations

import json
import re

import pytest

from spladekit.common.errors import InputError
from spladekit.training.monitors import MetricsLog, read_metrics

RECORDS = [{"step": step, "loss": 1.0 / step} for step in (1, 2, 3)]


def write_lines(tmp_path, lines: list[str], ending: str = "\n"):
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + ending, encoding="utf-8")


def test_a_final_line_cut_short_by_a_kill_is_ignored(tmp_path):
    write_lines(tmp_path, [json.dumps(record) for record in RECORDS] + ['{"step": 4, "lo'], ending="")
    assert read_metrics(tmp_path) == RECORDS
    write_lines(tmp_path, [json.dumps(record) for record in RECORDS], ending="")  # killed before the newline
    assert read_metrics(tmp_path) == RECORDS


@pytest.mark.parametrize("ending", ["\n", ""], ids=["complete", "cut-last"])
def test_a_bad_line_before_the_last_is_refused_with_its_number(tmp_path, ending):
    lines = [json.dumps(RECORDS[0]), '{"step": 2, "lo', json.dumps(RECORDS[2])]
    write_lines(tmp_path, lines, ending)
    with pytest.raises(InputError, match=r"metrics\.jsonl:2: not valid JSON"):
        read_metrics(tmp_path)


def test_a_bad_last_line_with_its_newline_was_written_whole_and_is_refused(tmp_path):
    write_lines(tmp_path, [json.dumps(RECORDS[0]), "not json"])
    with pytest.raises(InputError, match=r"metrics\.jsonl:2: not valid JSON"):
        read_metrics(tmp_path)


def test_resume_keeps_the_history_up_to_the_checkpoint(tmp_path):
    write_lines(tmp_path, [json.dumps(record) for record in RECORDS] + ['{"step": 4, "lo'], ending="")
    log = MetricsLog(tmp_path, resume_step=2)
    log.write({"step": 3, "loss": 0.25})
    log.close()
    assert read_metrics(tmp_path) == [*RECORDS[:2], {"step": 3, "loss": 0.25}]


@pytest.mark.parametrize(
    "line, message",
    [
        ("[1, 2]", "metrics.jsonl:2: a record must be a JSON object, got a JSON list"),
        ('{"loss": 0.5}', "metrics.jsonl:2: 'step' must be an integer, got null"),
        ('{"step": "2", "loss": 0.5}', "metrics.jsonl:2: 'step' must be an integer, got '2'"),
    ],
)
def test_records_of_the_wrong_shape_are_refused_with_their_line(tmp_path, line, message):
    write_lines(tmp_path, [json.dumps(RECORDS[0]), line])
    with pytest.raises(InputError, match=re.escape(message)):
        read_metrics(tmp_path)
    with pytest.raises(InputError, match=re.escape(message)):  # resuming reads the same way: no KeyError
        MetricsLog(tmp_path, resume_step=1)


def test_invalid_utf8_is_refused_without_a_traceback(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b'{"step": 1, "loss": 0.5}\n{"step": 2, "note": "\xff"}\n')
    with pytest.raises(InputError, match=r"metrics\.jsonl: not valid UTF-8"):
        read_metrics(tmp_path)
