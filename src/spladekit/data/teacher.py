"""Teacher scores for distillation: ``(query_id, doc_id, score)`` records, read lazily.

Two layouts are read (plain or ``.gz``), strictly, with ``file:line`` errors:

* ``jsonl``: one ``{"qid": …, "pid": …, "score": …}`` object per line (ids may be strings or integers);
* ``ce_scores``: the sentence-transformers MS MARCO cross-encoder scores
  (``cross-encoder-ms-marco-MiniLM-L-6-v2-scores``), one JSON object ``{qid: {pid: score}}``. The
  original is distributed as a pickle, which spladekit never loads (a pickle can run arbitrary code);
  convert it once with ``python -c "import gzip,json,pickle,sys; json.dump(pickle.load(gzip.open(sys.argv[1])),
  open(sys.argv[2],'w'))" scores.pkl.gz scores.json`` if you trust the file.

A (qid, pid) pair given twice is an error found where the scores are matched to the training groups
(:mod:`spladekit.data.training_store`), which keeps none of these records in Python objects.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from spladekit.common.errors import InputError
from spladekit.common.lines import check_id, json_records, numbered_lines

TeacherRecord = tuple[str, str, float, int | None]  # (qid, pid, score, line)


def _score(value: object, path: Path, number: int | None, what: str = "score") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{what} must be a finite number, got {value!r}", path, number)
    return float(value)


def iter_teacher_jsonl(path: str | Path) -> Iterator[TeacherRecord]:
    """``{"qid", "pid", "score"}`` lines, one at a time."""
    path = Path(path)
    count = 0
    for number, record in json_records(numbered_lines(path), path):
        if not isinstance(record, dict) or not {"qid", "pid", "score"} <= record.keys():
            raise InputError('expected an object with "qid", "pid" and "score"', path, number)
        qid, pid = check_id(record["qid"], "qid", path, number), check_id(record["pid"], "pid", path, number)
        count += 1
        yield qid, pid, _score(record["score"], path, number), number
    if not count:
        raise InputError("no teacher scores in file", path)


def iter_ce_scores(path: str | Path) -> Iterator[TeacherRecord]:
    """One JSON object ``{qid: {pid: score}}`` (the sentence-transformers cross-encoder scores); the object is
    parsed whole (JSON has no streaming form of it), its records are yielded one at a time."""
    path = Path(path)
    text = "".join(line for _, line in numbered_lines(path))
    try:
        nested = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON ({error.msg})", path, error.lineno) from None
    del text
    if not isinstance(nested, dict):
        raise InputError("expected one JSON object {qid: {pid: score}}", path)
    count = 0
    for qid, by_doc in nested.items():
        if not isinstance(by_doc, dict):
            raise InputError(f"qid {qid!r}: expected an object {{pid: score}}", path)
        for pid, score in by_doc.items():
            count += 1
            yield str(qid), str(pid), _score(score, path, None, f"qid {qid!r}, pid {pid!r}: score"), None
    if not count:
        raise InputError("no teacher scores in file", path)


READERS = {"jsonl": iter_teacher_jsonl, "ce_scores": iter_ce_scores}
