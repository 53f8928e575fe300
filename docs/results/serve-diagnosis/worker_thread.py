"""One encode call from the main thread against the same call from a worker thread (as spladekit serve's encoding
thread runs it): best of 15 ms, splade-tiny, 1, 8 and 32 MS MARCO dev queries; the worker's time also measured
inside the thread (no hand-off), and in a thread that set torch's thread count before its first encode.

    python docs/results/serve-diagnosis/worker_thread.py
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "src")]

import torch  # noqa: E402

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
    pinned = ThreadPoolExecutor(1, initializer=torch.set_num_threads, initargs=(torch.get_num_threads(),))
    for batch in (1, 8, 32):

        def encode(batch: int = batch) -> None:
            model.encode_query(texts[:batch], batch_size=batch, show_progress=False)

        main_ms = best(encode)
        worker_ms = best(lambda: worker.submit(encode).result())
        # timed inside the thread: the encode alone, without the hand-off to and from it
        inside_ms = worker.submit(best, encode).result()
        pinned_ms = pinned.submit(best, encode).result()
        print(
            f"{batch} queries: main thread {main_ms:.2f} ms, worker thread {worker_ms:.2f} ms (timed inside it "
            f"{inside_ms:.2f} ms; a thread that set torch's thread count first {pinned_ms:.2f} ms)"
        )


if __name__ == "__main__":
    main()
