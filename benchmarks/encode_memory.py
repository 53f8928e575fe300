"""Peak resident memory of ``spladekit encode`` against the corpus size: 5k vs 50k synthetic documents.

Each encode runs as its own process (``python -m spladekit encode``); its peak RSS is the ``ru_maxrss``
that ``os.wait4`` returns for that child (torch's CPU allocations included). The model is the tests' tiny
random-init BERT (``tests/tiny_models.py``: hidden 32, vocabulary of 158 word pieces), so the run takes
minutes on a CPU; the documents are 20–60 random words of its vocabulary (seeded). Shard sizes: the
command's default (``spladekit.vectors.shards.DEFAULT_SHARD_SIZE``, 10,000) and a size at least the largest corpus
(``--whole``, default 100,000: one shard holds the whole corpus, as before sharding).

    python benchmarks/encode_memory.py                  # prints one JSON line per run and the ratios
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def write_corpus(path: Path, documents: int, seed: int = 0) -> Path:
    from tiny_models import WORDS

    generator = random.Random(seed)
    with path.open("w") as stream:
        for number in range(documents):
            words = generator.choices(WORDS, k=generator.randint(20, 60))
            stream.write(json.dumps({"_id": f"doc{number}", "text": " ".join(words)}) + "\n")
    return path


def peak_rss_mb(command: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of one child process; it must succeed."""
    started = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{errors.decode()[-2000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000, 50_000])
    parser.add_argument("--whole", type=int, default=100_000, help="a shard size holding the whole corpus")
    arguments = parser.parse_args()
    from spladekit.vectors.shards import DEFAULT_SHARD_SIZE
    from tiny_models import build_tiny_model

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        model = build_tiny_model("bert", root / "model")
        peaks: dict[tuple[int, int], float] = {}
        for shard_size in (DEFAULT_SHARD_SIZE, arguments.whole):
            for size in arguments.sizes:
                corpus = write_corpus(root / f"corpus-{size}.jsonl", size)
                output = root / f"vectors-{size}-{shard_size}"
                command = [
                    sys.executable,
                    "-m",
                    "spladekit",
                    "encode",
                    str(model),
                    "--corpus",
                    str(corpus),
                    "--output",
                    str(output),
                    "--shard-size",
                    str(shard_size),
                ]
                peak, seconds = peak_rss_mb(command)
                peaks[size, shard_size] = peak
                print(
                    json.dumps(
                        {
                            "documents": size,
                            "shard_size": shard_size,
                            "peak_rss_mb": round(peak),
                            "seconds": round(seconds, 1),
                        }
                    ),
                    flush=True,
                )
        small, large = min(arguments.sizes), max(arguments.sizes)
        for shard_size in (DEFAULT_SHARD_SIZE, arguments.whole):
            print(
                json.dumps(
                    {
                        "shard_size": shard_size,
                        f"peak_{large}_over_{small}": round(peaks[large, shard_size] / peaks[small, shard_size], 3),
                    }
                )
            )


if __name__ == "__main__":
    main()
