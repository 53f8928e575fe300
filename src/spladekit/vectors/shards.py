"""The sharded vectors folder: numbered shards, each sealed by a checksummed sidecar, and a manifest.

Layout of a folder written by ``spladekit encode`` (``--shard-size N`` documents a shard)::

    OUT/manifest.json               written last: the folder is complete iff it exists and lists every shard
    OUT/shards/00000/vectors.npz    CSR float32 of documents 0 … N-1 (itself a single-file vectors folder)
    OUT/shards/00000/ids.json       their ids
    OUT/shards/00000/meta.json
    OUT/shards/00000/shard.json     sidecar: index, rows, nnz, sha256 of vectors.npz and ids.json, the plan
    OUT/shards/00001/…

Shard ``j`` holds documents ``j·N … (j+1)·N - 1`` in corpus order. Each shard folder is written through
:func:`spladekit.common.atomic.open_output` (staged as ``.00000.partial``, locked by ``.00000.lock``, renamed
when its sidecar is written): a ``kill -9`` mid-shard leaves a stale staging folder that no reader
looks at and the next writer removes, and a second writer of the same shard fails at once.

The *plan* — model and weights hash (``model_sha256``), corpus fingerprint (``corpus_sha256``), document
count, side, token limit, pooling, ``max_active_dims``, shard size, vocabulary size — is recorded in every
sidecar and in the manifest: a shard is reused (``--resume``, sibling processes) only when its plan
equals the current one and its checksums match; a different plan is an error, never a silent mix.

The manifest lists every shard's sidecar values in order plus ``meta`` (the same keys a single-file
folder's ``meta.json`` has); its content is a function of the sidecars only, so processes that finish
at the same moment write identical bytes (replaced atomically).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from spladekit.common.atomic import atomic_file, open_output
from spladekit.common.checksums import sha256_file
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import expect, read_json

log = logging.getLogger("spladekit")

# 10,000 documents a shard: ~10 MB of CSR at SPLADE's ~120 non-zeros (value + column index, 8 bytes) and
# ~25 MB of working memory while it is encoded (docs/benchmarks.md "Encoding memory"), so the default path's
# peak memory does not grow with the corpus; 885 shards for MS MARCO's 8.8M passages, and a killed run loses
# at most one shard's work (a few minutes on a GPU).
DEFAULT_SHARD_SIZE = 10_000
FORMAT = "spladekit-sharded-vectors"
VERSION = 1
MANIFEST = "manifest.json"
SHARDS = "shards"
SIDECAR = "shard.json"
CHECKED_FILES = ("vectors.npz", "ids.json")  # the files a sidecar checksums (meta.json is informational)
# Plan keys that name things rather than fix the vectors: recorded, not compared (the same model or
# corpus may be given by another path).
NAMES = ("model", "corpus")


def shard_count(documents: int, shard_size: int) -> int:
    return -(-documents // shard_size)


def shard_folder(folder: str | Path, index: int) -> Path:
    return Path(folder) / SHARDS / f"{index:05d}"


def is_sharded(folder: str | Path) -> bool:
    """Whether ``folder`` uses this layout (complete or not)."""
    return (Path(folder) / MANIFEST).is_file() or (Path(folder) / SHARDS).is_dir()


def plan_precision(plan: dict) -> str:
    """The precision a plan's vectors were encoded in: its ``precision`` (absent: fp32), or bf16 for a plan written
    before the setting had that name (``"bf16": true``)."""
    return plan.get("precision") or ("bf16" if plan.get("bf16") else "fp32")


def plan_differences(first: dict, second: dict) -> list[str]:
    """The plan keys whose values differ (names excepted: see ``NAMES``); ``precision`` as :func:`plan_precision`
    reads it, so folders that recorded ``"bf16": true`` stay resumable under bf16."""
    keys = (set(first) | set(second)) - set(NAMES) - {"bf16", "precision"}
    differing = [key for key in keys if first.get(key) != second.get(key)]
    if plan_precision(first) != plan_precision(second):
        differing.append("precision")
    return sorted(differing)


@contextlib.contextmanager
def writing_shard(folder: str | Path, index: int, overwrite: bool = False) -> Iterator[Path]:
    """Take shard ``index``'s lock (before its encoding: another process writing the same shard is an
    :class:`spladekit.common.atomic.OutputBusy` at once) and yield its staging folder; write ``vectors.npz``,
    ``ids.json`` and ``meta.json`` there (``Vectors.save``), then :func:`seal` it. When the block ends the
    shard is renamed into place (or, on an error, discarded)."""
    with open_output(shard_folder(folder, index), folder=True, overwrite=overwrite) as output:
        yield output.staging


def seal(staging: Path, index: int, plan: dict, rows: int, nnz: int, encode_seconds: float) -> dict:
    """Write the sidecar of a shard's staging folder: checksums of its files, ``rows``, ``nnz``, ``plan``."""
    sidecar = {
        "index": index,
        "rows": rows,
        "nnz": nnz,
        "encode_seconds": round(encode_seconds, 3),
        "sha256": {name: sha256_file(staging / name) for name in CHECKED_FILES},
        "plan": plan,
    }
    (staging / SIDECAR).write_text(json.dumps(sidecar, indent=2), encoding="utf-8")
    return sidecar


def read_sidecar(folder: str | Path, index: int) -> dict | None:
    """Shard ``index``'s sidecar, or None when the shard is not (completely) written."""
    path = shard_folder(folder, index) / SIDECAR
    if not path.is_file():
        return None
    sidecar = read_json(path, dict)
    for key, kind in (
        ("index", int),
        ("rows", int),
        ("nnz", int),
        ("sha256", dict),
        ("plan", dict),
        ("encode_seconds", (int, float)),
    ):
        expect(sidecar.get(key), kind, f"{key!r}", path)
    if sidecar["index"] != index:
        raise InputError(f"sidecar of shard {sidecar['index']} in the folder of shard {index}", path)
    return sidecar


def checksum_problem(folder: Path, sha256: dict) -> InputError | None:
    """None when every checked file of a shard folder has its recorded sha256; else the error naming the
    first file that does not."""
    for name in CHECKED_FILES:
        path = folder / name
        if not path.is_file():
            return InputError("missing shard file", path)
        if sha256.get(name) != sha256_file(path):
            return InputError("sha256 mismatch with the manifest: the file changed or is damaged", path)
    return None


def reusable_shard(folder: str | Path, index: int, plan: dict) -> bool:
    """Whether shard ``index`` is complete, of ``plan`` and intact (what ``--resume`` keeps). A shard of
    another plan is a :class:`SpladekitError`: the folder holds someone else's vectors. A damaged sidecar (not
    JSON, wrong keys) makes the shard not reusable: it is encoded again, never a dead end."""
    try:
        sidecar = read_sidecar(folder, index)
    except InputError as error:
        log.warning("shard %d: damaged sidecar (%s): encoding it again", index, error)
        return False
    if sidecar is None:
        return False
    check_plan(folder, sidecar["plan"], plan, shard_folder(folder, index) / SIDECAR)
    return checksum_problem(shard_folder(folder, index), sidecar["sha256"]) is None


def check_plan(folder: str | Path, recorded: dict, plan: dict, where: Path) -> None:
    differing = plan_differences(recorded, plan)
    if differing == ["precision"]:
        raise SpladekitError(
            f"{where}: {folder} was encoded with --precision {plan_precision(recorded)}, not "
            f"{plan_precision(plan)}: resume with --precision {plan_precision(recorded)}, or choose another --output, "
            "or --overwrite"
        )
    if differing:
        raise SpladekitError(
            f"{where}: {folder} was encoded with another model, corpus or settings "
            f"(differs in: {', '.join(differing)}); choose another --output, or --overwrite"
        )


def sealed_sidecars(folder: str | Path) -> list[Path]:
    """The sidecars of the shards sealed so far in ``folder``, in shard order."""
    shards = Path(folder) / SHARDS
    return sorted(shards.glob(f"*/{SIDECAR}")) if shards.is_dir() else []


def existing_plan(folder: str | Path) -> tuple[dict, Path] | None:
    """The plan recorded in a sharded folder (its manifest, else its first readable sealed shard), and where. A
    damaged manifest is passed over with a warning: the shards' sidecars say the same, and the manifest is
    written again from them once every shard is sealed (:func:`finalize`)."""
    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        try:
            return read_manifest(folder)["plan"], folder / MANIFEST
        except InputError as error:
            log.warning("damaged manifest (%s): the plan is read from the shards, the manifest written again", error)
    for sidecar in sealed_sidecars(folder):
        try:
            return expect(read_json(sidecar, dict).get("plan"), dict, "'plan'", sidecar), sidecar
        except InputError:  # a damaged sidecar: its shard is encoded again (reusable_shard); ask the next one
            continue
    return None


def finalize(folder: str | Path, plan: dict, shards: int) -> dict | None:
    """Write the manifest when all ``shards`` shards are sealed with ``plan``; return it (None: not yet).

    Idempotent: the content depends only on the sidecars, and it replaces any earlier manifest atomically."""
    folder = Path(folder)
    sidecars = []
    for index in range(shards):
        sidecar = read_sidecar(folder, index)
        if sidecar is None:
            return None
        check_plan(folder, sidecar["plan"], plan, shard_folder(folder, index) / SIDECAR)
        sidecars.append(sidecar)
    documents = sum(sidecar["rows"] for sidecar in sidecars)
    first = sidecars[0]["plan"]
    meta = {
        "model": first.get("model"),
        "corpus": first.get("corpus"),
        "pooling": plan.get("pooling"),
        "precision": plan_precision(plan),
        "side": plan.get("side"),
        "max_length": plan.get("max_length"),
        "max_active_dims": plan.get("max_active_dims"),
        "encode_seconds": round(sum(float(sidecar["encode_seconds"]) for sidecar in sidecars), 3),
        "vocab_size": plan.get("vocab_size"),
        "documents": documents,
        "avg_nnz": sum(sidecar["nnz"] for sidecar in sidecars) / max(documents, 1),
        "shard_size": plan.get("shard_size"),
        "shards": shards,
    }
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "plan": first,
        "meta": meta,
        "shards": [
            {
                "name": f"{SHARDS}/{index:05d}",
                "rows": sidecar["rows"],
                "nnz": sidecar["nnz"],
                "sha256": sidecar["sha256"],
            }
            for index, sidecar in enumerate(sidecars)
        ],
    }
    with atomic_file(folder / MANIFEST) as stream:
        stream.write(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(folder: str | Path) -> dict:
    """A complete sharded folder's manifest, checked: an incomplete folder (no manifest) or a damaged one is
    an :class:`InputError` naming the file."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        sealed = len(sealed_sidecars(folder))
        raise InputError(
            f"incomplete sharded vectors folder: no {MANIFEST} ({sealed} shards sealed); finish it with "
            "`spladekit encode … --resume` (same model, corpus and options)",
            folder,
        )
    manifest = read_json(path, dict)
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise InputError(f"not a {FORMAT} manifest of version {VERSION}", path)
    for key, kind in (("plan", dict), ("meta", dict), ("shards", list)):
        expect(manifest.get(key), kind, f"{key!r}", path)
    for index, entry in enumerate(manifest["shards"]):
        expect(entry, dict, f"shard {index}", path)
        if entry.get("name") != f"{SHARDS}/{index:05d}":
            raise InputError(f"shard {index} is named {entry.get('name')!r}, expected '{SHARDS}/{index:05d}'", path)
        for key, entry_kind in (("rows", int), ("nnz", int), ("sha256", dict)):
            expect(entry.get(key), entry_kind, f"shard {index} {key!r}", path)
    if not manifest["shards"]:
        raise InputError("the manifest lists no shards", path)
    return manifest


def verified_shard(folder: str | Path, entry: dict) -> Path:
    """The folder of a manifest entry after checking its files' sha256 (InputError naming the file)."""
    shard = Path(folder) / entry["name"]
    problem = checksum_problem(shard, entry["sha256"])
    if problem is not None:
        raise problem
    return shard
