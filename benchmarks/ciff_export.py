"""CIFF export at growing corpus sizes: wall time, peak RSS, file size (docs/export.md, "CIFF").

Each size writes a synthetic single-file vectors folder (Zipf-distributed terms over BERT's 30,522 ids,
about ``--nnz`` weights per document, Gamma(2, 0.5) weights like SPLADE's) in one child process, then
exports it in another, which reports its own ``ru_maxrss`` (Linux carries the parent's resident size at
fork into the child's maximum, so this parent never holds a corpus). Terms are synthetic (``t00000``…), so
no tokenizer is loaded.

    python benchmarks/ciff_export.py --docs 50000 200000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

VOCAB = 30522

CHILD = """
import json, resource, sys, time
from spladekit.export.ciff import export_ciff
tokens = [f"t{{index:05d}}" for index in range({vocab})]
started = time.perf_counter()
payload = export_ciff(sys.argv[1], sys.argv[2], tokens=tokens, show_progress=False)
print(json.dumps(payload | {{"seconds": time.perf_counter() - started,
                             "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}}))
"""


def generate(docs: int, nnz: int, folder: str) -> None:
    from spladekit.vectors.artifact import Vectors

    matrix = synthetic_vectors(docs, nnz)
    Vectors(matrix, [f"doc{row}" for row in range(docs)], {}).save(folder)
    block_mb = (matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes) / 2**20
    print(json.dumps({"block_csr_mb": round(block_mb)}))


def synthetic_vectors(rows: int, nnz: int, seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, VOCAB + 1)
    terms = rng.choice(VOCAB, size=rows * nnz, p=p / p.sum())
    weights = rng.gamma(2.0, 0.5, size=rows * nnz).astype(np.float32)
    matrix = sp.csr_matrix((weights, (np.repeat(np.arange(rows), nnz), terms)), shape=(rows, VOCAB))
    matrix.sum_duplicates()
    return matrix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, nargs="+", default=[50_000, 200_000])
    parser.add_argument("--nnz", type=int, default=150, help="terms drawn per document (duplicates merged)")
    parser.add_argument("--generate", nargs=2, metavar=("DOCS", "FOLDER"), help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.generate:
        generate(int(args.generate[0]), args.nnz, args.generate[1])
        return

    rows = []
    for docs in args.docs:
        with tempfile.TemporaryDirectory(prefix="ciff-bench-") as scratch:
            made = subprocess.run(
                [sys.executable, __file__, "--nnz", str(args.nnz), "--generate", str(docs), f"{scratch}/vectors"],
                capture_output=True,
                text=True,
                check=True,
            )
            block_mb = json.loads(made.stdout.strip().splitlines()[-1])["block_csr_mb"]
            started = time.perf_counter()
            result = subprocess.run(
                [sys.executable, "-c", CHILD.format(vocab=VOCAB), f"{scratch}/vectors", f"{scratch}/out.ciff"],
                capture_output=True,
                text=True,
                check=True,
            )
            wall = time.perf_counter() - started
            payload = json.loads(result.stdout.strip().splitlines()[-1])
            size = (Path(scratch) / "out.ciff").stat().st_size
            rows.append(
                {
                    "docs": docs,
                    "postings": payload["postings"],
                    "export_seconds": round(payload["seconds"], 1),
                    "process_seconds": round(wall, 1),
                    "peak_rss_mb": payload["peak_rss_mb"],
                    "block_csr_mb": block_mb,
                    "ciff_mb": round(size / 2**20, 1),
                    "bytes_per_posting": round(size / payload["postings"], 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print("| docs | postings | export s | peak RSS MB | block CSR MB | CIFF MB | bytes/posting |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['docs']:,} | {row['postings']:,} | {row['export_seconds']} | {row['peak_rss_mb']} | "
            f"{row['block_csr_mb']} | {row['ciff_mb']} | {row['bytes_per_posting']} |"
        )


if __name__ == "__main__":
    main()
