"""Throughput and peak memory of SPLADE encoding and training at base size, spladekit vs sentence-transformers.

Random-init backbones built from transformers configs (no download): ``bert-base`` (``BertConfig()``: 12
layers, H = 768, V = 30,522, 110 M parameters) and ``modernbert-base`` (``ModernBertConfig()``: 22 layers,
H = 768, V = 50,368). Inputs are random token ids, every text ``--length`` tokens (no padding, no
tokenizer: the table measures the model, not tokenization or CSR conversion). Configurations, same
weights:

* ``sentence-transformers``: the MLM logits (B × L × V) then ``SpladePooling("max")``, the two modules a
  sentence-transformers ``SparseEncoder`` runs (its forward, called directly);
* ``fused``: ``spladekit.SparseEncoder(pooling="fused")`` (fp32, exact);
* ``fused-bf16``: ``pooling="fused-bf16"`` (bf16 screen bounded by rounding-error analysis, fp32 recompute);
* ``fused+autocast``: ``pooling="fused"`` under ``spladekit.common.devices.autocast`` (bf16 backbone and head);
* ``sentence-transformers+autocast``: the sentence-transformers modules under the same autocast (its
  logits in bf16), the fair reference for ``fused+autocast``;
* ``backbone``: the model up to the vocabulary projection only (``SparseEncoder.head_inputs``), to read
  what the backbone costs and the head adds (encoding only).

Encoding: ``--batches`` forward passes under ``torch.inference_mode`` after one warm-up: docs/s and
tokens/s. Training: ``--steps`` steps after one warm-up (``--batch`` queries of 32 tokens, one positive
and one negative document each of ``--length`` tokens; InfoNCE over in-batch and hard negatives + FLOPS
λ = 1e-3; AdamW): steps/s and tokens/s. Peak memory: ``torch.cuda.max_memory_allocated`` per
configuration (reset before each); on the CPU, run one configuration per process (``--configs``) and
read its peak RSS.

Largest training batch (``--max-batch-gib G``, CUDA only): per shape and configuration, the largest
``--batch`` whose two training steps (the second one holds AdamW's state) run with the caching allocator
capped at G GiB (``torch.cuda.set_per_process_memory_fraction``; the CUDA context is not counted), found by
doubling from 8 and then bisecting; each probe starts from a fresh copy of the weights on the GPU.

    python benchmarks/gpu_bench.py                                   # on a GPU machine: the GPU table
    python benchmarks/gpu_bench.py --max-batch-gib 16 --configs sentence-transformers,fused
    python benchmarks/gpu_bench.py --device cpu --shapes bert-base --batch 16 --batches 2 --steps 2
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CONFIGS = (
    "sentence-transformers",
    "fused",
    "fused-bf16",
    "fused+autocast",
    "sentence-transformers+autocast",
    "backbone",
)
QUERY_LENGTH = 32
LAMBDA = 1e-3


def backbone_config(shape: str):
    from transformers import BertConfig, ModernBertConfig

    if shape == "bert-base":
        return BertConfig()
    if shape == "modernbert-base":
        return ModernBertConfig()
    raise SystemExit(f"unknown shape {shape!r}; choose bert-base or modernbert-base")


def build_model(shape: str, device: torch.device):
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(0)
    return AutoModelForMaskedLM.from_config(backbone_config(shape), attn_implementation="sdpa").to(device)


class Splade(torch.nn.Module):
    """One configuration: ``vectors(batch)`` → B × V, differentiable."""

    def __init__(self, config: str, model, shape: str):
        super().__init__()
        from sentence_transformers.sparse_encoder.modules import SpladePooling

        from spladekit.model.backbone import Backbone
        from spladekit.model.encoder import SparseEncoder

        self.config = config
        self.model = model
        self.pooling = SpladePooling(pooling_strategy="max")
        pooling = config if config in ("fused", "fused-bf16") else "fused"
        self.encoder = SparseEncoder(
            Backbone(model=model, tokenizer=None, source=f"random-init {shape}"), pooling=pooling
        )

    def vectors(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from spladekit.common.devices import autocast

        if self.config.startswith("sentence-transformers"):
            with autocast(batch["input_ids"].device, self.config.endswith("+autocast")):
                logits = self.model(**batch).logits
                return self.pooling({"token_embeddings": logits, "attention_mask": batch["attention_mask"]})[
                    "sentence_embedding"
                ].float()
        if self.config == "backbone":
            return self.encoder.head_inputs(batch)[0]
        with autocast(batch["input_ids"].device, self.config == "fused+autocast"):
            return self.encoder(batch).float()


def random_batch(size: int, length: int, vocab: int, device: torch.device, generator: torch.Generator):
    ids = torch.randint(1000, vocab, (size, length), generator=generator).to(device)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_runs(run: Callable[[int], None], count: int, device: torch.device) -> float:
    """Seconds for runs 1..count after run 0 (warm-up)."""
    run(0)
    synchronize(device)
    start = time.perf_counter()
    for index in range(1, count + 1):
        run(index)
    synchronize(device)
    return time.perf_counter() - start


def peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the process's peak RSS (Linux: KB)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def measure_encoding(splade: Splade, args, device: torch.device, vocab: int) -> dict:
    generator = torch.Generator().manual_seed(1)
    batches = [random_batch(args.batch, args.length, vocab, device, generator) for _ in range(args.batches + 1)]
    splade.eval()
    reset_peak(device)

    finite: list[torch.Tensor] = []

    def run(index: int) -> None:
        with torch.inference_mode():
            finite.append(torch.isfinite(splade.vectors(batches[index])).all())

    seconds = timed_runs(run, args.batches, device)
    docs = args.batch * args.batches
    return {
        "docs_per_s": docs / seconds,
        "tokens_per_s": docs * args.length / seconds,
        "peak_mb": peak_mb(device),
        "finite": bool(torch.stack(finite).all()),
    }


def training_step(splade: Splade, optimizer: torch.optim.Optimizer, queries: dict, documents: dict) -> torch.Tensor:
    """One step: InfoNCE over in-batch and hard negatives + FLOPS λ, AdamW. Returns the (detached) loss."""
    q, d = splade.vectors(queries), splade.vectors(documents)
    ranking = torch.nn.functional.cross_entropy(q @ d.T, torch.arange(q.shape[0], device=q.device))
    loss = ranking + LAMBDA * ((q.abs().mean(0) ** 2).sum() + (d.abs().mean(0) ** 2).sum())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def adamw(splade: Splade) -> torch.optim.Optimizer:
    return torch.optim.AdamW([p for p in splade.parameters() if p.requires_grad], lr=2e-5)


def measure_training(splade: Splade, args, device: torch.device, vocab: int) -> dict:
    generator = torch.Generator().manual_seed(2)
    steps = [
        (
            random_batch(args.batch, QUERY_LENGTH, vocab, device, generator),
            random_batch(2 * args.batch, args.length, vocab, device, generator),
        )
        for _ in range(args.steps + 1)
    ]
    splade.train()
    optimizer = adamw(splade)
    reset_peak(device)
    finite: list[torch.Tensor] = []

    def run(index: int) -> None:
        finite.append(torch.isfinite(training_step(splade, optimizer, *steps[index])))

    seconds = timed_runs(run, args.steps, device)
    tokens = args.batch * QUERY_LENGTH + 2 * args.batch * args.length
    return {
        "steps_per_s": args.steps / seconds,
        "tokens_per_s": tokens * args.steps / seconds,
        "peak_mb": peak_mb(device),
        "finite": bool(torch.stack(finite).all()),
    }


def training_fits(model, config: str, shape: str, batch: int, args, device: torch.device) -> float | None:
    """Peak MB of two training steps at ``batch`` on a fresh GPU copy of ``model``; None when out of memory."""
    generator = torch.Generator().manual_seed(3)
    vocab = model.config.vocab_size
    try:
        splade = Splade(config, copy.deepcopy(model).to(device), shape)
        splade.train()
        optimizer = adamw(splade)
        reset_peak(device)
        for _ in range(2):  # the second step holds AdamW's state
            training_step(
                splade,
                optimizer,
                random_batch(batch, QUERY_LENGTH, vocab, device, generator),
                random_batch(2 * batch, args.length, vocab, device, generator),
            )
        synchronize(device)
        return peak_mb(device)
    except torch.OutOfMemoryError:
        return None


def largest_batch(model, config: str, shape: str, args, device: torch.device) -> dict:
    """The largest batch that :func:`training_fits`: doubling from 8, then bisection."""
    peaks: dict[int, float | None] = {}

    def fits(batch: int) -> bool:
        peaks[batch] = training_fits(model, config, shape, batch, args, device)
        gc.collect()  # the failed probe's tensors, before the next one is measured
        torch.cuda.empty_cache()
        print(
            f"  {shape} {config} batch {batch}: "
            f"{'out of memory' if peaks[batch] is None else f'{peaks[batch]:.0f} MB'}",
            file=sys.stderr,
        )
        return peaks[batch] is not None

    low, high = 0, 8
    while fits(high):
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return {
        "largest_batch": low,
        "peak_mb": peaks.get(low),
        "first_failing_batch": high,
        "tokens_per_step": low * QUERY_LENGTH + 2 * low * args.length,
    }


def max_batch_table(results: dict, gib: float) -> str:
    lines = [
        f"| shape | configuration | largest batch in {gib:g} GiB | tokens per step | peak MB at it | "
        "first failing batch |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for shape, configs in results.items():
        for config, row in configs.items():
            peak = f"{row['peak_mb']:.0f}" if row["peak_mb"] is not None else "–"
            lines.append(
                f"| {shape} | {config} | {row['largest_batch']} | {row['tokens_per_step']} | {peak} | "
                f"{row['first_failing_batch']} |"
            )
    return "\n".join(lines)


def markdown(results: dict, device: torch.device, configs: list[str]) -> str:
    """The table; on the CPU, peak memory only when one configuration ran (a process's peak RSS is shared).
    Ratios are against sentence-transformers at the same precision (``+autocast`` rows against
    ``sentence-transformers+autocast`` when it ran)."""
    memory = "peak MB (max_memory_allocated)" if device.type == "cuda" else "peak RSS MB (process)"
    per_config = device.type == "cuda" or len(configs) == 1
    lines = [
        f"| shape | task | configuration | speed | tokens/s | × sentence-transformers | {memory} | × ST | finite |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for shape, tasks in results.items():
        for task, configs in tasks.items():
            unit = "docs_per_s" if task == "encode" else "steps_per_s"
            for config, row in configs.items():
                same = "sentence-transformers+autocast" if config.endswith("+autocast") else "sentence-transformers"
                reference = configs.get(same) or configs.get("sentence-transformers")
                ratio = f"{row[unit] / reference[unit]:.2f}×" if reference else "–"
                memory_ratio = f"{row['peak_mb'] / reference['peak_mb']:.2f}×" if reference and per_config else "–"
                peak = f"{row['peak_mb']:.0f}" if per_config else "–"
                lines.append(
                    f"| {shape} | {task} | {config} | {row[unit]:.2f} {unit.replace('_per_s', '/s')} | "
                    f"{row['tokens_per_s']:.0f} | {ratio} | {peak} | {memory_ratio} | "
                    f"{'yes' if row['finite'] else '**NO**'} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--shapes", default="bert-base,modernbert-base")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--tasks", default="encode,train")
    parser.add_argument("--batch", type=int, default=64, help="texts per encoding batch; queries per training step")
    parser.add_argument("--length", type=int, default=256, help="tokens per document")
    parser.add_argument("--batches", type=int, default=10, help="timed encoding batches (after one warm-up)")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps (after one warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    parser.add_argument(
        "--max-batch-gib",
        type=float,
        default=None,
        help="instead of timing: the largest training batch in this many GiB (CUDA only)",
    )
    parser.add_argument("--output", type=Path, help="also write the results as JSON")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            f"gpu_bench.py: CUDA is not available here (torch {torch.__version__}, CUDA build "
            f"{torch.version.cuda}); run it on a GPU machine, or pass --device cpu for the CPU table."
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    from spladekit.common.devices import resolve_device

    device = resolve_device(args.device)  # cuda → cuda:0: the memory APIs need an index
    configs = args.configs.split(",")
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"unknown --configs {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    header = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "command": " ".join(sys.argv),
        "batch": args.batch,
        "length": args.length,
    }
    results: dict = {}
    if args.max_batch_gib is not None:
        if device.type != "cuda" or args.max_batch_gib <= 0:
            raise SystemExit(
                "--max-batch-gib needs a CUDA device and a positive budget (on the CPU, fit peak "
                "RSS against --batch instead: docs/benchmarks.md)"
            )
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.max_batch_gib * 2**30 / total), device)
        for shape in args.shapes.split(","):
            model = build_model(shape, torch.device("cpu"))
            results[shape] = {
                config: largest_batch(model, config, shape, args, device) for config in configs if config != "backbone"
            }
        if args.output:
            args.output.write_text(
                json.dumps({**header, "max_batch_gib": args.max_batch_gib, "results": results}, indent=2) + "\n"
            )
        print(json.dumps(header))
        print(max_batch_table(results, args.max_batch_gib))
        return
    for shape in args.shapes.split(","):
        model = build_model(shape, device)
        vocab = model.config.vocab_size
        results[shape] = {}
        runs = [
            (task, config)
            for task in args.tasks.split(",")
            for config in configs
            if not (task == "train" and config == "backbone")
        ]
        for task, config in runs:
            measure = {"encode": measure_encoding, "train": measure_training}[task]
            results[shape].setdefault(task, {})
            # training changes the weights: every configuration starts from the same copy, except the
            # last one (no copy in memory: a one-configuration process's peak RSS is the tool's own)
            fresh = task == "train" and (task, config) != runs[-1]
            splade = Splade(config, copy.deepcopy(model) if fresh else model, shape)
            results[shape][task][config] = measure(splade, args, device, vocab)
            del splade
            print(f"{shape} {task} {config}: {json.dumps(results[shape][task][config])}", file=sys.stderr)
        del model
    if args.output:
        args.output.write_text(json.dumps({**header, "results": results}, indent=2) + "\n")
    print(json.dumps(header))
    print(markdown(results, device, configs))


if __name__ == "__main__":
    main()
