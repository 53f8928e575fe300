"""Index folders: the backend's files + ``manifest.json`` (format, version, parameters, sha256 per file).

A folder is written atomically. Reading checks, before anything is deserialized, that the manifest is
ours, that its version is supported, that every field has its type, that every file the backend reads
is listed and that every listed file has its recorded size and checksum; any mismatch is an
:class:`InputError` naming the file. Document ids, when given, are stored in
``ids.json`` (row order). No pickle anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

from spladekit.common.checksums import sha256_file
from spladekit.common.errors import InputError
from spladekit.common.lines import describe, expect

FORMAT = "spladekit-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
IDS_FILE = "ids.json"


def write_manifest(staging: Path, backend: str, vocab_size: int, n_docs: int, params: dict, meta: dict | None) -> None:
    """``manifest.json`` for the files already in ``staging``: their sizes and sha256, the backend and its
    parameters."""
    files = {
        item.name: {"sha256": sha256_file(item), "bytes": item.stat().st_size} for item in sorted(staging.iterdir())
    }
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "backend": backend,
        "vocab_size": vocab_size,
        "n_docs": n_docs,
        "params": params,
        "files": files,
        "meta": meta or {},
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def read_manifest(path: str | Path, verify_files: bool = True) -> dict:
    """The verified manifest of an index folder: format and version, the type of every field, and the
    size and sha256 of every listed file (``ids.json``, when present, must be listed). ``verify_files=False``
    stops before hashing the files: enough to learn the backend and its parameters (what opening the index
    needs installed) before reading gigabytes; the loading backend verifies them."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not path.is_dir() or not manifest_path.is_file():
        raise InputError(f"not a spladekit index folder (no {MANIFEST})", path)
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"unreadable manifest ({error})", manifest_path) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"not a spladekit index manifest (format is not {FORMAT!r})", manifest_path)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise InputError(
            f"index format version {manifest.get('format_version')!r} is not supported "
            f"(this spladekit reads version {FORMAT_VERSION}); rebuild the index",
            manifest_path,
        )
    for key, kinds in MANIFEST_TYPES.items():
        if key not in manifest:
            raise InputError(f"no {key!r} in the manifest", manifest_path)
        expect(manifest[key], kinds, f"{key!r}", manifest_path)
    for key in ("vocab_size", "n_docs"):
        if manifest[key] < 0:
            raise InputError(f"{key!r} must not be negative, got {manifest[key]}", manifest_path)
    files = manifest["files"]
    for name, expected in files.items():
        _check_entry(name, expected, manifest_path)
    if (path / IDS_FILE).is_file() and IDS_FILE not in files:
        raise InputError(f"{IDS_FILE} is not listed in the manifest, so it cannot be verified", manifest_path)
    if not verify_files:
        return manifest
    for name, expected in files.items():
        item = path / name
        if not item.is_file():
            raise InputError("missing index file", item)
        if item.stat().st_size != expected["bytes"] or sha256_file(item) != expected["sha256"]:
            raise InputError("corrupt index file (size or sha256 differs from the manifest)", item)
    return manifest


# The manifest's fields and their JSON types (checked before any is used).
MANIFEST_TYPES: dict[str, type | tuple[type, ...]] = {
    "backend": str,
    "vocab_size": int,
    "n_docs": int,
    "params": dict,
    "files": dict,
    "meta": dict,
}


def _check_entry(name: str, expected: object, manifest_path: Path) -> None:
    """One ``files`` entry: a plain file name of the folder → ``{"sha256": 64 hex digits, "bytes": n >= 0}``."""
    if not name or name in (".", "..", MANIFEST) or "/" in name or "\\" in name:
        raise InputError(f"files: {name!r} is not a file name of the index folder", manifest_path)
    expect(expected, dict, f"files[{name!r}]", manifest_path)
    assert isinstance(expected, dict)  # for mypy: expect() raised otherwise
    digest, size = expected.get("sha256"), expected.get("bytes")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise InputError(
            f"files[{name!r}].sha256 must be 64 lowercase hex digits, got {describe(digest)}", manifest_path
        )
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InputError(f"files[{name!r}].bytes must be a non-negative integer, got {describe(size)}", manifest_path)
