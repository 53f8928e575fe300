"""Relevance judgments (qrels) as plain files, read strictly (``file:line`` errors).

Qrels: ``{query_id: {doc_id: relevance}}``. Two layouts are read:

* BEIR TSV: header ``query-id<TAB>corpus-id<TAB>score``, then one judgment per line;
* TREC: ``query_id iteration doc_id relevance`` (whitespace separated, no header).

Ids follow :func:`spladekit.common.lines.check_id` (a BEIR TSV id with a space could not be written back
as TREC).

Runs (TREC result files) are :class:`spladekit.evaluation.run.Run`.
"""

from __future__ import annotations

from pathlib import Path

from spladekit.common.errors import InputError
from spladekit.common.lines import check_id, numbered_lines

Qrels = dict[str, dict[str, int]]

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
    for number, line in numbered_lines(path):
        fields = line.rstrip("\r\n").split("\t") if layout == "beir" else line.split()
        if not line.strip():
            continue
        if layout is None:
            layout = "beir" if tuple(fields) == BEIR_HEADER else "trec"
            if layout == "beir":
                continue
        if layout == "beir" and len(fields) != 3:
            raise InputError(
                f"expected 3 tab-separated fields (query-id, corpus-id, score), got {len(fields)}", path, number
            )
        if layout == "trec" and len(fields) != 4:
            raise InputError(
                f"expected 4 fields (query_id iteration doc_id relevance), got {len(fields)}", path, number
            )
        query_id, doc_id = check_id(fields[0], "query id", path, number), check_id(fields[-2], "doc id", path, number)
        relevance = _integer(fields[-1], "relevance", path, number)
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged:
            raise InputError(f"duplicate judgment for query {query_id!r}, document {doc_id!r}", path, number)
        judged[doc_id] = relevance
    if not qrels:
        raise InputError("no judgments in file", path)
    return qrels
