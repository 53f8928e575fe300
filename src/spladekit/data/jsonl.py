"""Strict JSONL corpus reader: every problem is reported as ``file:line: what is wrong``.

A corpus line is ``{"_id": str, "text": str, "title"?: str}`` (the BEIR layout). The encoded text is
``title + " " + text`` when a non-empty title is present, as BEIR's SPLADE evaluations do. Ids follow
:func:`spladekit.common.lines.check_id`: non-empty, no whitespace (they end up in TREC runs).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from spladekit.common.errors import InputError
from spladekit.common.lines import check_id, json_records, numbered_lines


@dataclass(frozen=True)
class Corpus:
    ids: list[str]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.ids)


def read_corpus(path: str | Path, id_field: str = "_id", text_field: str = "text") -> Corpus:
    """Read a JSONL corpus; blank lines are skipped, everything else must be a valid record."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)

    return corpus_from_records(json_records(numbered_lines(path), path), path, id_field=id_field, text_field=text_field)


def corpus_from_records(
    records: Iterable[tuple[int, object]], source: str | Path, id_field: str = "_id", text_field: str = "text"
) -> Corpus:
    """Validate ``(line or row number, record)`` pairs into a :class:`Corpus` (same rules as JSONL files).

    Used for rows that do not come from a JSONL file (Hugging Face datasets, ir_datasets); errors name
    ``source`` and the row number.
    """
    ids: list[str] = []
    texts: list[str] = []
    seen: dict[str, int] = {}
    for number, record in records:
        doc_id, text = checked_record(number, record, source, id_field, text_field)
        if doc_id in seen:
            raise InputError(f"duplicate id {doc_id!r} (first seen on line {seen[doc_id]})", source, number)
        seen[doc_id] = number
        ids.append(doc_id)
        texts.append(text)
    if not ids:
        raise InputError("empty corpus: no records", source)
    return Corpus(ids, texts)


def checked_record(
    number: int, record: object, source: str | Path, id_field: str = "_id", text_field: str = "text"
) -> tuple[str, str]:
    """One record's ``(id, title + " " + text)``, or an :class:`InputError` naming ``source`` and ``number``
    (every rule of :func:`corpus_from_records` but duplicate ids, which need the other records)."""
    if not isinstance(record, dict):
        raise InputError(f"expected a JSON object, got {type(record).__name__}", source, number)
    for field in (id_field, text_field):
        if field not in record:
            raise InputError(f"missing field {field!r}", source, number)
    doc_id = check_id(record[id_field], f"field {id_field!r}", source, number)
    text, title = record[text_field], record.get("title") or ""
    if not isinstance(text, str) or not isinstance(title, str):
        raise InputError(f"fields {text_field!r} and 'title' must be strings", source, number)
    return doc_id, f"{title} {text}".strip() if title else text


def read_document(path: str | Path, doc_id: str, id_field: str = "_id", text_field: str = "text") -> str:
    """The text of document ``doc_id`` of a JSONL corpus (title + text, as :func:`read_corpus`), reading only
    up to its line; an id that no line has is an :class:`InputError` naming the file."""
    path = Path(path)
    for number, record in json_records(numbered_lines(path), path):
        if isinstance(record, dict) and str(record.get(id_field)) == doc_id:  # ids may be JSON numbers
            return corpus_from_records([(number, record)], path, id_field=id_field, text_field=text_field).texts[0]
    raise InputError(f"no document with id {doc_id!r}", path)


def read_texts(path: str | Path) -> list[str]:
    """Texts from a JSONL corpus (``.jsonl``) or a plain file with one text per line."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return read_corpus(path).texts
    if not path.is_file():
        raise InputError("no such file", path)
    texts = [line.strip() for _, line in numbered_lines(path) if line.strip()]
    if not texts:
        raise InputError("no texts in file", path)
    return texts
