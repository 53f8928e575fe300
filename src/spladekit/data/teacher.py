"""Teacher scores for distillation: ``{(query_id, doc_id): score}``.

Two layouts are read (plain or ``.gz``), strictly, with ``file:line`` errors:

* ``jsonl``: one ``{"qid": …, "pid": …, "score": …}`` object per line (ids may be strings or integers);
* ``ce_scores``: the sentence-transformers MS MARCO cross-encoder scores
  (``cross-encoder-ms-marco-MiniLM-L-6-v2-scores``), one JSON object ``{qid: {pid: score}}``. The
  original is distributed as a pickle, which spladekit never loads (a pickle can run arbitrary code);
  convert it once with ``python -c "import gzip,json,pickle,sys; json.dump(pickle.load(gzip.open(sys.argv[1])),
  open(sys.argv[2],'w'))" scores.pkl.gz scores.json`` if you trust the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from spladekit.common.errors import InputError
from spladekit.common.lines import check_id, json_records, numbered_lines

TeacherScores = dict[tuple[str, str], float]


def _score(value: object, path: Path, number: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"score must be a finite number, got {value!r}", path, number)
    return float(value)


def read_teacher_jsonl(path: str | Path) -> TeacherScores:
    """``{"qid", "pid", "score"}`` lines; a repeated (qid, pid) pair is an error."""
    path = Path(path)
    scores: TeacherScores = {}
    for number, record in json_records(numbered_lines(path), path):
        if not isinstance(record, dict) or not {"qid", "pid", "score"} <= record.keys():
            raise InputError('expected an object with "qid", "pid" and "score"', path, number)
        key = (check_id(record["qid"], "qid", path, number), check_id(record["pid"], "pid", path, number))
        if key in scores:
            raise InputError(f"duplicate teacher score for qid {key[0]!r}, pid {key[1]!r}", path, number)
        scores[key] = _score(record["score"], path, number)
    if not scores:
        raise InputError("no teacher scores in file", path)
    return scores


def read_ce_scores(path: str | Path) -> TeacherScores:
    """One JSON object ``{qid: {pid: score}}`` (the sentence-transformers cross-encoder scores)."""
    path = Path(path)
    text = "".join(line for _, line in numbered_lines(path))
    try:
        nested = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON ({error.msg})", path, error.lineno) from None
    if not isinstance(nested, dict):
        raise InputError("expected one JSON object {qid: {pid: score}}", path)
    scores: TeacherScores = {}
    for qid, by_doc in nested.items():
        if not isinstance(by_doc, dict):
            raise InputError(f"qid {qid!r}: expected an object {{pid: score}}", path)
        for pid, score in by_doc.items():
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise InputError(f"qid {qid!r}, pid {pid!r}: score must be a finite number, got {score!r}", path)
            scores[(str(qid), str(pid))] = float(score)
    if not scores:
        raise InputError("no teacher scores in file", path)
    return scores


READERS = {"jsonl": read_teacher_jsonl, "ce_scores": read_ce_scores}
