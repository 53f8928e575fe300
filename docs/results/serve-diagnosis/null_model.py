"""The server with a model that does nothing (every pass returns one fixed vector per input), to measure what HTTP,
validation, batching and the load generator cost alone: requests/s at 1, 8 and 32 clients, the server pinned to CPU 0
and the load generator to CPU 1, and the load generator's CPU seconds. Two load generators: benchmarks/serve_load.py's
(one httpx client, one connection, per simulated client) and the one it replaced (one httpx client whose pool holds
all the connections).

    python docs/results/serve-diagnosis/null_model.py
"""

from __future__ import annotations

import asyncio
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


async def shared_pool(url: str, texts: list[str], clients: int, seconds: float, max_requests: int) -> float:
    """The replaced load generator: one httpx.AsyncClient, a pool of ``clients`` connections; requests/s."""
    import asyncio

    import httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    done = issued = 0
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=300) as client:
        started = time.perf_counter()

        async def worker() -> None:
            nonlocal done, issued
            while time.perf_counter() - started < seconds and issued < max_requests:
                issued += 1
                response = await client.post("/embed_sparse", json={"inputs": texts[issued % len(texts)]})
                done += response.status_code == 200

        await asyncio.gather(*(worker() for _ in range(clients)))
        return done / (time.perf_counter() - started)


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
                f"{clients} clients, a connection each: {result['requests_per_s']} requests/s (p50 "
                f"{result['p50_ms']} ms, p99 {result['p99_ms']} ms); load generator {cpu:.2f} CPU s in "
                f"{result['wall_s']} s"
            )
            with S.as_client():
                before = time.process_time()
                rate = asyncio.run(shared_pool(f"http://127.0.0.1:{port}", texts, clients, 5, 5000))
                cpu = time.process_time() - before
            print(f"{clients} clients, one shared pool: {rate:.0f} requests/s; load generator {cpu:.2f} CPU s")
    finally:
        S.stop(process)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
