"""Triplets TSV (MS MARCO ``triples.train`` style): ``query<TAB>positive<TAB>negative[<TAB>negative…]``.

The same reader serves triplets of ids (``qid<TAB>pid<TAB>nid…``, resolved against queries and a
collection by ``spladekit.data.training``): ``header`` skips a header line and ``columns`` keeps only the
first N columns (e.g. ``scifact/triplets-train-ids.tsv`` has a fourth column, the negative's BM25 rank).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from spladekit.common.errors import InputError
from spladekit.common.lines import numbered_lines


@dataclass(frozen=True)
class Triplet:
    query: str
    positive: str
    negatives: tuple[str, ...]
    line: int = field(default=0, compare=False)  # line number in the file (for error messages)


def read_triplets(
    path: str | Path,
    limit: int | None = None,
    min_negatives: int = 1,
    header: bool = False,
    columns: int | None = None,
) -> list[Triplet]:
    """Read up to ``limit`` triplets; a line with too few fields or an empty field is an error (file:line).

    ``header``: skip the first non-blank line. ``columns``: use only the first ``columns`` fields of
    each line (a line with fewer is an error).
    """
    return list(iter_triplets(path, limit, min_negatives, header, columns))


def iter_triplets(
    path: str | Path,
    limit: int | None = None,
    min_negatives: int = 1,
    header: bool = False,
    columns: int | None = None,
) -> Iterator[Triplet]:
    """:func:`read_triplets`, one triplet at a time (memory does not grow with the file)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    count = 0
    skip_header = header
    for number, line in numbered_lines(path):
        if limit is not None and count >= limit:
            break
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        if skip_header:
            skip_header = False
            continue
        fields = line.split("\t")
        wanted = max(columns or 0, 2 + min_negatives)
        if len(fields) < wanted:
            raise InputError(
                f"expected {wanted}{'' if columns else '+'} tab-separated fields (query, positive, negative…), "
                f"got {len(fields)}",
                path,
                number,
            )
        fields = fields[:columns] if columns else fields
        for position, name in enumerate(["query", "positive"] + ["negative"] * (len(fields) - 2)):
            if not fields[position].strip():
                raise InputError(f"empty {name} (field {position + 1})", path, number)
        count += 1
        yield Triplet(fields[0], fields[1], tuple(fields[2:]), number)
    if not count:
        raise InputError("no triplets in file", path)
