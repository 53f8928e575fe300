"""The overload run of benchmarks/serve_load.py (splade-tiny, 320 clients against --max-concurrent-requests 32), held
for longer, with the server's resident memory every second: does it level off (bounded) or keep growing (a leak)?

    python docs/results/serve-diagnosis/overload_memory.py [SECONDS]     # default 90
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "src")]

import serve_load as S  # noqa: E402


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90.0
    texts = S.read_queries(2000)
    result = S.overload(str(S.SHARED / "models" / "splade-tiny-msmarco"), texts, seconds, 10**6, "auto")
    series = result.pop("rss_mib_every_second")
    print(json.dumps(result | {"after_overload_one_client": "(run)"}, indent=1))
    for start in range(0, len(series), 10):
        print(f"RSS MiB, seconds {start}-{start + 9}: {series[start : start + 10]}")


if __name__ == "__main__":
    main()
