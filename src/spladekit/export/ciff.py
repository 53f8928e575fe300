"""SPLADE vectors → one CIFF file (Common Index File Format, https://github.com/osirrc/ciff), the exchange
format that Anserini/Lucene, Terrier and PISA import.

A CIFF file is a sequence of protobuf messages, each prefixed by its varint-encoded size: one ``Header``,
one ``PostingsList`` per term (``term``, ``df``, ``cf``, postings ``(docid gap, tf)`` in docid order), then
one ``DocRecord`` per document (``docid``, ``collection_docid``, ``doclength``). Written here:

* **impacts**: ``tf = round(w × scale)`` (:func:`spladekit.common.sparse.quantize`; ``scale`` by default derived
  from the documents, :func:`spladekit.common.sparse.impact_scale`, as PISA and Anserini indexes built by spladekit
  do: not the customary 100 of Anserini's SPLADE regressions and pyterrier-ciff; docs/results/impact-scale). A
  weight that rounds to 0 is dropped (it is no posting, and ``df`` does not count it); every kept tf is an integer
  ≥ 1. The scale is recorded in the header's ``description``. A dot product over the impacts is ``scale²`` × the
  float one up to rounding (≤ 0.5/scale per weight), so rankings are kept up to that rounding.
* **terms**: the token string of each vocabulary id (the model's tokenizer), sorted by code point, which
  is UTF-8 byte order, the order of Lucene's ``BytesRef`` terms (Anserini's own CIFF exports list terms in
  that order); only terms with at least one posting get a postings list. Token strings must be unique and
  non-empty.
* **documents**: ``docid`` = row number in the vectors folder, ``collection_docid`` = its id,
  ``doclength = Σ_v tf`` (the sum of the document's impacts, as pyterrier-ciff writes: the length a
  bag-of-words model would see if each impact were a term count; impact scoring ignores it).
  ``cf = Σ_d tf`` of the term, ``total_terms_in_collection = Σ_d doclength``.

**Memory** (postings must be term-major, the vectors are row-major): two passes over
:meth:`Vectors.blocks`, each block cut into runs of rows of at most ``PIECE_WEIGHTS`` (2**22) stored weights.
Pass 1 quantizes each run and counts ``df``/``cf`` per term (two arrays of the vocabulary's size) while the
``DocRecord`` messages stream to a temporary file. The terms, in sorted order, are then cut into *buckets*
of consecutive terms holding at most ``bucket_postings`` postings (a single term above that is a bucket of
its own). Pass 2 quantizes each run again and appends each posting ``(term rank, docid, tf)`` (12 bytes)
to its bucket's file in a scratch folder beside the output (:mod:`spladekit.common.scratch`: removed when the
export ends, and after a kill -9 by the next export there); since runs come in row order, a stable sort of one bucket
by term gives every postings list in docid order. Peak memory: the block the reader holds (a single-file
vectors folder is one block: its whole CSR, ~8 bytes per weight, plus its ids) + one run (~50 bytes per
weight: its quantized copy and the scattered records) + one bucket (~100 bytes per posting while sorted
and encoded, at most max(``bucket_postings``, the largest df) postings; 2**23 by default): ~1 GB beyond
the block and the imports, measured at 100k and 400k documents (``benchmarks/ciff_export.py``,
docs/export.md). With a sharded folder the block is one shard, so the peak does not grow with the corpus.
Scratch disk: 12 bytes per posting (MS MARCO's 8.8M passages × ~120 non-zeros ≈ 1G postings: ~12 GB)
besides the output (~6.5 bytes per posting).

Postings lists are serialized by :func:`postings_field` with numpy (the fields ``ciff.proto`` defines,
byte-identical to protobuf's own serialization, tested), because building one protobuf ``Posting`` object
per posting from Python would dominate the export at this size; the header, postings-list heads and
document records are ciff-toolkit's protobuf messages, written by its ``CiffWriter``.
"""

from __future__ import annotations

import gzip
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.common.atomic import final_path, open_output
from spladekit.common.errors import SpladekitError
from spladekit.common.scratch import scratch_folder
from spladekit.common.sparse import (
    INT32_MAX,
    ImpactRange,
    check_rounded_away,
    impact_scale,
    max_weight,
    quantize_impacts,
)
from spladekit.vectors.artifact import Vectors

DEFAULT_BUCKET_POSTINGS = 2**23
PIECE_WEIGHTS = 2**22  # stored weights quantized and inverted at a time
INSTALL = "pip install --no-deps ciff-toolkit==0.2.2"
# ciff.proto's Posting.tf and DocRecord.doclength are int32
IMPACTS = ImpactRange("CIFF", "--quantization-scale", INT32_MAX, INT32_MAX, "its doclength, the sum of its impacts")
# scratch record of one posting: its term's rank in sorted order, docid, tf
POSTING = np.dtype([("rank", "<i4"), ("docid", "<i4"), ("tf", "<i4")])
# protobuf keys (field number << 3 | wire type) of ciff.proto's Posting fields inside a PostingsList
POSTINGS_KEY = 0x22  # PostingsList.postings = 4, length-delimited
DOCID_KEY = 0x08  # Posting.docid = 1, varint
TF_KEY = 0x10  # Posting.tf = 2, varint


def ciff_messages() -> Any:
    """ciff-toolkit's generated protobuf module (``Header``, ``PostingsList``, ``Posting``, ``DocRecord``)."""
    try:
        from ciff_toolkit import ciff_pb2
    except ImportError:
        raise SpladekitError(
            f"export ciff needs ciff-toolkit: {INSTALL} (without its dependencies: it pins "
            "protobuf<5, which pymilvus cannot use; it works with newer protobuf)"
        ) from None
    return ciff_pb2


def check_scale(scale: float) -> None:
    if not np.isfinite(scale) or scale <= 0:
        raise SpladekitError(f"quantization scale must be a positive finite number, got {scale}")


def term_order(tokens: list[str]) -> np.ndarray:
    """Vocabulary ids in CIFF term order (token strings by code point); refuses empty or duplicate strings."""
    empty = [index for index, token in enumerate(tokens) if not token]
    if empty:
        raise SpladekitError(f"vocabulary id {empty[0]} has an empty token string: not a valid CIFF term")
    if len(set(tokens)) != len(tokens):
        duplicate = next(token for token, count in Counter(tokens).items() if count > 1)
        raise SpladekitError(f"the vocabulary has the token string {duplicate!r} twice: CIFF terms must be unique")
    return np.array(sorted(range(len(tokens)), key=tokens.__getitem__), dtype=np.int64)


def impacts(block: Vectors, tokens: list[str], scale: float) -> sp.csr_matrix:
    """A block's quantized weights ``round(w × scale)`` as int64 CSR (zeros dropped); refuses NaN, infinite
    or negative weights (no valid impact) and impacts or document lengths beyond CIFF's int32 (:data:`IMPACTS`)."""
    if block.vocab_size != len(tokens):
        raise SpladekitError(f"vectors have {block.vocab_size} dimensions but the vocabulary has {len(tokens)} tokens")
    matrix = block.matrix.tocsr()
    bad = np.flatnonzero(~np.isfinite(matrix.data) | (matrix.data < 0))
    if bad.size:
        row = int(np.searchsorted(matrix.indptr, bad[0], side="right")) - 1
        raise SpladekitError(
            f"document {block.ids[row]!r} has weight {matrix.data[bad[0]]} for token "
            f"{tokens[matrix.indices[bad[0]]]!r}: CIFF impacts come from finite, non-negative "
            f"weights ({bad.size} such weights in this block)"
        )
    return quantize_impacts(matrix, scale, IMPACTS, ids=block.ids).astype(np.int64)


def varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints of values in [0, 2**32): (n × 5 bytes, low 7-bit groups first, continuation bit set
    on all but the last byte; the byte count 1..5 of each)."""
    values = values.astype(np.uint64)
    count = np.ones(len(values), dtype=np.int64)
    for k in range(1, 5):
        count += values >= np.uint64(1 << (7 * k))
    groups = np.stack([(values >> np.uint64(7 * k)) & np.uint64(0x7F) for k in range(5)], axis=1).astype(np.uint8)
    groups[np.arange(5)[None, :] < (count - 1)[:, None]] |= 0x80
    return groups, count


def postings_field(docids: np.ndarray, tfs: np.ndarray) -> bytes:
    """The ``repeated Posting postings = 4`` field of a PostingsList for increasing ``docids``: each posting
    is key 0x22, its length, then ``docid`` (the gap to the previous docid, the first one's docid itself;
    omitted when 0, as proto3 does) and ``tf``."""
    return posting_entries(np.diff(docids.astype(np.int64), prepend=0), tfs)[0]


def posting_entries(gaps: np.ndarray, tfs: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The serialized entries of :func:`postings_field` for given docid gaps, and the byte length of each
    (several postings lists are encoded at once and cut apart by these lengths)."""
    gap_bytes, gap_count = varints(gaps)
    tf_bytes, tf_count = varints(tfs)
    has_gap = gaps > 0
    gap_count = np.where(has_gap, gap_count, 0)
    table = np.empty((len(gaps), 14), dtype=np.uint8)  # key, length, docid key + 5, tf key + 5
    table[:, 0] = POSTINGS_KEY
    table[:, 1] = has_gap + gap_count + 1 + tf_count  # < 128: a one-byte varint
    table[:, 2] = DOCID_KEY
    table[:, 3:8] = gap_bytes
    table[:, 8] = TF_KEY
    table[:, 9:14] = tf_bytes
    groups = np.arange(5)[None, :]
    keep = np.ones(table.shape, dtype=bool)
    keep[:, 2] = has_gap
    keep[:, 3:8] = groups < gap_count[:, None]
    keep[:, 9:14] = groups < tf_count[:, None]
    return table[keep].tobytes(), keep.sum(axis=1)


@dataclass
class _Serialized:
    """Already serialized message bytes, for ciff-toolkit's writer (it only calls ``SerializeToString``)."""

    data: bytes

    def SerializeToString(self) -> bytes:  # protobuf's method name
        return self.data


@dataclass
class _Counts:
    """What pass 1 learns: per-term df and cf, documents, weights dropped by rounding to 0."""

    df: np.ndarray
    cf: np.ndarray
    documents: int = 0
    dropped: int = 0


def term_buckets(df_sorted: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Cut the terms (in sorted order, with their df) into runs [start, end) of at most ``limit`` postings
    (a term with more is a run of its own)."""
    buckets, start, total = [], 0, 0
    for rank, count in enumerate(df_sorted.tolist()):
        if total and total + count > limit:
            buckets.append((start, rank))
            start, total = rank, 0
        total += count
    buckets.append((start, len(df_sorted)))
    return buckets


def pieces(blocks: Iterable[Vectors], limit: int) -> Iterator[Vectors]:
    """Each block cut into runs of whole rows holding at most ``limit`` stored weights (a longer row is a run
    of its own), so that quantizing and inverting need memory for one run, not for a whole block."""
    for block in blocks:
        matrix = block.matrix.tocsr()
        start = 0
        while start < len(block):
            end = int(np.searchsorted(matrix.indptr, int(matrix.indptr[start]) + limit, side="right")) - 1
            end = min(max(end, start + 1), len(block))
            yield Vectors(matrix[start:end], block.ids[start:end], block.meta)
            start = end


def _document_records(
    blocks: Iterable[Vectors], tokens: list[str], scale: float, counts: _Counts, messages: Any, bar: tqdm
) -> Iterator[Any]:
    """Pass 1: the DocRecord of every document, counting df / cf per term on the way."""
    for block in blocks:
        quantized = impacts(block, tokens, scale)
        counts.dropped += block.matrix.nnz - quantized.nnz
        counts.df += np.bincount(quantized.indices, minlength=len(tokens))
        counts.cf += np.bincount(quantized.indices, weights=quantized.data, minlength=len(tokens)).astype(np.int64)
        lengths = np.asarray(quantized.sum(axis=1)).ravel()  # within int32: impacts()
        if counts.documents + len(block) > INT32_MAX:
            raise SpladekitError("more documents than CIFF's 32-bit docids can number")
        for row, (doc_id, length) in enumerate(zip(block.ids, lengths.tolist())):
            yield messages.DocRecord(docid=counts.documents + row, collection_docid=doc_id, doclength=int(length))
        counts.documents += len(block)
        bar.update(len(block))


def _scatter(
    blocks: Iterable[Vectors],
    tokens: list[str],
    scale: float,
    rank: np.ndarray,
    bucket_of_rank: np.ndarray,
    paths: list[Path],
    bar: tqdm,
) -> None:
    """Pass 2: append every posting (term rank, docid, tf) to its bucket's scratch file, in row order."""
    first = 0
    for block in blocks:
        quantized = impacts(block, tokens, scale)
        records = np.empty(quantized.nnz, dtype=POSTING)
        records["rank"] = rank[quantized.indices]
        records["docid"] = first + np.repeat(np.arange(len(block), dtype=np.int64), np.diff(quantized.indptr))
        records["tf"] = quantized.data
        bucket = bucket_of_rank[records["rank"]]
        order = np.argsort(bucket, kind="stable")  # stable: docids stay increasing within each term
        records, bucket = records[order], bucket[order]
        bounds = np.searchsorted(bucket, np.arange(len(paths) + 1))
        for index in np.flatnonzero(np.diff(bounds)).tolist():
            with open(paths[index], "ab") as stream:
                records[bounds[index] : bounds[index + 1]].tofile(stream)
        first += len(block)
        bar.update(len(block))


def _postings_lists(
    paths: list[Path],
    buckets: list[tuple[int, int]],
    order: np.ndarray,
    tokens: list[str],
    counts: _Counts,
    messages: Any,
    bar: tqdm,
) -> Iterator[_Serialized]:
    """The serialized PostingsList of every term with postings, in term order, one bucket in memory at a time."""
    for path, (start, end) in zip(paths, buckets):
        records = np.fromfile(path, dtype=POSTING) if path.exists() else np.empty(0, dtype=POSTING)
        path.unlink(missing_ok=True)
        records = records[np.argsort(records["rank"], kind="stable")]
        bounds = np.searchsorted(records["rank"], np.arange(start, end + 1))
        # the whole bucket encoded at once (a per-term numpy call costs ~0.3 ms × 30k terms), gaps restarting
        # at each term's first posting; the bytes are then cut per term
        docids = records["docid"].astype(np.int64)
        gaps = np.diff(docids, prepend=0)
        firsts = bounds[:-1][np.diff(bounds) > 0]
        gaps[firsts] = docids[firsts]
        data, lengths = posting_entries(gaps, records["tf"])
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        del records, docids, gaps, lengths
        for rank in range(start, end):
            term = int(order[rank])
            low, high = int(bounds[rank - start]), int(bounds[rank - start + 1])
            if high - low != counts.df[term]:
                raise SpladekitError(
                    f"token {tokens[term]!r}: {counts.df[term]} postings in the first pass, "
                    f"{high - low} in the second: the vectors folder changed during the export"
                )
            if low == high:
                continue
            head = messages.PostingsList(term=tokens[term], df=high - low, cf=int(counts.cf[term]))
            yield _Serialized(head.SerializeToString() + data[offsets[low] : offsets[high]])
            bar.update(1)


def write_ciff(
    blocks: Callable[[], Iterable[Vectors]],
    tokens: list[str],
    output: str | Path,
    scale: float | None = None,
    description: str = "",
    overwrite: bool = False,
    bucket_postings: int = DEFAULT_BUCKET_POSTINGS,
    show_progress: bool = True,
) -> dict:
    """Write the CIFF file ``output`` (atomically; gzip-compressed when it ends in ``.gz``, as ciff-toolkit
    reads it) from the vectors that ``blocks()`` yields (called twice, three times without a ``scale``; rows in the
    same order each time). ``scale``: None derives it from the documents' largest weight
    (:func:`spladekit.common.sparse.impact_scale`).

    ``tokens[v]`` is the term of vocabulary id v; see the module for impacts, order and memory.
    """
    messages = ciff_messages()
    from ciff_toolkit.write import CiffWriter

    if scale is None:
        scale = impact_scale(max_weight(block.matrix for block in blocks()))
    check_scale(scale)
    if bucket_postings < 1:
        raise SpladekitError(f"bucket_postings must be at least 1, got {bucket_postings}")
    order = term_order(tokens)
    counts = _Counts(np.zeros(len(tokens), dtype=np.int64), np.zeros(len(tokens), dtype=np.int64))
    with (
        open_output(output, folder=False, overwrite=overwrite) as staged,
        scratch_folder("ciff", staged.staging.parent) as scratch,  # beside the output: same disk, ~2x its size
    ):
        gzipped = final_path(staged.staging).suffix == ".gz"
        opener: Callable[..., IO[bytes]] = gzip.open if gzipped else open  # type: ignore[assignment]
        with opener(staged.staging, "wb") as stream:
            writer = CiffWriter(stream)
            with tqdm(desc="ciff: documents", unit="doc", disable=not show_progress) as bar:
                writer.write_documents(
                    _document_records(pieces(blocks(), PIECE_WEIGHTS), tokens, scale, counts, messages, bar)
                )
            if not counts.documents:
                raise SpladekitError("no documents in the vectors: nothing to export")
            check_rounded_away(int(counts.df.sum()) + counts.dropped, counts.dropped, scale, "ciff")
            buckets = term_buckets(counts.df[order], bucket_postings)
            bucket_of_rank = np.repeat(np.arange(len(buckets)), [end - start for start, end in buckets])
            rank = np.empty(len(tokens), dtype=np.int64)
            rank[order] = np.arange(len(tokens))
            paths = [scratch / f"{index}.postings" for index in range(len(buckets))]
            with tqdm(total=counts.documents, desc="ciff: inverting", unit="doc", disable=not show_progress) as bar:
                _scatter(pieces(blocks(), PIECE_WEIGHTS), tokens, scale, rank, bucket_of_rank, paths, bar)
            terms = int(np.count_nonzero(counts.df))
            total = int(counts.cf.sum())
            header_text = (
                f"spladekit SPLADE impacts: tf = round(weight x {scale:g}), weights that round to 0 "
                f"dropped; doclength = sum of the document's impacts"
                f"{f'; {description}' if description else ''}"
            )
            writer.write_header(
                messages.Header(
                    version=1,
                    num_postings_lists=terms,
                    num_docs=counts.documents,
                    total_postings_lists=terms,
                    total_docs=counts.documents,
                    total_terms_in_collection=total,
                    average_doclength=total / counts.documents,
                    description=header_text,
                )
            )
            with tqdm(total=terms, desc="ciff: postings lists", unit="term", disable=not show_progress) as bar:
                writer.write_postings_lists(_postings_lists(paths, buckets, order, tokens, counts, messages, bar))
            writer.close()  # appends the document records (kept in a temporary file) after the postings
    return {
        "format": "ciff",
        "output": str(final_path(output)),
        "documents": counts.documents,
        "postings_lists": terms,
        "postings": int(counts.df.sum()),
        "dropped_weights": counts.dropped,
        "quantization_scale": scale,
        "total_terms_in_collection": total,
        "description": header_text,
    }


def export_ciff(
    folder: str | Path,
    output: str | Path,
    model: str | None = None,
    tokens: list[str] | None = None,
    scale: float | None = None,
    overwrite: bool = False,
    trust_remote_code: bool = False,
    bucket_postings: int = DEFAULT_BUCKET_POSTINGS,
    show_progress: bool = True,
) -> dict:
    """Export the vectors folder ``folder`` as the CIFF file ``output``.

    Terms are ``tokens`` when given, else the token strings of ``model``'s tokenizer (default: the model
    named in the vectors' meta.json).
    """
    from spladekit.export.search_engine import vocabulary_tokens

    ciff_messages()  # missing ciff-toolkit: say so before anything else
    if scale is not None:
        check_scale(scale)
    with open_output(output, folder=False, overwrite=overwrite) as staged:  # checked and locked before the work
        stream = iter(Vectors.blocks(folder))
        first = next(stream, None)  # validates the folder; gives the meta and the vocabulary size
        if first is None:
            raise SpladekitError(f"{folder}: no vectors: nothing to export")
        if tokens is None:
            model = model or first.meta.get("model")
            if not model:
                raise SpladekitError(f"{folder}: meta.json names no model; pass --model for the token strings")
            tokens = vocabulary_tokens(model, first.vocab_size, trust_remote_code=trust_remote_code)
        # pass 1 goes on from the block already read (a single-file folder is read twice, not three times)
        passes = [itertools.chain([first], stream)]
        del first
        source = f"terms: token strings of {model}; " if model else ""
        payload = write_ciff(
            lambda: passes.pop() if passes else Vectors.blocks(folder),
            tokens,
            staged.staging,
            scale=scale,
            description=f"{source}vectors: {folder}",
            bucket_postings=bucket_postings,
            show_progress=show_progress,
        )
    return payload | {"vectors": str(folder), "model": model}
