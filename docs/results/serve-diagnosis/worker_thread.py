"""One encode call from the main thread against the same call from a worker thread (as spladekit serve's encoding
thread runs it): best of 15 ms, splade-tiny, 1, 8 and 32 MS MARCO dev queries.

    python docs/results/serve-diagnosis/worker_thread.py
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "src")]

import serve_load as S  # noqa: E402


def best(call, repeats: int = 15) -> float:
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> None:
    from spladekit.model.loading import load_model

    model = load_model(S.SHARED / "models" / "splade-tiny-msmarco", device="cpu")
    texts = S.read_queries(64)
    worker = ThreadPoolExecutor(1)
    for batch in (1, 8, 32):

        def encode(batch: int = batch) -> None:
            model.encode_query(texts[:batch], batch_size=batch, show_progress=False)

        main_ms = best(encode)
        worker_ms = best(lambda: worker.submit(encode).result())
        print(f"{batch} queries: main thread {main_ms:.2f} ms, worker thread {worker_ms:.2f} ms")


if __name__ == "__main__":
    main()
