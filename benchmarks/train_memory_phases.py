"""Where a training step's peak memory is (issue 27): resident memory per phase of one step, spladekit against
sentence-transformers, on the inputs of ``benchmarks/real_inputs.py`` (BERT-base-shaped random weights, 8 MS MARCO
dev queries + 16 trec-dl-2019-subset passages, InfoNCE + FLOPS, AdamW).

Each configuration runs in its own process: a warm-up step (AdamW allocates its state there), then one measured
step whose phases — forward and loss, backward, optimizer step, zero_grad — each start by returning freed memory
to the system (glibc's ``malloc_trim``, so the resident memory is what is live) and resetting the kernel's
peak-RSS counter (``/proc/self/clear_refs`` = 5), and end by reading it (``VmHWM``): every phase reports the
resident memory it started at and the peak it reached. Reported in MB.

    python benchmarks/train_memory_phases.py --configs st,padded,packed,packed+checkpointing
"""

from __future__ import annotations

import argparse
import ctypes
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from real_inputs import Layout, add_inputs, make_model, read_texts, trainee

PHASES = ("forward", "backward", "optimizer", "zero_grad")


def status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field)) / 1024


def worker(config: str, model_folder: Path, args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    queries, passages = read_texts(args.queries, 4000), read_texts(args.passages, 4000)
    rng = random.Random(0)
    batches = [[(rng.choice(queries), rng.choice(passages), rng.choice(passages)) for _ in range(8)] for _ in range(2)]
    tool = "st" if config == "st" else "ours"
    every = 1 if config.endswith("+checkpointing") else 0
    model, loss_with_tokens = trainee(
        tool, model_folder, args.max_length, Layout(packing=config.startswith("packed"), every=every)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)

    def loss_of(batch) -> torch.Tensor:
        return loss_with_tokens(batch)[0]

    loss_of(batches[0]).backward()  # warm-up: AdamW's state is allocated in this first step
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    libc_trim = ctypes.CDLL("libc.so.6").malloc_trim
    libc_trim(0)
    report = {"config": config, "after_warm_up": status_mb("VmRSS")}
    loss = None

    def phase(name: str, action) -> None:
        libc_trim(0)
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        start = status_mb("VmRSS")
        action()
        report[name] = {"start": start, "peak": status_mb("VmHWM"), "end": status_mb("VmRSS")}

    def forward() -> None:
        nonlocal loss
        loss = loss_of(batches[1])

    phase("forward", forward)
    phase("backward", lambda: loss.backward())
    phase("optimizer", optimizer.step)
    phase("zero_grad", lambda: optimizer.zero_grad(set_to_none=True))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_inputs(parser)
    parser.add_argument(
        "--configs",
        default="st,padded,packed,packed+checkpointing",
        help="comma-separated: st, padded, packed, packed+checkpointing (activation checkpointing of every layer)",
    )
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.model, args)))
        return
    configs = args.configs.split(",")
    known = ("st", "padded", "packed", "packed+checkpointing")
    if set(configs) - set(known):
        expected = ", ".join(known)
        raise SystemExit(f"train_memory_phases.py: --configs: expected some of {expected}, got {args.configs!r}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="memory-phases-") as scratch:
        make_model(args.backbone_files, Path(scratch))
        for config in configs:
            command = [sys.executable, __file__, "--worker", config, "--model", scratch]
            for name in ("passages", "queries", "max_length", "threads"):
                command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
            result = subprocess.run(command, capture_output=True, text=True, check=True)
            rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    print("| config | after warm-up | " + " | ".join(f"{name}: start → peak" for name in PHASES) + " |")
    print("|---|---:|" + "---:|" * len(PHASES))
    for row in rows:
        cells = " | ".join(f"{row[name]['start']:,.0f} → {row[name]['peak']:,.0f}" for name in PHASES)
        print(f"| {row['config']} | {row['after_warm_up']:,.0f} | {cells} |")
    if args.output:
        args.output.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
