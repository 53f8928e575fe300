"""Forward and backward time of the SPLADE head alone (projection + log1p∘ReLU + max over tokens) at a training
step's document shape, each head side by side in one process: the part of a step the head's implementation changes,
with the backbone left out. Heads: ``sentence-transformers`` (the B × L × V logits, then ``SpladePooling("max")``),
and spladekit's poolings (``spladekit.model.encoder.POOLINGS``: ``fused`` with its sparse backward,
``fused-adaptive`` (dense GEMMs for dense vocabulary blocks), ``fused-dense`` (dense GEMMs for every block: the
dense backward's ceiling), ``triton``). Inputs are LayerNorm-ed random hidden states and a projection whose logits
are ~N(0, 1); ``--active`` shifts the bias so that a text has about that many active terms (``init``: no shift,
nearly every term active, as at initialisation; 2000 mid-training; 200 a trained model). ``--autocast`` runs every
head under bf16 autocast. CUDA times use ``torch.cuda.synchronize``; best of ``--repeats``.

    python benchmarks/head_split_bench.py --device cuda --texts 128 --length 256 --hidden 768 --vocab 30522 \\
        --active init,2000,200 --heads sentence-transformers,fused,fused-adaptive,fused-dense,triton --autocast
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def heads(names: list[str], projection: torch.nn.Linear, mask: torch.Tensor) -> dict:
    """Each head as a function of the hidden states to the B × V vectors."""
    from spladekit.model.encoder import POOLINGS
    from spladekit.model.pooling import splade_max_pool_fused

    poolings = dict(POOLINGS, **{"fused-dense": functools.partial(splade_max_pool_fused, dense_backward=0.0)})
    chosen = {}
    for name in names:
        if name == "sentence-transformers":
            from sentence_transformers.sparse_encoder.modules import SpladePooling

            pooling = SpladePooling(pooling_strategy="max")
            chosen[name] = lambda hidden, pooling=pooling: pooling(
                {"token_embeddings": projection(hidden), "attention_mask": mask}
            )["sentence_embedding"]
        elif name in poolings:
            chosen[name] = lambda hidden, pool=poolings[name]: pool(hidden, projection.weight, projection.bias, mask)
        else:
            known = ", ".join(["sentence-transformers", *poolings])
            raise SystemExit(f"head_split_bench.py: --heads: unknown head {name!r} ({known})")
    return chosen


def bias_shift(hidden: torch.Tensor, projection: torch.nn.Linear, mask: torch.Tensor, level: str) -> float:
    """The shift of the bias that leaves about ``level`` active terms per text (the quantile of the max logits)."""
    if level == "init":
        return 0.0
    from spladekit.model.pooling import splade_max_pool_fused

    with torch.no_grad():
        pooled_logits = splade_max_pool_fused(hidden, projection.weight, projection.bias, mask)
    top = torch.expm1(pooled_logits).float()  # max(logit, 0) per (text, term)
    active = min(int(level), top.shape[1])
    return float(top.kthvalue(top.shape[1] - active + 1, dim=1).values.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--active", default="init", help="comma-separated: init, or active terms per text")
    parser.add_argument("--heads", default="sentence-transformers,fused")
    parser.add_argument("--autocast", action="store_true", help="every head under bf16 autocast")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads")
    args = parser.parse_args()
    levels = args.active.split(",")
    if any(level != "init" and not (level.isdigit() and int(level) >= 1) for level in levels):
        raise SystemExit(f"head_split_bench.py: --active: expected init or positive counts, got {args.active!r}")
    if min(args.texts, args.length, args.hidden, args.vocab, args.repeats) < 1:
        raise SystemExit("head_split_bench.py: --texts, --length, --hidden, --vocab and --repeats must be >= 1")
    from spladekit.common.devices import autocast, resolve_device

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.texts, args.length, args.hidden, generator=generator)
    hidden = torch.nn.functional.layer_norm(hidden, (args.hidden,)).to(device).requires_grad_()
    projection = torch.nn.Linear(args.hidden, args.vocab).to(device)
    torch.nn.init.normal_(projection.weight, std=args.hidden**-0.5)  # logits ~ N(0, 1): every term active
    torch.nn.init.zeros_(projection.bias)
    mask = torch.ones(args.texts, args.length, dtype=torch.long, device=device)
    chosen = heads(args.heads.split(","), projection, mask)
    print(
        f"| active terms per text | head | forward s | backward s | × sentence-transformers (fwd + bwd) | "
        f"(texts {args.texts} × {args.length}, H {args.hidden}, V {args.vocab}, autocast {args.autocast}, {device}) |"
        "\n|---|---|---:|---:|---:|---|"
    )
    for level in levels:
        with torch.no_grad():
            projection.bias.zero_()  # each level's shift is measured from the unshifted logits
        shift = bias_shift(hidden, projection, mask, level)
        with torch.no_grad():
            projection.bias.fill_(-shift)
        anchor = None
        for name, head in chosen.items():
            forward = backward = float("inf")
            for _ in range(args.repeats + 1):
                synchronize(device)
                started = time.perf_counter()
                with autocast(device, args.autocast):
                    pooled = head(hidden)
                synchronize(device)
                middle = time.perf_counter()
                pooled.float().sum().backward()
                synchronize(device)
                forward, backward = min(forward, middle - started), min(backward, time.perf_counter() - middle)
                active = (pooled > 0).float().sum(1).mean().item()
                hidden.grad = projection.weight.grad = projection.bias.grad = None
                del pooled
            anchor = anchor or (forward + backward if name == "sentence-transformers" else None)
            ratio = f"{anchor / (forward + backward):.2f}" if anchor else "—"
            print(f"| {level} ({active:.0f}) | {name} | {forward:.4f} | {backward:.4f} | {ratio} | |", flush=True)


if __name__ == "__main__":
    main()
