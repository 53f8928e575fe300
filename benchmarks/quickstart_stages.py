"""Where one quickstart's time goes, per stage: wall seconds and CPU seconds (user + sys of the whole process,
``resource.getrusage``), and the peak resident set so far, printed when each stage is announced and at the end.

Runs ``spladekit.experiments.quickstart.quickstart`` in this process (options: the CLI's --backbone, --train-data,
--eval-data,
--max-length, --steps, same defaults; the output is always overwritten), so the stage boundaries are the
quickstart's own announcements. For an uncached first run point ``SPLADEKIT_CACHE`` at an empty folder. Run
from the repository root (the README's demo section has the numbers):

    SPLADEKIT_CACHE=$(mktemp -d) python benchmarks/quickstart_stages.py --output /tmp/qs --steps 100 --max-length 128
"""

from __future__ import annotations

import argparse
import json
import resource
import time


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--backbone")
    parser.add_argument("--train-data")
    parser.add_argument("--eval-data")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--max-length", type=int)
    args = parser.parse_args()

    from spladekit.experiments.quickstart import quickstart

    started, stages = (time.perf_counter(), cpu_seconds()), []

    def say(line: str) -> None:
        if line.startswith("["):  # a stage starts: the time so far, printed now so that a cut-short run tells too
            stages.append((line.split(":")[0].split(" (")[0], time.perf_counter(), cpu_seconds(), peak_mb()))
            print(
                f"-- {stages[-1][1] - started[0]:.1f} s wall, {stages[-1][2] - started[1]:.1f} s CPU, "
                f"peak {stages[-1][3]:.0f} MB",
                flush=True,
            )
        print(line, flush=True)

    summary = quickstart(
        args.backbone,
        args.train_data,
        args.output,
        steps=args.steps,
        overwrite=True,
        show_progress=True,
        say=say,
        eval_data=args.eval_data,
        max_length=args.max_length,
    )
    stages.append(("end", time.perf_counter(), cpu_seconds(), peak_mb()))
    print(summary["table"])
    previous = ("start", *started, 0.0)
    rows = []
    for stage in stages:
        rows.append(
            {
                "stage": previous[0],
                "wall_s": round(stage[1] - previous[1], 1),
                "cpu_s": round(stage[2] - previous[2], 1),
                "peak_mb_at_end": round(stage[3]),
            }
        )
        previous = stage
    rows.append(
        {
            "stage": "total",
            "wall_s": round(stages[-1][1] - started[0], 1),
            "cpu_s": round(stages[-1][2] - started[1], 1),
            "peak_mb_at_end": round(stages[-1][3]),
        }
    )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
