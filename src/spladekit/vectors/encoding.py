"""Streaming, sharded, resumable corpus encoding into a sharded vectors folder (``spladekit encode``).

The corpus is read twice, lazily (:mod:`spladekit.data.stream`): a validating pass (every record, duplicate
ids, the count and the fingerprint) before any output exists, then the encoding pass, which cuts it into
shards of ``shard_size`` documents in corpus order and encodes each with ``encode_document`` /
``encode_query`` (length-sorted batches inside the shard). Only one shard's texts and vectors are held at a
time: peak memory is O(shard), not O(corpus).

Which process encodes shard ``j`` (data parallelism on existing launchers, no coordinator of ours):

* ``--shard i/n`` (Slurm job arrays): shards with ``j % n == i``;
* ``torchrun --nproc-per-node N -m spladekit encode …``: rank ``r`` of ``W`` (``RANK``/``WORLD_SIZE``/
  ``LOCAL_RANK``, :mod:`spladekit.common.distributed`: gloo on CPU, nccl and ``cuda:LOCAL_RANK`` on GPU)
  encodes ``j % W == r``; a barrier at the end, then rank 0 writes the manifest;
* otherwise every shard.

Every process that finishes checks whether all shards are sealed and, if so, writes the manifest
(:func:`spladekit.vectors.shards.finalize`: idempotent, atomic, identical bytes from every writer), so the
last one to finish completes the folder. ``resume`` keeps sealed shards whose plan and checksums match
and encodes the others; a folder of another plan is an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from spladekit.common.atomic import check_new_output, mark_output, open_in_place, open_output
from spladekit.common.devices import check_precision, resolve_device
from spladekit.common.errors import SpladekitError
from spladekit.common.sparse import check_max_active_dims, nnz_per_row
from spladekit.data.stream import iter_corpus, scan_corpus, update_fingerprint
from spladekit.model.encoder import DEFAULT_POOLING, check_side
from spladekit.model.loading import RetrievalModel, load_model, model_fingerprint
from spladekit.vectors.artifact import Vectors
from spladekit.vectors.shards import (
    DEFAULT_SHARD_SIZE,
    MANIFEST,
    check_plan,
    existing_plan,
    finalize,
    is_sharded,
    plan_precision,
    reusable_shard,
    seal,
    sealed_sidecars,
    shard_count,
    writing_shard,
)


@dataclass(frozen=True)
class ShardSelection:
    """The shards one process encodes: those with ``j % count == index``."""

    index: int = 0
    count: int = 1

    def mine(self, shard: int) -> bool:
        return shard % self.count == self.index


def parse_shard(text: str | None) -> ShardSelection:
    """``"i/n"`` (0 <= i < n) → :class:`ShardSelection`; None → every shard."""
    if text is None:
        return ShardSelection()
    index, slash, count = text.partition("/")
    if not slash or not index.strip().isdigit() or not count.strip().isdigit():
        raise SpladekitError(f"--shard must be I/N with integers 0 <= I < N, got {text!r}")
    selection = ShardSelection(int(index), int(count))
    if selection.count < 1 or selection.index >= selection.count:
        raise SpladekitError(f"--shard must be I/N with integers 0 <= I < N, got {text!r}")
    return selection


@dataclass
class ShardedEncoding:
    """What one process did: shards encoded here, shards reused, and the manifest if the folder is complete."""

    folder: Path
    shards: int
    documents: int
    encoded: list[int] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)
    manifest: dict | None = None  # None: shards of other processes are still missing
    seconds: float = 0.0


def build_plan(
    encoder: RetrievalModel,
    model: str,
    corpus: str,
    corpus_sha256: str,
    documents: int,
    side: str,
    max_length: int | None,
    max_active_dims: int | None,
    shard_size: int,
    model_sha256: str | None = None,
) -> dict:
    """Everything that fixes a sharded folder's vectors (see :mod:`spladekit.vectors.shards`); ``model_sha256``:
    :func:`~spladekit.model.loading.model_fingerprint` when already computed."""
    return {
        "model": model,
        "model_sha256": model_sha256 or model_fingerprint(encoder),
        "corpus": corpus,
        "corpus_sha256": corpus_sha256,
        "documents": documents,
        "side": side,
        "max_length": encoder.side_max_length(check_side(side), max_length),
        "pooling": encoder.pooling,
        # absent for fp32: folders made before stay resumable (and bf16 ones that recorded "bf16": true,
        # shards.plan_precision)
        **({} if encoder.precision == "fp32" else {"precision": encoder.precision}),
        "max_active_dims": max_active_dims,
        "shard_size": shard_size,
        "vocab_size": encoder.vocab_size,
        # the head options (absent for the plain head: folders made before stay resumable); a fold's map and token
        # strings are in the folder's vocabulary_fold.json
        **({} if encoder.head_options.plain else {"head": encoder.head_options.to_dict()}),
    }


def write_shards(
    folder: Path,
    encoder: RetrievalModel,
    documents: Iterable[tuple[str, str]],
    plan: dict,
    selection: ShardSelection = ShardSelection(),
    resume: bool = False,
    batch_size: int = 32,
    show_progress: bool = True,
) -> tuple[list[int], list[int]]:
    """Encode this process's shards of ``documents`` (``(id, text)`` in corpus order) into ``folder``;
    return (shards encoded, shards reused). Shards of other processes are read past, not kept. The documents
    are fingerprinted again on the way: a corpus that changed since the plan was made is an error before any
    manifest is written."""
    shard_size, total = plan["shard_size"], plan["documents"]
    count = shard_count(total, shard_size)
    digest = hashlib.sha256()
    stream: Iterator[tuple[str, str]] = _fingerprinted(documents, digest)
    encoded: list[int] = []
    reused: list[int] = []
    encode_side = encoder.encode_query if plan["side"] == "query" else encoder.encode_document
    for index in tqdm(
        range(count), desc="encoding shards", unit="shard", disable=not show_progress or count == 1, leave=False
    ):
        rows = min(shard_size, total - index * shard_size)
        if not selection.mine(index) or (resume and reusable_shard(folder, index, plan)):
            skipped = sum(1 for _ in itertools.islice(stream, rows))
            _check_rows(skipped, rows, index)
            if selection.mine(index):
                reused.append(index)
            continue
        batch = list(itertools.islice(stream, rows))
        _check_rows(len(batch), rows, index)
        ids = [doc_id for doc_id, _ in batch]
        texts = [text for _, text in batch]
        del batch
        with writing_shard(folder, index, overwrite=True) as staging:
            started = time.perf_counter()
            matrix = encode_side(
                texts,
                batch_size=batch_size,
                max_length=plan["max_length"],
                show_progress=show_progress,
                max_active_dims=plan["max_active_dims"],
                ids=ids,
            )
            seconds = time.perf_counter() - started
            Vectors(
                matrix,
                ids,
                {
                    "model": plan["model"],
                    "corpus": plan["corpus"],
                    "side": plan["side"],
                    "max_length": plan["max_length"],
                    "pooling": plan["pooling"],
                    "precision": plan_precision(plan),
                    "max_active_dims": plan["max_active_dims"],
                    "shard": index,
                    "documents": rows,
                    "encode_seconds": round(seconds, 3),
                },
            ).save(staging)
            seal(staging, index, plan, rows, int(nnz_per_row(matrix).sum()), seconds)
        encoded.append(index)
    if next(stream, None) is not None or digest.hexdigest() != plan["corpus_sha256"]:
        raise SpladekitError(
            f"{plan['corpus']}: the corpus changed while being encoded (its fingerprint differs "
            "from the validating pass); encode it again with --overwrite"
        )
    return encoded, reused


def _fingerprinted(documents: Iterable[tuple[str, str]], digest: Any) -> Iterator[tuple[str, str]]:
    for doc_id, text in documents:
        update_fingerprint(digest, doc_id, text)
        yield doc_id, text


def _check_rows(found: int, expected: int, index: int) -> None:
    if found != expected:
        raise SpladekitError(
            f"the corpus changed while being encoded: shard {index} has {found} documents, expected {expected}"
        )


def _check_output(output: Path, resume: bool, overwrite: bool, several: bool) -> None:
    """Before any work: what ``output`` may hold for this run (see ``spladekit encode --help``)."""
    if overwrite or not output.is_dir() or not any(output.iterdir()):
        # a file in the way is never accepted; --overwrite replaces only a folder spladekit wrote
        check_new_output(output, overwrite=overwrite, folder=True)
        return
    if not is_sharded(output):
        if resume:
            raise SpladekitError(
                f"{output}: not a sharded vectors folder (no {MANIFEST}, no shards/): nothing to "
                "--resume; choose another --output or pass --overwrite"
            )
        check_new_output(output, overwrite=False, folder=True)
    if resume or several:
        return
    if (output / MANIFEST).is_file():
        raise SpladekitError(
            f"{output}: output already exists (choose another path, pass --overwrite, or --resume "
            "to check it and redo what is missing)"
        )
    raise SpladekitError(
        f"{output}: an incomplete sharded vectors folder (an interrupted encode?): pass --resume "
        "to keep its complete shards and encode the rest, or --overwrite"
    )


def encode_to_shards(
    model: str,
    corpus: str | Path,
    output: str | Path,
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    resume: bool = False,
    overwrite: bool = False,
    shard: str | None = None,
    batch_size: int = 32,
    side: str = "document",
    max_length: int | None = None,
    max_active_dims: int | None = None,
    pooling: str = DEFAULT_POOLING,
    trust_remote_code: bool = False,
    device: str | None = "auto",
    show_progress: bool = True,
    bf16: bool = False,
    compiled: bool = False,
    precision: str = "fp32",
) -> ShardedEncoding:
    """Encode ``corpus`` (a JSONL file, BEIR folder, HF or ir_datasets id) with ``model`` into the sharded
    vectors folder ``output``; every check happens before the folder is created (see the module docstring).
    ``precision``: :func:`spladekit.model.loading.load_model`'s (``bf16=True``: its older spelling ``bf16``),
    recorded in the plan; resuming a folder with another precision is refused, naming both."""
    check_precision(precision)
    output = Path(output)
    check_side(side)
    check_max_active_dims(max_active_dims)
    if isinstance(shard_size, bool) or shard_size < 1:
        raise SpladekitError(f"--shard-size must be an integer >= 1, got {shard_size!r}")
    if resume and overwrite:
        raise SpladekitError("--resume keeps complete shards, --overwrite replaces the folder: give only one")
    selection = parse_shard(shard)
    resolve_device(device, local_rank=int(os.environ.get("LOCAL_RANK", "0")))  # a bad --device fails before any work
    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    if ranks > 1 and shard is not None:
        raise SpladekitError("--shard I/N and torchrun ranks both split the shards: use one of them")
    several = ranks > 1 or selection.count > 1
    if several and overwrite:
        raise SpladekitError(
            "--overwrite cannot be combined with --shard or torchrun ranks (several processes "
            "write the folder in place): remove the old folder first"
        )
    _check_output(output, resume, overwrite, several)
    created = not output.exists()
    with contextlib.ExitStack() as stack:
        if not several and not overwrite:  # one process writes the whole folder: a second one fails at once
            stack.enter_context(open_in_place(output))
        try:
            return _encode(
                model,
                corpus,
                output,
                shard_size,
                resume,
                overwrite,
                selection,
                ranks,
                batch_size,
                side,
                max_length,
                max_active_dims,
                pooling,
                trust_remote_code,
                device,
                show_progress,
                bf16=bf16,
                compiled=compiled,
                precision=precision,
            )
        except BaseException as error:  # ours, out of memory, an interrupt: what is complete stays, nothing else
            sealed = sealed_sidecars(output)
            if created and not several and not sealed:  # nothing complete: leave nothing behind
                shutil.rmtree(output, ignore_errors=True)
            elif sealed and isinstance(error, SpladekitError):
                raise SpladekitError(
                    f"{error} ({len(sealed)} complete shard(s) kept in {output}: fix the cause and rerun with --resume)"
                ) from None
            raise


def _encode(
    model: str,
    corpus: str | Path,
    output: Path,
    shard_size: int,
    resume: bool,
    overwrite: bool,
    selection: ShardSelection,
    ranks: int,
    batch_size: int,
    side: str,
    max_length: int | None,
    max_active_dims: int | None,
    pooling: str,
    trust_remote_code: bool,
    device: str | None,
    show_progress: bool,
    bf16: bool = False,
    compiled: bool = False,
    precision: str = "fp32",
) -> ShardedEncoding:
    scan = scan_corpus(corpus)
    processes = None
    if ranks > 1:
        from spladekit.common.distributed import setup

        processes = setup(device)
        selection = ShardSelection(processes.rank, processes.world_size)
    where = str(resolve_device(device) if processes is None else processes.device)
    encoder = load_model(
        model,
        trust_remote_code=trust_remote_code,
        pooling=pooling,
        device=where,
        bf16=bf16,
        compiled=compiled,
        precision=precision,
    )
    plan = build_plan(
        encoder, model, str(corpus), scan.fingerprint, scan.documents, side, max_length, max_active_dims, shard_size
    )
    if not overwrite and output.is_dir():
        recorded = existing_plan(output)
        if recorded is not None:
            check_plan(output, recorded[0], plan, recorded[1])
    count = shard_count(scan.documents, shard_size)
    result = ShardedEncoding(output, count, scan.documents)
    started = time.perf_counter()
    documents = iter_corpus(corpus)
    if overwrite:  # the old folder goes only once the new one is complete
        with open_output(output, folder=True, overwrite=True) as staged:
            if encoder.fold is not None:
                encoder.fold.save(staged.staging)
            result.encoded, result.reused = write_shards(
                staged.staging, encoder, documents, plan, selection, False, batch_size, show_progress
            )
            result.manifest = finalize(staged.staging, plan, count)
    else:
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise SpladekitError(f"{output}: cannot write here: {error.strerror or error}") from None
        mark_output(output)  # written in place: spladekit's own, so a later --overwrite may replace it
        if encoder.fold is not None:  # the dimensions' token strings, beside the vectors
            encoder.fold.save(output)
        result.encoded, result.reused = write_shards(
            output, encoder, documents, plan, selection, resume, batch_size, show_progress
        )
        if processes is not None:
            from spladekit.common.distributed import barrier, teardown

            barrier(processes)
            if processes.main:
                result.manifest = finalize(output, plan, count)
            teardown(processes)
        else:
            result.manifest = finalize(output, plan, count)
    result.seconds = round(time.perf_counter() - started, 3)
    return result
