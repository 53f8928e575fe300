"""Index folders: the backend's files + ``manifest.json`` (format, version, parameters, sha256 per file).

A folder is written atomically. Reading checks, before anything is deserialized, that the manifest is
ours, that its version is supported and that every listed file has its recorded size and checksum;
any mismatch is a :class:`SpladekitError` naming the file. Document ids, when given, are stored in
``ids.json`` (row order). No pickle anywhere.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from spladekit.atomic import atomic_directory
from spladekit.data.lines import read_json
from spladekit.errors import InputError, SpladekitError

if TYPE_CHECKING:
    from spladekit.index.base import Searcher

FORMAT = "spladekit-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
IDS_FILE = "ids.json"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_index(path: str | Path, searcher: Searcher, meta: dict | None = None, overwrite: bool = False) -> Path:
    """Write ``searcher`` (and its ``doc_ids``, if any) as an index folder."""
    with atomic_directory(path, overwrite=overwrite) as staging:
        searcher.write_files(staging)
        if searcher.doc_ids is not None:
            if len(searcher.doc_ids) != searcher.n_docs:
                raise SpladekitError(f"{searcher.n_docs} documents but {len(searcher.doc_ids)} ids")
            (staging / IDS_FILE).write_text(json.dumps(searcher.doc_ids), encoding="utf-8")
        files = {
            item.name: {"sha256": sha256_file(item), "bytes": item.stat().st_size}
            for item in sorted(staging.iterdir())
        }
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "backend": searcher.name,
            "vocab_size": searcher.vocab_size,
            "n_docs": searcher.n_docs,
            "params": searcher.params,
            "files": files,
            "meta": meta or {},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return Path(path)


def read_manifest(path: str | Path) -> dict:
    """The verified manifest of an index folder (format, version, sizes and checksums checked)."""
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
        raise InputError(f"index format version {manifest.get('format_version')!r} is not supported "
                         f"(this spladekit reads version {FORMAT_VERSION}); rebuild the index", manifest_path)
    for name, expected in manifest.get("files", {}).items():
        item = path / name
        if not item.is_file():
            raise InputError("missing index file", item)
        if item.stat().st_size != expected["bytes"] or sha256_file(item) != expected["sha256"]:
            raise InputError("corrupt index file (size or sha256 differs from the manifest)", item)
    return manifest


def read_searcher(path: str | Path, backend: type[Searcher]) -> Searcher:
    """Load the index folder ``path`` with ``backend``, which must be the one named in its manifest."""
    path = Path(path)
    manifest = read_manifest(path)
    if manifest["backend"] != backend.name:
        raise SpladekitError(f"{path}: this is a {manifest['backend']!r} index, not {backend.name!r}")
    searcher = backend.read_files(path, manifest)
    ids_path = path / IDS_FILE
    searcher.doc_ids = read_json(ids_path, list) if ids_path.is_file() else None
    return searcher
