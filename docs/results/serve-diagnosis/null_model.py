"""The server with a model that does nothing (every pass returns one fixed vector per input), to measure what HTTP,
validation, batching and the load generator cost alone: requests/s at 1, 8 and 32 clients, the server pinned to CPU 0
and the load generator (benchmarks/serve_load.py's) to CPU 1, and the load generator's CPU seconds.

    python docs/results/serve-diagnosis/null_model.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "src")]

import serve_load as S  # noqa: E402


def serve(port: int) -> None:
    import scipy.sparse as sp
    import uvicorn

    from spladekit.serve.app import create_app
    from spladekit.serve.encoding import load_served_model

    served = load_served_model(str(S.SHARED / "models" / "splade-tiny-msmarco"), device="cpu")
    row = served.encode(["hello world"], "document")
    served.encode = lambda texts, side, direction="right": sp.vstack([row] * len(texts), format="csr")
    uvicorn.run(create_app(served), host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    if len(sys.argv) > 1:
        serve(int(sys.argv[1]))
        return
    S.SERVER_CPUS, S.CLIENT_CPUS = {0}, {1}
    port = S.free_port()
    process = S.start([sys.executable, __file__, str(port)], port)
    try:
        texts = S.read_queries(2000)
        S.run_load(f"http://127.0.0.1:{port}", texts, 1, 2, 100)
        for clients in (1, 8, 32):
            before = time.process_time()
            result = S.run_load(f"http://127.0.0.1:{port}", texts, clients, 5, 5000)
            cpu = time.process_time() - before
            print(
                f"{clients} clients: {result['requests_per_s']} requests/s (p50 {result['p50_ms']} ms, p99 "
                f"{result['p99_ms']} ms); load generator {cpu:.2f} CPU s in {result['wall_s']} s"
            )
    finally:
        S.stop(process)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
