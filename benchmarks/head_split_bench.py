"""Forward and backward time of the SPLADE head alone (projection + log1p∘ReLU + max over tokens), fused vs
sentence-transformers' way (the B × L × V logits, then ``SpladePooling("max")``), at a training step's
document shape: the part of a step the pooling choice changes, with the backbone left out. Inputs are
LayerNorm-ed random hidden states (nearly every term active, as at initialisation); ``--autocast`` runs both
under bf16 autocast. CUDA times use ``torch.cuda.synchronize``.

    python benchmarks/head_split_bench.py --device cuda --texts 128 --length 256 --hidden 768 --vocab 50368 --autocast
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--autocast", action="store_true", help="both under bf16 autocast")
    args = parser.parse_args()
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    from spladekit.common.devices import autocast, resolve_device
    from spladekit.model.pooling import splade_max_pool_fused

    device = resolve_device(args.device)
    generator = torch.Generator().manual_seed(0)
    hidden = (
        torch.nn.functional.layer_norm(
            torch.randn(args.texts, args.length, args.hidden, generator=generator), (args.hidden,)
        )
        .to(device)
        .requires_grad_()
    )
    projection = torch.nn.Linear(args.hidden, args.vocab).to(device)
    torch.nn.init.normal_(projection.weight, std=args.hidden**-0.5)  # logits ~ N(0, 1): every term active
    mask = torch.ones(args.texts, args.length, dtype=torch.long, device=device)
    pooling = SpladePooling(pooling_strategy="max")
    heads = {
        "sentence-transformers": lambda: pooling({"token_embeddings": projection(hidden), "attention_mask": mask})[
            "sentence_embedding"
        ],
        "fused": lambda: splade_max_pool_fused(hidden, projection.weight, projection.bias, mask),
    }
    print(
        f"| head | forward s | backward s | active | (texts {args.texts} × {args.length}, H {args.hidden}, "
        f"V {args.vocab}, autocast {args.autocast}, {device}) |\n|---|---:|---:|---:|---|"
    )
    for name, head in heads.items():
        forward = backward = float("inf")
        for _ in range(args.repeats + 1):
            synchronize(device)
            started = time.perf_counter()
            with autocast(device, args.autocast):
                pooled = head()
            synchronize(device)
            middle = time.perf_counter()
            pooled.float().sum().backward()
            synchronize(device)
            forward, backward = min(forward, middle - started), min(backward, time.perf_counter() - middle)
            active = (pooled > 0).float().mean().item()
            hidden.grad = projection.weight.grad = projection.bias.grad = None
            del pooled
        print(f"| {name} | {forward:.4f} | {backward:.4f} | {active:.3f} | |")


if __name__ == "__main__":
    main()
