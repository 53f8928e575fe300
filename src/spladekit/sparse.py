"""Plain-data helpers for SPLADE vectors stored as scipy CSR matrices (float32, n × V)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from spladekit.errors import InputError
from spladekit.files import atomic_directory

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
    return np.diff(matrix.indptr)


def save_vectors(directory: str | Path, vectors: sp.csr_matrix, ids: list[str], meta: dict, overwrite: bool = False):
    """Write ``vectors.npz`` (scipy CSR, no pickle), ``ids.json`` (row order) and ``meta.json`` atomically."""
    if vectors.shape[0] != len(ids):
        raise ValueError(f"{vectors.shape[0]} vectors but {len(ids)} ids")
    with atomic_directory(directory, overwrite=overwrite) as staging:
        sp.save_npz(staging / VECTORS_FILE, vectors.tocsr(), compressed=False)
        (staging / IDS_FILE).write_text(json.dumps(ids), encoding="utf-8")
        (staging / META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")


def load_vectors(directory: str | Path) -> tuple[sp.csr_matrix, list[str], dict]:
    """Inverse of :func:`save_vectors`."""
    directory = Path(directory)
    for name in (VECTORS_FILE, IDS_FILE):
        if not (directory / name).is_file():
            raise InputError(f"missing {name}: not a spladekit vectors folder", directory)
    vectors = sp.load_npz(directory / VECTORS_FILE).tocsr()
    ids = json.loads((directory / IDS_FILE).read_text(encoding="utf-8"))
    meta_path = directory / META_FILE
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    if vectors.shape[0] != len(ids):
        raise InputError(f"{vectors.shape[0]} vectors but {len(ids)} ids", directory)
    return vectors, ids, meta
