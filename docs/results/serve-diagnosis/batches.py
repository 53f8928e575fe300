"""spladekit serve under 1, 8 and 32 clients (benchmarks/serve_load.py's load generator, shared cores), with what
/metrics says about its forward passes: requests/s, p50/p99, passes, mean inputs per pass, mean seconds of a pass.
Extra arguments go to `spladekit serve`; the server inherits the environment (for instance OMP_WAIT_POLICY).

    python docs/results/serve-diagnosis/batches.py                       # the defaults
    python docs/results/serve-diagnosis/batches.py --batch-wait-ms 2     # the old wait
    OMP_WAIT_POLICY=PASSIVE python docs/results/serve-diagnosis/batches.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "src")]

import serve_load as S  # noqa: E402


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def main() -> None:
    import httpx

    model = str(S.SHARED / "models" / "splade-tiny-msmarco")
    port = S.free_port()
    command = [sys.executable, "-m", "spladekit", "serve", model, "--port", str(port), "--device", "cpu"]
    process = S.start(command + sys.argv[1:], port)
    url = f"http://127.0.0.1:{port}"
    try:
        texts = S.read_queries(2000)
        S.run_load(url, texts, 4, 3, 64)
        for clients in (1, 8, 32):
            before = httpx.get(url + "/metrics").text
            result = S.run_load(url, texts, clients, 10, 5000)
            after = httpx.get(url + "/metrics").text

            def delta(name: str) -> float:
                return metric(after, name) - metric(before, name)

            passes = delta("te_batch_next_size_count")
            inputs = delta("te_batch_next_size_sum") / max(passes, 1)
            pass_ms = 1000 * delta("te_request_inference_duration_sum") / max(delta("te_request_inference_duration_count"), 1)
            print(
                f"{clients} clients: {result['requests_per_s']} requests/s (p50 {result['p50_ms']} / p99 "
                f"{result['p99_ms']} ms); {passes:.0f} passes, {inputs:.1f} inputs a pass, {pass_ms:.1f} ms a pass"
            )
    finally:
        S.stop(process)


if __name__ == "__main__":
    main()
