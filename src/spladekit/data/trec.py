"""Relevance judgments (qrels) and runs as plain files, read strictly (``file:line`` errors).

Qrels: ``{query_id: {doc_id: relevance}}``. Two layouts are read:

* BEIR TSV: header ``query-id<TAB>corpus-id<TAB>score``, then one judgment per line;
* TREC: ``query_id iteration doc_id relevance`` (whitespace separated, no header).

Runs: ``{query_id: {doc_id: score}}``, TREC format ``query_id Q0 doc_id rank score tag``.
"""

from __future__ import annotations

from pathlib import Path

from spladekit.data.jsonl import _decoded_lines
from spladekit.errors import InputError
from spladekit.files import atomic_file

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]

BEIR_HEADER = ("query-id", "corpus-id", "score")


def _integer(text: str, what: str, path: Path, number: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{what} must be an integer, got {text!r}", path, number) from None


def read_qrels(path: str | Path) -> Qrels:
    """Read BEIR-TSV or TREC qrels (detected from the first line); a repeated judgment is an error."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    qrels: Qrels = {}
    layout = None
    for number, line in _decoded_lines(path):
        fields = line.rstrip("\r\n").split("\t") if layout == "beir" else line.split()
        if not line.strip():
            continue
        if layout is None:
            layout = "beir" if tuple(fields) == BEIR_HEADER else "trec"
            if layout == "beir":
                continue
        if layout == "beir" and len(fields) != 3:
            raise InputError(f"expected 3 tab-separated fields (query-id, corpus-id, score), got {len(fields)}",
                             path, number)
        if layout == "trec" and len(fields) != 4:
            raise InputError(f"expected 4 fields (query_id iteration doc_id relevance), got {len(fields)}",
                             path, number)
        query_id, doc_id, relevance = fields[0], fields[-2], _integer(fields[-1], "relevance", path, number)
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged:
            raise InputError(f"duplicate judgment for query {query_id!r}, document {doc_id!r}", path, number)
        judged[doc_id] = relevance
    if not qrels:
        raise InputError("no judgments in file", path)
    return qrels


def read_run(path: str | Path) -> Run:
    """Read a TREC run file (``query_id Q0 doc_id rank score tag``)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    run: Run = {}
    for number, line in _decoded_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6:
            raise InputError(f"expected 6 fields (query_id Q0 doc_id rank score tag), got {len(fields)}", path, number)
        try:
            score = float(fields[4])
        except ValueError:
            raise InputError(f"score must be a number, got {fields[4]!r}", path, number) from None
        _integer(fields[3], "rank", path, number)
        hits = run.setdefault(fields[0], {})
        if fields[2] in hits:
            raise InputError(f"document {fields[2]!r} listed twice for query {fields[0]!r}", path, number)
        hits[fields[2]] = score
    if not run:
        raise InputError("no results in run file", path)
    return run


def write_run(path: str | Path, run: Run, tag: str = "spladekit") -> Path:
    """Write a TREC run atomically; documents ranked by decreasing score (input order breaks ties)."""
    with atomic_file(path) as stream:
        for query_id, hits in run.items():
            ranked = sorted(hits.items(), key=lambda hit: -hit[1])
            for rank, (doc_id, score) in enumerate(ranked, start=1):
                stream.write(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}\n")
    return Path(path)
