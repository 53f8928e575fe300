"""The checksum of a file, streamed: a file of any size is hashed in 1 MiB blocks, never read into memory whole.
One implementation for every record that seals files (the vectors' shards, index folders, the training-data store)."""

from __future__ import annotations

import hashlib
from pathlib import Path

_BLOCK = 1 << 20


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
