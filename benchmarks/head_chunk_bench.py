"""The fused SPLADE head alone: seconds per batch by vocabulary chunk, against the naive head (B × L × V
logits) and one bare projection GEMM, on random LayerNorm-ed hidden states.

    python benchmarks/head_chunk_bench.py --hidden 128,768 --batch 8,32 --chunks 256,512,1024,2048,4096,8192

Every (hidden width, batch) pair of the two lists is one case; all cases and chunks run in this one
process, interleaved, ``--repeats`` times, and the best time of each is reported (the least disturbed
one on a shared machine), under ``torch.inference_mode``. GFLOP/s counts the 2·B·L·H·V projection;
"block MB" is the logits block one chunk writes (chunk × B·L × 4 bytes), "× default" the time of the
chunk that ``spladekit.model.pooling.default_chunk_size`` picks for the case divided by this chunk's.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from spladekit.model.pooling import default_chunk_size, splade_max_pool, splade_max_pool_fused


def numbers(text: str) -> list[int]:
    return [int(value) for value in text.split(",")]


def case_runs(width: int, batch: int, args: argparse.Namespace) -> dict[str, Callable[[], object]]:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.nn.functional.layer_norm(torch.randn(batch, args.length, width, generator=generator), (width,))
    weight = 0.05 * torch.randn(args.vocab, width, generator=generator)
    bias = 0.1 * torch.randn(args.vocab, generator=generator) - 1
    mask = torch.ones(batch, args.length, dtype=torch.long)
    runs: dict[str, Callable[[], object]] = {
        f"chunk {chunk}": (lambda chunk=chunk: splade_max_pool_fused(hidden, weight, bias, mask, chunk_size=chunk))
        for chunk in args.chunks
    }
    if args.naive:
        runs["naive (B × L × V logits)"] = lambda: splade_max_pool(hidden, weight, bias, mask)
    runs["projection GEMM alone"] = lambda: hidden.view(-1, width) @ weight.T
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=numbers, default=[768], help="comma-separated hidden widths H")
    parser.add_argument("--batch", type=numbers, default=[8], help="comma-separated texts per batch B")
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--chunks", type=numbers, default=[512, 2048, 8192])
    parser.add_argument(
        "--naive",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the naive head (materializes B × L × V logits)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases = {
        (width, batch): case_runs(width, batch, args) for width, batch in itertools.product(args.hidden, args.batch)
    }
    best = {(case, name): float("inf") for case, runs in cases.items() for name in runs}
    with torch.inference_mode():
        for _ in range(args.repeats):
            for case, runs in cases.items():
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    best[case, name] = min(best[case, name], time.perf_counter() - start)
    print("| H | B | head | block MB | seconds | GFLOP/s | × default |\n|---:|---:|---|---:|---:|---:|---:|")
    for (width, batch), runs in cases.items():
        work = 2 * batch * args.length * width * args.vocab
        chosen = default_chunk_size(width, batch * args.length)
        default = best.get(((width, batch), f"chunk {chosen}"))
        for name in runs:
            seconds = best[(width, batch), name]
            block = f"{int(name.split()[1]) * batch * args.length * 4 / 2**20:.0f}" if name.startswith("chunk") else "–"
            ratio = f"{default / seconds:.2f}" if default else "–"
            mark = " (default)" if name == f"chunk {chosen}" else ""
            print(
                f"| {width} | {batch} | {name}{mark} | {block} | {seconds:.3f} | {work / seconds / 1e9:.1f} | {ratio} |"
            )


if __name__ == "__main__":
    main()
