"""``Vectors``: the artifact between encoding and indexing — SPLADE vectors of a corpus or query set.

A vectors folder holds ``vectors.npz`` (scipy CSR, float32, one row per text in input order, one column
per vocabulary id; written without pickle), ``ids.json`` (the row ids) and ``meta.json`` (model, corpus,
max length, timings…). It is written atomically: complete under its final name, or absent.
"""

from __future__ import annotations

import json
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from spladekit.atomic import atomic_directory
from spladekit.errors import InputError

VECTORS_FILE = "vectors.npz"
IDS_FILE = "ids.json"
META_FILE = "meta.json"


def dense_to_csr(batch: torch.Tensor) -> sp.csr_matrix:
    """B × V torch tensor → float32 CSR, keeping only strictly positive entries' structure."""
    with warnings.catch_warnings():  # "sparse CSR support is in beta": conversion only, which is stable
        warnings.simplefilter("ignore", UserWarning)
        sparse = batch.detach().float().cpu().to_sparse_csr()
    return sp.csr_matrix(
        (sparse.values().numpy(), sparse.col_indices().numpy(), sparse.crow_indices().numpy()),
        shape=tuple(batch.shape),
        dtype=np.float32,
    )


def nnz_per_row(matrix: sp.csr_matrix) -> np.ndarray:
    """Stored entries per row (SPLADE stores only positive weights, so: active terms per text)."""
    return np.diff(matrix.indptr)


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
        """Read a vectors folder; a missing or unreadable file is an :class:`InputError` naming it."""
        folder = Path(folder)
        for name in (VECTORS_FILE, IDS_FILE):
            if not (folder / name).is_file():
                raise InputError(f"missing {name}: not a spladekit vectors folder", folder)
        try:
            matrix = sp.load_npz(folder / VECTORS_FILE).tocsr()
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
            raise InputError(f"unreadable sparse matrix ({error})", folder / VECTORS_FILE) from None
        ids = _read_json(folder / IDS_FILE)
        meta = _read_json(folder / META_FILE) if (folder / META_FILE).is_file() else {}
        if not isinstance(ids, list) or not all(isinstance(item, str) for item in ids):
            raise InputError("expected a JSON list of id strings", folder / IDS_FILE)
        if not isinstance(meta, dict):
            raise InputError("expected a JSON object", folder / META_FILE)
        if matrix.shape[0] != len(ids):
            raise InputError(f"{matrix.shape[0]} vectors but {len(ids)} ids", folder)
        return cls(matrix.astype(np.float32, copy=False), ids, meta)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"not valid JSON ({error})", path) from None
