"""Triplets TSV (MS MARCO ``triples.train`` style): ``query<TAB>positive<TAB>negative[<TAB>negative…]``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spladekit.data.jsonl import _decoded_lines
from spladekit.errors import InputError


@dataclass(frozen=True)
class Triplet:
    query: str
    positive: str
    negatives: tuple[str, ...]


def read_triplets(path: str | Path, limit: int | None = None, min_negatives: int = 1) -> list[Triplet]:
    """Read up to ``limit`` triplets; a line with too few fields or an empty field is an error (file:line)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    triplets: list[Triplet] = []
    for number, line in _decoded_lines(path):
        if limit is not None and len(triplets) >= limit:
            break
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 + min_negatives:
            raise InputError(
                f"expected {2 + min_negatives}+ tab-separated fields (query, positive, negative…), got {len(fields)}",
                path,
                number,
            )
        for position, name in enumerate(["query", "positive"] + ["negative"] * (len(fields) - 2)):
            if not fields[position].strip():
                raise InputError(f"empty {name} (field {position + 1})", path, number)
        triplets.append(Triplet(fields[0], fields[1], tuple(fields[2:])))
    if not triplets:
        raise InputError("no triplets in file", path)
    return triplets
