"""Training-set memory at MS MARCO shape: per-process anonymous RSS and the time to the first training step of
`spladekit train` (1 step, splade-tiny, id_triplets + teacher scores, margin_mse), for 1 and 2 torchrun ranks.

The data is synthetic but shaped like MS MARCO's: passage ids 0…N−1 as in ``collection.tsv``, passage and query
texts drawn from the real MS MARCO passages of trec-dl-2019-subset and the real dev queries (so their lengths are
real; a `` #id`` suffix keeps every text distinct), one positive and ten negatives per query in ``id<TAB>pid<TAB>nid``
rows, and 100 teacher scores per query (the positive and 99 candidates, the negatives among them).

    python benchmarks/training_data_memory.py --work /tmp/tdm --passages 1000000 --pairs 10000000 \\
        --ranks 1 2 [--code OTHER_CHECKOUT/src]

``--code``: the ``src`` folder of the spladekit to measure (default: this checkout's), so one run can put two
versions side by side. Peak ``RssAnon`` (``/proc/PID/status``) is sampled every 0.2 s for every process of the run
(the torchrun launcher excluded); the time to the first step is when ``metrics.jsonl`` gets its first line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
MODEL = SHARED / "models" / "splade-tiny-msmarco"
PASSAGES = SHARED / "data" / "trec-dl-2019-subset" / "corpus.jsonl"
QUERIES = SHARED / "data" / "msmarco-passage-queries-qrels" / "queries-dev-small.jsonl"
CANDIDATES, NEGATIVES = 100, 10  # teacher-scored passages per query; negatives per query in the triplets


def _texts(path: Path) -> list[str]:
    return [json.loads(line)["text"].replace("\t", " ").replace("\n", " ") for line in path.open()]


def make_data(work: Path, passages: int, pairs: int) -> Path:
    """Write the synthetic collection, queries, id triplets and teacher scores (once per shape)."""
    folder = work / f"data-{passages}-{pairs}"
    if (folder / "done").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    real_passages, real_queries = _texts(PASSAGES), _texts(QUERIES)
    with (folder / "collection.tsv").open("w") as out:
        for pid in range(passages):
            out.write(f"{pid}\t{real_passages[pid % len(real_passages)]} #{pid}\n")
    queries = pairs // CANDIDATES
    with (folder / "queries.tsv").open("w") as out:
        for qid in range(queries):
            out.write(f"{qid}\t{real_queries[qid % len(real_queries)]} #{qid}\n")
    with (folder / "triplets.tsv").open("w") as triplets, (folder / "teacher.jsonl").open("w") as teacher:
        for qid in range(queries):
            scored = rng.sample(range(passages), CANDIDATES)
            for rank, pid in enumerate(scored):
                teacher.write(f'{{"qid": {qid}, "pid": {pid}, "score": {10.0 - rank * 0.1:.2f}}}\n')
            for nid in scored[1 : 1 + NEGATIVES]:
                triplets.write(f"{qid}\t{scored[0]}\t{nid}\n")
    (folder / "done").write_text("")
    return folder


def config(data: Path, output: Path) -> Path:
    path = output.parent / f"{output.name}.yaml"
    path.write_text(
        json.dumps(
            {
                "backbone": {"id": str(MODEL)},
                "data": {
                    "format": "id_triplets",
                    "path": str(data / "triplets.tsv"),
                    "queries": str(data / "queries.tsv"),
                    "collection": str(data / "collection.tsv"),
                    "teacher": str(data / "teacher.jsonl"),
                    "negatives": 1,
                },
                "loss": {"name": "margin_mse"},
                "optimization": {"steps": 1, "batch_size": 8, "warmup_steps": 0},
                "logging": {"every": 1, "checkpoint_every": 1000, "progress": False},
            }
        )
    )
    return path


def _anon_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        found += [int(child) for child in children]
        frontier += [int(child) for child in children]
    return found


def measure(data: Path, work: Path, ranks: int, code: Path, label: str) -> dict:
    output = work / f"run-{label}-{data.name}-{ranks}"
    subprocess.run(["rm", "-rf", str(output)], check=True)
    command = [sys.executable, "-m", "spladekit", "train", str(config(data, output)), "--output", str(output)]
    if ranks > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
        command += ["-m", "spladekit", "train", str(config(data, output)), "--output", str(output)]
    env = os.environ | {"PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks: dict[int, int] = {}
    first_step = None
    while process.poll() is None:
        workers = _descendants(process.pid) if ranks > 1 else [process.pid]
        for pid in workers:
            kb = _anon_kb(pid)
            if kb is not None:
                peaks[pid] = max(peaks.get(pid, 0), kb)
        metrics = output / "metrics.jsonl"
        if first_step is None and metrics.is_file() and metrics.stat().st_size:
            first_step = round(time.perf_counter() - started, 1)
        time.sleep(0.2)
    error = process.stderr.read() if process.stderr else ""
    if process.returncode != 0:
        raise SystemExit(f"{label}: spladekit train failed ({process.returncode}):\n{error[-2000:]}")
    per_rank = sorted(peaks.values(), reverse=True)[:ranks]
    return {
        "code": label,
        "data": data.name,
        "ranks": ranks,
        "peak_anon_mb_per_rank": [round(kb / 1024) for kb in per_rank],
        "seconds_to_first_step": first_step,
        "seconds_total": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="folder for the data and the runs")
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=10_000_000, help="teacher (qid, pid) pairs (100 per query)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--code", type=Path, default=ROOT / "src", help="the spladekit src folder to measure")
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--cold", action="store_true", help="empty the cache before each run (the store is built)")
    args = parser.parse_args()
    cache = args.work / "cache"
    os.environ["SPLADEKIT_CACHE"] = str(cache)
    data = make_data(args.work, args.passages, args.pairs)
    for ranks in args.ranks:
        if args.cold:
            subprocess.run(["rm", "-rf", str(cache)], check=True)
        result = measure(data, args.work, ranks, args.code, args.label) | {"cache": "cold" if args.cold else "as found"}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
