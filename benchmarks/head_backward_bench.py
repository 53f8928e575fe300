"""Time of the fused head's backward alone, at random init (every term active): the part of a training step
the sparse backward changed. Run it against two commits' ``src`` to compare them side by side:

    git worktree add --detach /tmp/before 8076acc
    for src in /tmp/before/src src; do PYTHONPATH=$src python benchmarks/head_backward_bench.py; done
"""

from __future__ import annotations

import argparse
import time

import torch

from spladekit.model.pooling import splade_max_pool_fused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="8x128,4x768", help="BATCHxHIDDEN, comma-separated")
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    try:
        cases = [tuple(int(part) for part in case.split("x")) for case in args.cases.split(",")]
    except ValueError:
        parser.error(f"--cases {args.cases!r}: expected BATCHxHIDDEN[,BATCHxHIDDEN...], e.g. 8x128,4x768")
    if any(len(case) != 2 or min(case) < 1 for case in cases) or min(args.length, args.vocab, args.repeats) < 1:
        parser.error("--cases need two positive numbers each; --length, --vocab and --repeats must be >= 1")
    torch.set_num_threads(args.threads)
    print(f"| case | active terms | backward s (best of {args.repeats}) |\n|---|---:|---:|")
    for batch, width in cases:
        generator = torch.Generator().manual_seed(0)
        hidden = torch.nn.functional.layer_norm(torch.randn(batch, args.length, width, generator=generator), (width,))
        weight = torch.randn(args.vocab, width, generator=generator) / 4
        bias = torch.randn(args.vocab, generator=generator) * 0.1
        mask = torch.ones(batch, args.length, dtype=torch.long)
        hidden.requires_grad_()
        weight.requires_grad_()
        best = float("inf")
        for _ in range(args.repeats):
            pooled = splade_max_pool_fused(hidden, weight, bias, mask)
            grad_output = torch.randn(pooled.shape, generator=generator)
            started = time.perf_counter()
            torch.autograd.grad(pooled, [hidden, weight], grad_output)
            best = min(best, time.perf_counter() - started)
        print(f"| B = {batch}, H = {width} | {(pooled > 0).float().mean().item():.3f} | {best:.3f} |")


if __name__ == "__main__":
    main()
