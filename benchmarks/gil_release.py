"""Do the kernels of exact search release the GIL? (spladekit.index.exact runs queries on threads.)

A pure-Python thread counts while the main thread runs one long call of each kernel; its progress during the
call, relative to its progress while the main thread sleeps, is ~0 when the call holds the GIL and stays
well above 0 when it does not (below 1 on a loaded machine: the two threads then share the cores).

    python benchmarks/gil_release.py
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
from scipy.sparse._sparsetools import csc_matvec


def spinner_progress(call: Callable[[], object]) -> float:
    """Increments per second of a pure-Python counting thread while ``call()`` runs."""
    stop, count = threading.Event(), [0]

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=spin)
    thread.start()
    time.sleep(0.2)
    before, started = count[0], time.perf_counter()
    call()
    rate = (count[0] - before) / (time.perf_counter() - started)
    stop.set()
    thread.join()
    return rate


def main() -> None:
    n_docs, postings = 1_000_000, 60_000_000
    rng = np.random.default_rng(0)
    rows = np.sort(rng.integers(0, n_docs, postings)).astype(np.int32)  # one long posting list
    weights, scores = rng.random(postings).astype(np.float32), np.zeros(n_docs, np.float32)
    big = rng.random(30_000_000).astype(np.float32)
    kernels: dict[str, Callable[[], object]] = {
        "csc_matvec (scatter-add of a posting list)": lambda: csc_matvec(
            n_docs, 1, np.array([0, postings], np.int32), rows, weights, np.ones(1, np.float32), scores
        ),
        "np.partition (k-th score)": lambda: np.partition(big, len(big) - 10),
        "np.flatnonzero(scores >= kth)": lambda: np.flatnonzero(big >= 0.5),
        "accumulator.fill(0)": lambda: big.fill(0),
        "a pure-Python loop (holds the GIL: the control)": lambda: sum(range(10_000_000)),
    }
    idle = spinner_progress(lambda: time.sleep(1.0))
    print("| kernel | Python thread's progress during the call (1 = as during sleep) |\n|---|---:|")
    for name, call in kernels.items():
        print(f"| {name} | {spinner_progress(call) / idle:.2f} |")


if __name__ == "__main__":
    main()
