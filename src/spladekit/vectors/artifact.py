"""``Vectors``: the artifact between encoding and indexing — SPLADE vectors of a corpus or query set.

A vectors folder is one of two layouts, both read by :meth:`Vectors.load` and :meth:`Vectors.blocks`:

* single file: ``vectors.npz`` (scipy CSR, float32, one row per text in input order, one column per
  vocabulary id; written without pickle), ``ids.json`` (the row ids) and ``meta.json`` (model, corpus,
  max length, timings…), written atomically by :meth:`Vectors.save`;
* sharded (``spladekit encode``, :mod:`spladekit.vectors.shards`): ``manifest.json`` and ``shards/NNNNN/``, each
  shard a single-file folder whose files' sha256 the manifest records and the readers verify.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.common.atomic import atomic_directory
from spladekit.common.errors import InputError
from spladekit.common.lines import expect, read_id_list, read_json, reading
from spladekit.common.sparse import nnz_per_row
from spladekit.vectors.shards import MANIFEST, is_sharded, read_manifest, verified_shard

VECTORS_FILE = "vectors.npz"
IDS_FILE = "ids.json"
META_FILE = "meta.json"


@dataclass
class Vectors:
    """SPLADE vectors: ``matrix`` (CSR float32, n × V), ``ids`` (one per row), ``meta`` (provenance)."""

    matrix: sp.csr_matrix
    ids: list[str]
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.matrix.shape[0] != len(self.ids):
            raise ValueError(f"{self.matrix.shape[0]} vectors but {len(self.ids)} ids")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def vocab_size(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def avg_nnz(self) -> float:
        return float(nnz_per_row(self.matrix).mean()) if len(self) else 0.0

    def save(self, folder: str | Path, overwrite: bool = False) -> Path:
        """Write the vectors folder atomically (``overwrite``: replace an existing one)."""
        with atomic_directory(folder, overwrite=overwrite) as staging:
            sp.save_npz(staging / VECTORS_FILE, self.matrix.tocsr(), compressed=False)
            (staging / IDS_FILE).write_text(json.dumps(self.ids), encoding="utf-8")
            (staging / META_FILE).write_text(json.dumps(self.meta, indent=2), encoding="utf-8")
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path) -> Vectors:
        """Read a vectors folder (either layout) through the strict readers: a missing, truncated or garbled
        file, an id that is not a string a TREC line can carry, a meta value of the wrong type, a count
        mismatch, a shard whose sha256 differs from the manifest or an incomplete sharded folder is an
        :class:`InputError` naming the file."""
        folder = Path(folder)
        _check_folder(folder)
        if not is_sharded(folder):
            return cls._load_single(folder)
        manifest = read_manifest(folder)
        blocks = list(cls._shard_blocks(folder, manifest))
        matrix = sp.vstack([block.matrix for block in blocks], format="csr")
        return cls(
            matrix,
            [doc_id for block in blocks for doc_id in block.ids],
            _checked_meta(manifest["meta"], folder / MANIFEST),
        )

    @classmethod
    def blocks(cls, folder: str | Path) -> Iterator[Vectors]:
        """The vectors of a folder block by block, in row order, for readers that need not hold the whole
        corpus (index builders that stream): one block per shard (checksums verified as it is read), or one
        for a single-file folder. Each block's ``meta`` is the folder's."""
        folder = Path(folder)
        _check_folder(folder)
        if not is_sharded(folder):
            yield cls._load_single(folder)
            return
        yield from cls._shard_blocks(folder, read_manifest(folder))

    @classmethod
    def _shard_blocks(cls, folder: Path, manifest: dict) -> Iterator[Vectors]:
        meta = _checked_meta(manifest["meta"], folder / MANIFEST)
        vocab_size = None
        for entry in manifest["shards"]:
            shard = verified_shard(folder, entry)
            block = cls._load_single(shard)
            if len(block) != entry["rows"]:
                raise InputError(f"{len(block)} vectors but the manifest says {entry['rows']}", shard / VECTORS_FILE)
            if vocab_size is not None and block.vocab_size != vocab_size:
                raise InputError(
                    f"{block.vocab_size} dimensions, the previous shards {vocab_size}", shard / VECTORS_FILE
                )
            vocab_size = block.vocab_size
            yield cls(block.matrix, block.ids, meta)

    @classmethod
    def _load_single(cls, folder: Path) -> Vectors:
        for name in (VECTORS_FILE, IDS_FILE):
            if not (folder / name).is_file():
                raise InputError(f"missing {name}: not a spladekit vectors folder", folder)
        matrix = read_matrix(folder / VECTORS_FILE)
        ids = read_id_list(folder / IDS_FILE)
        meta = read_json(folder / META_FILE, dict) if (folder / META_FILE).is_file() else {}
        if matrix.shape[0] != len(ids):
            raise InputError(f"{matrix.shape[0]} vectors in {VECTORS_FILE} but {len(ids)} ids in {IDS_FILE}", folder)
        return cls(matrix, ids, _checked_meta(meta, folder / META_FILE))


def _check_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise InputError(
            "no such vectors folder" if not folder.exists() else "expected a vectors folder, got a file", folder
        )


def _checked_meta(meta: dict, path: Path) -> dict:
    for key, kinds in META_TYPES.items():
        if meta.get(key) is not None:
            expect(meta[key], kinds, f"{key!r}", path)
    return meta


# meta.json values that commands read (index, export, the evaluation cache), when present.
META_TYPES: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "max_length": int,
    "encode_seconds": float,
    "side": str,
    "max_active_dims": int,
}


def read_matrix(path: Path) -> sp.csr_matrix:
    """A ``vectors.npz``: a valid CSR matrix of real numbers (no pickle), as float32."""
    with reading(path, "sparse matrix (vectors.npz)"):
        matrix = sp.load_npz(path).tocsr()
        matrix.check_format(full_check=True)  # indices within the shape, indptr monotone and complete
    if matrix.dtype.kind not in "fiu":
        raise InputError(f"expected real-valued vectors, got dtype {matrix.dtype}", path)
    return matrix.astype(np.float32, copy=False)
