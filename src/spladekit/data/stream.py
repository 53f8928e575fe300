"""Corpora read lazily, one record at a time: memory does not grow with the corpus (``spladekit encode``).

``iter_corpus(spec)`` yields validated ``(id, text)`` pairs in corpus order from

* a JSONL file (``{"_id", "text", "title"?}`` per line),
* a BEIR folder (its ``corpus.jsonl``) or a Hugging Face parquet folder (``corpus/*.parquet``),
* a Hugging Face dataset id with a ``corpus`` config (``zeta-alpha-ai/NanoSciFact``, or ``hf:ID``),
* an ``ir_datasets`` id (its ``docs_iter()``),

with the per-record rules of :func:`spladekit.data.jsonl.corpus_from_records` (the same function checks
each record). Duplicate ids need every id, so :func:`scan_corpus` — one pass before any encoding — keeps a
64-bit hash per id (8 bytes a document, not a Python set of strings), sorts them at the end and, only when
two hashes are equal, reads the corpus again to confirm the strings and name both lines.

The corpus fingerprint is ``sha256`` over ``id ‖ 0x00 ‖ text ‖ 0x01`` for every document in order
(:func:`update_fingerprint`; the evaluation cache's key uses the same formula).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import json_records, numbered_lines
from spladekit.common.sources import fetching, is_local
from spladekit.data.collections import LOCAL_COPY, _hf_rows, _text, is_hf_dataset_id, resolve_ir_dataset_id
from spladekit.data.jsonl import checked_record


def update_fingerprint(digest: Any, doc_id: str, text: str) -> None:  # hashlib's hash object
    """Add one document to a corpus fingerprint (``id ‖ 0x00 ‖ text ‖ 0x01``)."""
    digest.update(doc_id.encode())
    digest.update(b"\x00")
    digest.update(text.encode())
    digest.update(b"\x01")


def corpus_fingerprint(documents: Iterable[tuple[str, str]]) -> str:
    """sha256 over the ``(id, text)`` pairs, in order."""
    digest = hashlib.sha256()
    for doc_id, text in documents:
        update_fingerprint(digest, doc_id, text)
    return digest.hexdigest()


def corpus_where(spec: str | Path) -> str:
    """What errors about the corpus ``spec`` name: the JSONL file, or the dataset id."""
    path = Path(spec)
    if path.is_dir():
        if (path / "corpus.jsonl").is_file():
            return str(path / "corpus.jsonl")
        if (path / "corpus").is_dir():
            return f"{path} [corpus]"
        raise InputError("not a corpus: expected a JSONL file, a BEIR folder (corpus.jsonl) or corpus/*.parquet", path)
    if path.is_file():
        return str(path)
    if is_local(spec):
        raise InputError("no such file", path)
    return f"{str(spec).removeprefix('hf:')} [corpus]" if is_hf_dataset_id(str(spec)) else str(spec)


def corpus_records(spec: str | Path) -> Iterator[tuple[int, object]]:
    """The raw ``(line or row number, record)`` pairs of a corpus, lazily (see the module docstring)."""
    path = Path(spec)
    where = corpus_where(spec)
    if path.is_dir() and (path / "corpus").is_dir() and not (path / "corpus.jsonl").is_file():
        yield from enumerate(_hf_rows(str(path), "corpus"), start=1)
    elif path.exists():
        file = Path(where)
        yield from json_records(numbered_lines(file), file)
    elif is_hf_dataset_id(str(spec)):
        source = str(spec).removeprefix("hf:")
        with fetching(str(spec), "hub", LOCAL_COPY):
            yield from enumerate(_hf_rows(source, "corpus"), start=1)
    else:
        with fetching(str(spec), "ir_datasets", LOCAL_COPY):  # ir_datasets downloads on first use
            yield from _ir_dataset_records(str(spec))


def _ir_dataset_records(dataset_id: str) -> Iterator[tuple[int, dict]]:
    import ir_datasets

    dataset = ir_datasets.load(resolve_ir_dataset_id(dataset_id, None))
    if not dataset.has_docs():
        raise SpladekitError(f"ir_datasets {dataset_id!r} has no documents")
    for number, doc in enumerate(dataset.docs_iter(), start=1):
        yield number, {"_id": doc.doc_id, "text": _text(doc)}


def iter_corpus(spec: str | Path) -> Iterator[tuple[str, str]]:
    """Validated ``(id, title + " " + text)`` pairs of a corpus, in order, read lazily. Duplicate ids are
    not detected here: :func:`scan_corpus` does it once, before the work."""
    where = corpus_where(spec)
    for number, record in corpus_records(spec):
        yield checked_record(number, record, where)


@dataclass(frozen=True)
class CorpusScan:
    """What one validating pass over a corpus found: where errors point, documents, fingerprint."""

    where: str
    documents: int
    fingerprint: str


def _id_hash(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little", signed=True)


def scan_corpus(spec: str | Path) -> CorpusScan:
    """Validate every record of a corpus (including duplicate ids) and fingerprint it, in O(1) memory per
    document (one 64-bit id hash); an :class:`InputError` names the file (or dataset) and the line (row)."""
    where = corpus_where(spec)
    hashes = array("q")
    digest = hashlib.sha256()
    for number, record in corpus_records(spec):
        doc_id, text = checked_record(number, record, where)
        hashes.append(_id_hash(doc_id))
        update_fingerprint(digest, doc_id, text)
    if not hashes:
        raise InputError("empty corpus: no records", where)
    ordered = np.sort(np.frombuffer(hashes, dtype=np.int64))
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size:
        _confirm_duplicates(spec, where, set(repeated.tolist()))
    return CorpusScan(where, len(hashes), digest.hexdigest())


def _confirm_duplicates(spec: str | Path, where: str, suspects: set[int]) -> None:
    """Second pass over the records whose id hash occurs twice: a true duplicate is an error naming both
    lines; equal hashes of different ids (a 64-bit collision) are not."""
    first: dict[str, int] = {}
    for number, record in corpus_records(spec):
        doc_id, _ = checked_record(number, record, where)
        if _id_hash(doc_id) not in suspects:
            continue
        if doc_id in first:
            raise InputError(f"duplicate id {doc_id!r} (first seen on line {first[doc_id]})", where, number)
        first[doc_id] = number
