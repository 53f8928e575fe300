"""`spladekit serve` under load (issue 40), side by side in one run, loopback only.

For each model (``--models``: ``tiny`` = ../shared/models/splade-tiny-msmarco, ``base`` = a BERT-base-shaped
BertForMaskedLM, random init, from ../shared/backbone-files/bert-base-uncased's config and tokenizer, its bias shifted
to a trained model's sparsity, about 200 active terms per MS MARCO passage: :func:`base_model`):

* **in-process** (the ceiling): ``model.encode(texts, batch_size=B)`` for B = each client count, over the same
  queries; texts/s, and the p50/p99 of one ``encode`` of a single query (what one client's request cannot beat);
* **spladekit serve** (its own process, ``python -m spladekit serve MODEL``): ``POST /embed_sparse`` with one query
  per request from 1, 8 and 32 concurrent clients (httpx async, keep-alive connections): requests/s, p50/p99;
* **plain endpoint** (its own process, this file with ``--plain-server``): FastAPI wrapping sentence-transformers'
  ``SparseEncoder`` in an ``async def`` route that encodes each request as it comes, one at a time (no batching);
  the same load.

Then an **overload** run against spladekit serve with ``--max-concurrent-requests 32`` and ten times as many
clients (320) sending back to back: the statuses (429s expected, no 5xx), and the server's resident memory sampled
through the run (before, the peak of each half of the run, after: a second half that peaks no higher than the
first is bounded memory, which a leak is not).

Every level is bounded twice: ``--seconds`` of wall time and ``--max-requests`` requests. By default the client and
the servers share this machine's cores. ``--server-cpus`` and ``--client-cpus`` pin them apart (Linux CPU affinity):
the servers and the in-process ceiling on the first set, the load generator on the second, so that a machine with
spare cores measures the server alone, as if the load came from another machine.

    python benchmarks/serve_load.py --models tiny,base --output docs/results/serve-load.json
    python benchmarks/serve_load.py --server-cpus 0,1 --client-cpus 2-7 --output serve-load-pinned.json

Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from fastapi import Request  # at module level: the routes' annotations are strings, resolved in these globals

SHARED = Path(__file__).resolve().parents[2] / "shared"
QUERIES = SHARED / "data" / "msmarco-passage-queries-qrels" / "queries-dev-small.jsonl"


# ---------------------------------------------------------------------------------------------- the plain endpoint
def plain_server(model: str, port: int) -> None:
    """FastAPI + sentence-transformers, one request encoded at a time (the route blocks the event loop)."""
    import torch
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from sentence_transformers import SparseEncoder

    encoder = SparseEncoder(model, device="cpu")
    app = FastAPI()

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({})

    @app.post("/embed_sparse")
    async def embed(request: Request) -> JSONResponse:
        body = await request.json()
        texts = [body["inputs"]] if isinstance(body["inputs"], str) else body["inputs"]
        with torch.inference_mode():
            vectors = encoder.encode(texts, convert_to_sparse_tensor=True).coalesce()
        indices, values = vectors.indices(), vectors.values()
        rows: list[list[dict]] = [[] for _ in texts]
        for row, column, value in zip(indices[0].tolist(), indices[1].tolist(), values.tolist()):
            rows[row].append({"index": column, "value": value})
        return JSONResponse(rows)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---------------------------------------------------------------------------------------------- helpers
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_queries(count: int) -> list[str]:
    texts = []
    with QUERIES.open() as lines:
        for line in lines:
            texts.append(json.loads(line)["text"])
            if len(texts) == count:
                break
    return texts


PASSAGES = SHARED / "data" / "trec-dl-2019-subset" / "corpus.jsonl"
BASE_ACTIVE = 200  # active terms per MS MARCO passage of the base model: a trained SPLADE's level, not random init's


def base_model(folder: Path, active: int = BASE_ACTIVE) -> tuple[Path, float]:
    """A BERT-base-shaped masked LM (random init) with bert-base-uncased's real tokenizer, saved in ``folder``, its
    vocabulary bias shifted so that 16 MS MARCO passages have ``active`` terms each on average (at random init
    every one of the 30,522 terms is active, and each response would carry all of them). A term is active where
    its max-pooled logit is above the shift, so the shift is the (``active`` × 16)-th largest max-pooled logit of
    one forward pass. Returns the folder and the shift."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, BertForMaskedLM

    files = SHARED / "backbone-files" / "bert-base-uncased"
    torch.manual_seed(0)
    model = BertForMaskedLM(AutoConfig.from_pretrained(files)).eval()
    tokenizer = AutoTokenizer.from_pretrained(files)
    with PASSAGES.open() as lines:
        passages = [json.loads(line)["text"] for line, _ in zip(lines, range(16))]
    batch = tokenizer(passages, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**batch).logits.masked_fill(~batch["attention_mask"].bool()[..., None], float("-inf"))
    pooled = logits.amax(dim=1).flatten()
    shift = float(pooled.topk(active * len(passages)).values[-1])
    with torch.no_grad():
        model.get_output_embeddings().bias -= shift
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, shift


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


RSS_SAMPLE_S = 0.2  # the overload run samples the server's resident set this often


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_set(text: str | None) -> set[int] | None:
    """``0,1`` or ``2-7`` (or both, comma-separated) as a set of CPU numbers; None for no pinning."""
    if not text:
        return None
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


SERVER_CPUS: set[int] | None = None  # where servers run (set by main from --server-cpus)
CLIENT_CPUS: set[int] | None = None  # where the load generator runs (--client-cpus)


@contextlib.contextmanager
def as_client() -> Iterator[None]:
    """Run the block (a load) on ``CLIENT_CPUS`` when set: this thread's affinity, and that of threads it starts."""
    if CLIENT_CPUS is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, CLIENT_CPUS)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def start(command: list[str], port: int, seconds: float = 300) -> subprocess.Popen:
    """Start a server (its output in a temporary log file: a pipe nobody reads would fill and stall it) on
    ``SERVER_CPUS`` when set, and wait until its /health answers."""
    import httpx

    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (open as long as the server runs)
    pin = None if SERVER_CPUS is None else (lambda: os.sched_setaffinity(0, SERVER_CPUS))
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, preexec_fn=pin)
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            log.seek(0)
            raise SystemExit(f"server did not start: {' '.join(command)}\n{log.read()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.25)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50_ms": None, "p99_ms": None}
    array = np.asarray(values) * 1000
    return {"p50_ms": round(float(np.percentile(array, 50)), 2), "p99_ms": round(float(np.percentile(array, 99)), 2)}


# ---------------------------------------------------------------------------------------------- measurements
def in_process(model_path: str, texts: list[str], sizes: list[int], seconds: float, pooling: str) -> dict:
    from spladekit.model.loading import load_model

    model = load_model(model_path, device="cpu", pooling=pooling)
    for _ in range(3):
        model.encode(texts[:32], batch_size=32, show_progress=False)
    single = []
    deadline = time.perf_counter() + seconds
    for text in texts:
        if time.perf_counter() > deadline and len(single) >= 20:
            break
        started = time.perf_counter()
        model.encode([text], batch_size=1, show_progress=False)
        single.append(time.perf_counter() - started)
    result = {"single_encode": percentiles(single) | {"n": len(single)}, "batches": {}}
    for size in sizes:
        done, started = 0, time.perf_counter()
        while done + size <= len(texts) and (time.perf_counter() - started < seconds or done < 4 * size):
            model.encode(texts[done : done + size], batch_size=size, show_progress=False)
            done += size
        wall = time.perf_counter() - started
        result["batches"][str(size)] = {"texts_per_s": round(done / wall, 2), "texts": done}
    return result


async def load(url: str, texts: list[str], clients: int, seconds: float, max_requests: int) -> dict:
    import httpx

    latencies: list[float] = []
    statuses: Counter = Counter()
    issued = 0
    # one connection per client, each its own httpx client: one shared pool of 32 connections spent the load
    # generator's core on the pool itself (a null model behind the server: 1,300 requests/s at 8 clients, 410 at 32)
    async with contextlib.AsyncExitStack() as stack:
        connections = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=300)) for _ in range(clients)
        ]
        started = time.perf_counter()
        deadline = started + seconds

        async def worker(client: httpx.AsyncClient) -> None:
            nonlocal issued
            while time.perf_counter() < deadline and issued < max_requests:
                text = texts[issued % len(texts)]
                issued += 1
                sent = time.perf_counter()
                try:
                    response = await client.post("/embed_sparse", json={"inputs": text})
                except httpx.HTTPError as error:
                    statuses[type(error).__name__] += 1
                    continue
                statuses[response.status_code] += 1
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - sent)

        await asyncio.gather(*(worker(client) for client in connections))
        wall = time.perf_counter() - started
    return {
        "clients": clients,
        "requests_per_s": round(len(latencies) / wall, 2),
        "ok": len(latencies),
        "statuses": {str(key): value for key, value in sorted(statuses.items(), key=str)},
        "wall_s": round(wall, 2),
    } | percentiles(latencies)


def run_load(url: str, texts: list[str], clients: int, seconds: float, max_requests: int) -> dict:
    with as_client():
        return asyncio.run(load(url, texts, clients, seconds, max_requests))


def load_levels(url: str, texts: list[str], levels: list[int], seconds: float, max_requests: int) -> dict:
    run_load(url, texts[:64], 4, 3, 64)  # warm-up
    return {str(clients): run_load(url, texts, clients, seconds, max_requests) for clients in levels}


def overload(model_path: str, texts: list[str], seconds: float, max_requests: int, pooling: str) -> dict:
    port = free_port()
    command = [sys.executable, "-m", "spladekit", "serve", model_path, "--port", str(port), "--device", "cpu"]
    command += ["--pooling", pooling, "--max-concurrent-requests", "32"]
    process = start(command, port)
    samples: list[tuple[float, float]] = []  # (seconds into the overload, RSS MiB)
    running = True

    def sample() -> None:
        started = time.perf_counter()
        while running:
            samples.append((time.perf_counter() - started, rss_mib(process.pid)))
            time.sleep(RSS_SAMPLE_S)

    try:
        url = f"http://127.0.0.1:{port}"
        run_load(url, texts[:64], 4, 3, 64)
        before = rss_mib(process.pid)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        result = run_load(url, texts, 320, seconds, max_requests)
        running = False
        sampler.join()
        after_load = rss_mib(process.pid)
        calm = run_load(url, texts, 1, 3, 50)  # it still answers afterwards
    finally:
        running = False
        stop(process)
    fives = sum(count for status, count in result["statuses"].items() if status.startswith("5"))
    # Flat means bounded: the second half of the overload peaks no higher than the first (a leak grows with requests).
    middle = seconds / 2
    halves = [[rss for at, rss in samples if (at < middle) == first] or [before] for first in (True, False)]
    return result | {
        "rss_mib_before": round(before, 1),
        "rss_mib_peak": round(max(max(half) for half in halves), 1),
        "rss_mib_peak_first_half": round(max(halves[0]), 1),
        "rss_mib_peak_second_half": round(max(halves[1]), 1),
        "rss_mib_after": round(after_load, 1),
        "rss_mib_every_second": [round(rss, 1) for _, rss in samples[:: round(1 / RSS_SAMPLE_S)]],
        "responses_5xx": fives,
        "after_overload_one_client": calm,
    }


# ---------------------------------------------------------------------------------------------- the run
def run_model(name: str, path: str, texts: list[str], args: argparse.Namespace) -> dict:
    levels = [int(value) for value in args.clients.split(",")]
    print(f"[{name}] in-process encode", flush=True)
    result: dict = {
        "model": name,
        "path": path,
        "in_process": in_process(path, texts, levels, args.seconds, args.pooling),
    }
    port = free_port()
    command = [sys.executable, "-m", "spladekit", "serve", path, "--port", str(port), "--device", "cpu"]
    process = start(command + ["--pooling", args.pooling], port)
    try:
        print(f"[{name}] spladekit serve", flush=True)
        result["spladekit_serve"] = load_levels(
            f"http://127.0.0.1:{port}", texts, levels, args.seconds, args.max_requests
        )
    finally:
        stop(process)
    port = free_port()
    process = start([sys.executable, __file__, "--plain-server", path, "--port", str(port)], port)
    try:
        print(f"[{name}] plain FastAPI + sentence-transformers", flush=True)
        result["plain_endpoint"] = load_levels(
            f"http://127.0.0.1:{port}", texts, levels, args.seconds, args.max_requests
        )
    finally:
        stop(process)
    return result


def table(results: list[dict]) -> str:
    lines = [
        "| model | clients | spladekit serve req/s (p50 / p99 ms) | in-process encode texts/s at that batch | "
        "plain FastAPI + ST req/s (p50 / p99 ms) | serve / in-process | serve / plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for clients, served in result["spladekit_serve"].items():
            ceiling = result["in_process"]["batches"][clients]["texts_per_s"]
            plain = result["plain_endpoint"][clients]
            rate = served["requests_per_s"]
            cells = [
                result["model"],
                clients,
                f"{rate} ({served['p50_ms']} / {served['p99_ms']})",
                ceiling,
                f"{plain['requests_per_s']} ({plain['p50_ms']} / {plain['p99_ms']})",
                f"{rate / ceiling:.2f}×",
                f"{rate / plain['requests_per_s']:.2f}×" if plain["requests_per_s"] else "—",
            ]
            lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
        single = result["in_process"]["single_encode"]
        one = f"p50 {single['p50_ms']} / p99 {single['p99_ms']} ms"
        lines.append(f"| {result['model']} | one in-process encode of one query | {one} | | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny,base", help="tiny, base, or both (comma-separated)")
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients per level (comma-separated)")
    parser.add_argument("--seconds", type=float, default=20.0, help="wall-time bound of each level")
    parser.add_argument("--max-requests", type=int, default=5000, help="request bound of each level")
    parser.add_argument("--queries", type=int, default=2000, help="MS MARCO dev queries cycled through")
    parser.add_argument("--pooling", default="auto", help="the served model's head (spladekit serve --pooling)")
    parser.add_argument("--no-overload", action="store_true", help="skip the overload run")
    parser.add_argument("--server-cpus", help="pin the servers and the in-process ceiling to these CPUs (0,1 or 0-1)")
    parser.add_argument("--client-cpus", help="pin the load generator to these CPUs")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    parser.add_argument("--plain-server", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_server:
        plain_server(args.plain_server, args.port)
        return

    global SERVER_CPUS, CLIENT_CPUS
    SERVER_CPUS, CLIENT_CPUS = cpu_set(args.server_cpus), cpu_set(args.client_cpus)
    if SERVER_CPUS is not None:  # before torch loads: its thread count follows this process's affinity
        os.sched_setaffinity(0, SERVER_CPUS)
    texts = read_queries(args.queries)
    results: list[dict] = []
    report: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": cpu_model(),
            "server_cpus": sorted(SERVER_CPUS) if SERVER_CPUS else "all",
            "client_cpus": sorted(CLIENT_CPUS) if CLIENT_CPUS else "all",
            "loadavg_at_start": os.getloadavg(),
        },
        "settings": vars(args) | {"output": str(args.output)},
        "results": results,
    }

    def save() -> None:  # after every part: a run cut short keeps what it measured
        report["machine"]["loadavg_at_end"] = os.getloadavg()
        if args.output:
            args.output.write_text(json.dumps(report, indent=2) + "\n")

    with tempfile.TemporaryDirectory(prefix="serve-load-") as scratch:
        for name in args.models.split(","):
            if name == "tiny":
                path = str(SHARED / "models" / "splade-tiny-msmarco")
            elif name == "base":
                folder, shift = base_model(Path(scratch) / "bert-base-random")
                path = str(folder)
                report["base_model"] = {"active_per_passage": BASE_ACTIVE, "bias_shift": round(shift, 4)}
            else:
                raise SystemExit(f"unknown model {name!r}: tiny or base")
            results.append(run_model(name, path, texts, args))
            print(table(results[-1:]), flush=True)
            save()
        if not args.no_overload:
            print("[tiny] overload: 320 clients, --max-concurrent-requests 32", flush=True)
            report["overload"] = overload(
                str(SHARED / "models" / "splade-tiny-msmarco"), texts, args.seconds, args.max_requests * 4, args.pooling
            )
            print(json.dumps(report["overload"], indent=2))
            save()
    print(table(results))


if __name__ == "__main__":
    main()
