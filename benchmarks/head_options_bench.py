"""The head options' cost in the fused head: ``position_top_k`` and ``vocab_fold`` against the plain fused head, side by
side in one process (time), and each alone in a subprocess (peak memory), at BERT-base size.

Inputs as in head_split_bench.py: LayerNorm-ed random hidden states (texts × length × 768), a projection onto BERT's
30,522 terms whose logits are ~N(0, 1), the bias shifted so that a text keeps about ``--active`` terms (a trained
model's sparsity). The fold is BERT-base-uncased's real ``space`` fold (``##`` pieces onto their words:
../shared/backbone-files). Times: forward alone (encoding) and forward + backward (training), best of
``--repeats`` alternating rounds. Memory: each configuration's forward + backward in a fresh process, its peak RSS
(``VmHWM``) minus that of a process that only builds the inputs.

    .venv/bin/python benchmarks/head_options_bench.py --texts 8 --length 256 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
SHARED = Path(__file__).resolve().parents[2] / "shared"
CONFIGS = {
    "fused (plain)": {},
    "fused + position_top_k=12": {"position_top_k": 12},
    "fused + vocab_fold=space": {"fold": True},
    "fused + both": {"position_top_k": 12, "fold": True},
    "naive + position_top_k=12 (B×L×V logits)": {"position_top_k": 12, "naive": True},
}


def inputs(
    texts: int, length: int, active: int, shift: float | None = None
) -> tuple[torch.Tensor, torch.nn.Linear, torch.Tensor]:
    """The hidden states, the projection (its bias shifted so that a text keeps about ``active`` terms; ``shift``:
    that shift, already measured) and the mask."""
    from spladekit.model.pooling import splade_max_pool_fused

    generator = torch.Generator().manual_seed(0)
    hidden = torch.nn.functional.layer_norm(torch.randn(texts, length, 768, generator=generator), (768,))
    projection = torch.nn.Linear(768, 30522)
    torch.nn.init.normal_(projection.weight, std=768**-0.5, generator=generator)
    torch.nn.init.zeros_(projection.bias)
    mask = torch.ones(texts, length, dtype=torch.long)
    with torch.no_grad():
        if shift is None:
            top = torch.expm1(splade_max_pool_fused(hidden, projection.weight, None, mask))
            shift = float(top.kthvalue(top.shape[1] - active + 1, dim=1).values.mean())
        projection.bias.fill_(-shift)
    return hidden.requires_grad_(), projection, mask


def head(name: str, projection: torch.nn.Linear, mask: torch.Tensor):
    from transformers import AutoTokenizer

    from spladekit.model.folding import build_fold
    from spladekit.model.pooling import splade_max_pool, splade_max_pool_fused

    config = CONFIGS[name]
    pool = splade_max_pool if config.get("naive") else splade_max_pool_fused
    fold = None
    if config.get("fold"):
        tokenizer = AutoTokenizer.from_pretrained(SHARED / "backbone-files" / "bert-base-uncased")
        fold = build_fold(tokenizer, 30522, "space")

    def run(hidden: torch.Tensor) -> torch.Tensor:
        vectors = pool(hidden, projection.weight, projection.bias, mask, position_top_k=config.get("position_top_k"))
        return vectors if fold is None else fold.dense(vectors)

    return run


def peak(name: str | None, shift: float) -> float:
    """Peak RSS (MiB) of a fresh process running ``name``'s forward + backward once (None: the inputs only)."""
    command = [sys.executable, __file__, "--child", json.dumps([name, shift]), *sys.argv[1:]]
    return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()[-1])


def child(args: argparse.Namespace) -> None:
    name, shift = json.loads(args.child)
    hidden, projection, mask = inputs(args.texts, args.length, args.active, shift)
    if name is not None:
        head(name, projection, mask)(hidden).sum().backward()
    # VmHWM: this process's own peak (ru_maxrss would carry the parent's peak over the fork)
    status = Path("/proc/self/status").read_text().splitlines()
    print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--active", type=int, default=200, help="active terms per text (trained-model sparsity)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child is not None:
        child(args)
        return
    hidden, projection, mask = inputs(args.texts, args.length, args.active)
    heads = {name: head(name, projection, mask) for name in CONFIGS}
    forward = dict.fromkeys(CONFIGS, float("inf"))
    both = dict.fromkeys(CONFIGS, float("inf"))
    for _ in range(args.repeats):  # alternating rounds: a slow spell of the machine hits every head alike
        for name, run in heads.items():
            with torch.no_grad():
                started = time.perf_counter()
                run(hidden)
                forward[name] = min(forward[name], time.perf_counter() - started)
            started = time.perf_counter()
            run(hidden).sum().backward()
            both[name] = min(both[name], time.perf_counter() - started)
            hidden.grad = projection.weight.grad = projection.bias.grad = None
    shift = -float(projection.bias.detach()[0])
    base = peak(None, shift)
    plain = "fused (plain)"
    memory = {name: peak(name, shift) - base for name in CONFIGS}
    print(
        f"| head ({args.texts} texts × {args.length} tokens, H 768, V 30,522, ~{args.active} active terms) | "
        "forward s | × plain | forward + backward s | × plain | peak memory above the inputs, MiB | × plain |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in CONFIGS:
        print(
            f"| {name} | {forward[name]:.3f} | {forward[name] / forward[plain]:.2f} | {both[name]:.3f} | "
            f"{both[name] / both[plain]:.2f} | {memory[name]:.0f} | "
            + (f"{memory[name] / memory[plain]:.2f} |" if memory[plain] >= 1 else "— |")
        )


if __name__ == "__main__":
    main()
