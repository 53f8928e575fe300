"""The fused SPLADE head alone at base size: seconds per batch by vocabulary chunk, against the naive head
(B × L × V logits) and one bare projection GEMM, on random LayerNorm-ed hidden states.

    python benchmarks/head_chunk_bench.py --hidden 768 --vocab 30522 --batch 8 --length 256

Best of ``--repeats`` interleaved runs (the least disturbed one on a shared machine), under
``torch.inference_mode``; GFLOP/s counts the 2·B·L·H·V projection.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from spladekit.pooling import splade_max_pool, splade_max_pool_fused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--chunks", default="512,2048,8192")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    width = args.hidden
    hidden = torch.nn.functional.layer_norm(torch.randn(args.batch, args.length, width, generator=generator), (width,))
    weight = 0.05 * torch.randn(args.vocab, width, generator=generator)
    bias = 0.1 * torch.randn(args.vocab, generator=generator) - 1
    mask = torch.ones(args.batch, args.length, dtype=torch.long)
    cases = {f"fused chunk {chunk}": (lambda chunk=chunk: splade_max_pool_fused(hidden, weight, bias, mask,
                                                                             chunk_size=chunk))
             for chunk in map(int, args.chunks.split(","))}
    cases["naive (B × L × V logits)"] = lambda: splade_max_pool(hidden, weight, bias, mask)
    cases["projection GEMM alone"] = lambda: hidden.view(-1, width) @ weight.T
    best = dict.fromkeys(cases, float("inf"))
    with torch.inference_mode():
        for _ in range(args.repeats):
            for name, case in cases.items():
                start = time.perf_counter()
                case()
                best[name] = min(best[name], time.perf_counter() - start)
    work = 2 * args.batch * args.length * width * args.vocab
    print("| head | seconds | GFLOP/s |\n|---|---:|---:|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.2f} | {work / seconds / 1e9:.1f} |")


if __name__ == "__main__":
    main()
