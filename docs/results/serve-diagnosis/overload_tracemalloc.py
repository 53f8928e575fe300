"""Where the server's memory goes under overload: spladekit serve's app (splade-tiny, --max-concurrent-requests 32)
run by uvicorn in this process with tracemalloc on, 320 clients from another process; after a warm-up, the traced
Python allocations (numpy's included) that grew most between two snapshots, next to the resident set's growth.
Traced growth far below the resident set's says the growth is outside Python's allocations (torch, glibc arenas).

    python docs/results/serve-diagnosis/overload_tracemalloc.py [SECONDS]     # default 180; first snapshot at 60 s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "src")]

import serve_load as S  # noqa: E402

LOAD = """
import json, sys
sys.path[:0] = {paths!r}
import serve_load as S
print(json.dumps(S.run_load({url!r}, S.read_queries(2000), 320, {seconds}, 10**7)["statuses"]))
"""


def main() -> None:
    import uvicorn

    from spladekit.serve.app import create_app
    from spladekit.serve.encoding import load_served_model
    from spladekit.serve.settings import ServeSettings

    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 180.0
    tracemalloc.start(12)
    served = load_served_model(str(S.SHARED / "models" / "splade-tiny-msmarco"), device="cpu")
    app = create_app(served, None, ServeSettings(max_concurrent_requests=32))
    port = S.free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.1)
    url = f"http://127.0.0.1:{port}"
    S.run_load(url, S.read_queries(64), 4, 3, 64)
    paths = [str(ROOT / "benchmarks"), str(ROOT / "src")]
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD.format(paths=paths, url=url, seconds=seconds)], stdout=subprocess.PIPE, text=True
    )
    started = time.perf_counter()
    time.sleep(60)
    first, first_rss = tracemalloc.take_snapshot(), S.rss_mib(os.getpid())
    time.sleep(max(0.0, seconds - (time.perf_counter() - started) - 1))
    second, second_rss = tracemalloc.take_snapshot(), S.rss_mib(os.getpid())
    statuses = load.communicate()[0].strip()
    server.should_exit = True
    growth = second.compare_to(first, "traceback")
    traced = sum(stat.size_diff for stat in growth) / 2**20
    print(
        f"statuses {statuses}; from 60 s to {seconds:.0f} s: RSS {first_rss:.1f} -> {second_rss:.1f} MiB "
        f"(+{second_rss - first_rss:.1f}), traced Python allocations {traced:+.1f} MiB"
    )
    for stat in growth[:8]:
        print(f"{stat.size_diff / 2**20:+.2f} MiB in {stat.count_diff:+d} blocks, allocated at:")
        for line in stat.traceback.format()[-8:]:
            print("    " + line.strip())
    print(json.dumps({"rss_first": first_rss, "rss_second": second_rss, "traced_mib": traced}))


if __name__ == "__main__":
    main()
