"""Side-by-side speed and memory of the SPLADE head: spladekit fused / fused-bf16 / naive vs sentence-transformers.

Same model folder, same texts (SciFact corpus, title + " " + text, the first --docs documents), same
max length, batch size and thread count for every configuration. Timings are interleaved batch by
batch (encoding) or step by step (training) inside one process, so load from other processes on a
shared machine hits every configuration alike; report the ratios. Peak memory is measured per
configuration in its own fresh subprocess (same imports, same model) as ``ru_maxrss`` (peak resident
set, which counts torch's CPU allocations, unlike tracemalloc), next to the RSS right after loading.

    python benchmarks/encode_train_bench.py --output bench.json
    python benchmarks/encode_train_bench.py --parts encode,screen --docs 64   # a subset of the measurements
    python benchmarks/encode_train_bench.py --parts encode --model BERT_BASE_FOLDER \
        --corpus ../shared/data/trec-dl-2019-subset/corpus.jsonl \
        --encode-configs sentence-transformers,fused,fused+compile,fused+frozen
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
ENCODE_CONFIGS = ("sentence-transformers", "naive", "fused", "fused-bf16")
TRAIN_CONFIGS = ("sentence-transformers", "naive", "fused")
CHUNK_SIZES = (128, 256, 512, 1024, 2048, 4096)
LAMBDA = 1e-3  # FLOPS regularizer weight, queries and documents, both sides


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


# ----------------------------------------------------------------------------------- data
def read_docs(path: Path, count: int) -> list[str]:
    with path.open() as lines:
        rows = map(json.loads, itertools.islice(lines, count))
        return [f"{row.get('title', '')} {row['text']}".strip() for row in rows]


def read_triplets(path: Path, count: int) -> list[tuple[str, str, str]]:
    with path.open() as lines:
        return [tuple(line.rstrip("\n").split("\t")[:3]) for line in itertools.islice(lines, count)]


# ----------------------------------------------------------------------------------- models
def load_st(model: Path, max_length: int):
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    mlm = Transformer(str(model), transformer_task="fill-mask", max_seq_length=max_length)
    return SparseEncoder(modules=[mlm, SpladePooling(pooling_strategy="max")], device="cpu")


def load_ours(model: Path, pooling: str, max_length: int):
    """spladekit with ``pooling``; ``POOLING+compile`` / ``POOLING+frozen``: its backbone compiled, with the weights
    frozen in for the second (``SparseEncoder.compile_backbone``; ``encode --compile`` freezes)."""
    from spladekit import SparseEncoder

    pooling, _, compiled = pooling.partition("+")
    encoder = SparseEncoder.from_pretrained(model, pooling=pooling, max_length=max_length)
    if compiled:
        encoder.compile_backbone(frozen=compiled == "frozen")
    return encoder


def config_error(config: str) -> str | None:
    """Why ``config`` is not an --encode-configs / --train-configs entry, or None."""
    from spladekit.model.encoder import POOLINGS

    base, _, option = config.partition("+")
    if base == "sentence-transformers":
        return None if option in ("", "frozen") else f"{config!r}: sentence-transformers takes +frozen only"
    if base not in POOLINGS:
        return f"unknown pooling {base!r} in {config!r} (sentence-transformers, {', '.join(POOLINGS)})"
    return None if option in ("", "compile", "frozen") else f"unknown option +{option} in {config!r} (compile, frozen)"


def encoder_for(config: str, args):
    """``sentence-transformers+frozen``: its masked LM's forward compiled, run under inductor's freezing (as
    spladekit's ``compile_backbone(frozen=True)`` does), for a comparison on equal terms. sentence-transformers calls
    ``model.forward`` itself, not the module, so ``nn.Module.compile`` would never run: the method is replaced."""
    if config.startswith("sentence-transformers"):
        model = load_st(args.model, args.max_length)
        if config.endswith("+frozen"):
            masked_lm = model[0].auto_model
            masked_lm.forward = torch.compile(masked_lm.forward, dynamic=True)
        return model
    return load_ours(args.model, config, args.max_length)


def encode(config: str, model, texts: list[str], batch_size: int):
    if config == "sentence-transformers+frozen":
        import torch._inductor.config as inductor

        with inductor.patch(freezing=True):
            return model.encode(texts, batch_size=batch_size, show_progress_bar=False)
    if config == "sentence-transformers":
        return model.encode(texts, batch_size=batch_size, show_progress_bar=False)
    return model.encode(texts, batch_size=batch_size, show_progress=False)


def to_dense(config: str, vectors) -> np.ndarray:
    if config.startswith("sentence-transformers"):
        return vectors.to_dense().numpy()
    return vectors.toarray()


# ----------------------------------------------------------------------------------- training
def flops(vectors: torch.Tensor) -> torch.Tensor:
    """FLOPS regularizer (Paria et al. 2020, used by SPLADE v2): Σ_v (mean_batch |x_v|)²."""
    return (vectors.abs().mean(0) ** 2).sum()


class Trainer:
    """One configuration's model + AdamW; ``step`` = forward, loss, backward, optimizer step."""

    def __init__(self, config: str, args):
        torch.manual_seed(0)
        self.config = config
        self.model = encoder_for(config, args)
        self.model.train()
        if config == "sentence-transformers":
            from sentence_transformers.sparse_encoder.losses import (
                SparseMultipleNegativesRankingLoss,
                SpladeLoss,
            )

            self.loss = SpladeLoss(
                self.model,
                SparseMultipleNegativesRankingLoss(self.model),
                document_regularizer_weight=LAMBDA,
                query_regularizer_weight=LAMBDA,
            )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=2e-5)

    def step(self, triplets) -> float:
        queries, positives, negatives = (list(column) for column in zip(*triplets))
        if self.config == "sentence-transformers":
            features = [self.model.tokenize(texts) for texts in (queries, positives, negatives)]
            loss = sum(self.loss(features, None).values())
        else:
            q = self.model(self.model.tokenize(queries))
            d = self.model(self.model.tokenize(positives + negatives))
            ranking = torch.nn.functional.cross_entropy(q @ d.T, torch.arange(len(queries)))
            loss = ranking + LAMBDA * flops(q) + LAMBDA * flops(d)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss)


# ----------------------------------------------------------------------------------- measurements
def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def measure_encoding(args, docs):
    """Docs/s per configuration, interleaved batch by batch, and agreement with the naive fp32 vectors (the fused
    ones where naive is not measured)."""
    configs = args.encode_configs.split(",")
    models = {config: encoder_for(config, args) for config in configs}
    seconds = dict.fromkeys(configs, 0.0)
    outputs = {config: [] for config in configs}
    for config in configs:  # warm-up (and compilation, where compiled)
        encode(config, models[config], docs[: args.batch_size], args.batch_size)
    for start in range(0, len(docs), args.batch_size):
        chunk = docs[start : start + args.batch_size]
        for config in configs:
            elapsed, vectors = timed(encode, config, models[config], chunk, args.batch_size)
            seconds[config] += elapsed
            outputs[config].append(to_dense(config, vectors))
    dense = {config: np.vstack(blocks) for config, blocks in outputs.items()}
    reference = dense["naive" if "naive" in dense else "fused"]
    agreement = {
        config: {
            "max_abs_diff": float(np.abs(values - reference).max()),
            "values_off_by_more_than_1e-3": int((np.abs(values - reference) > 1e-3).sum()),
            "nonzero_set_mismatches": int(((values > 0) != (reference > 0)).sum()),
            "reference_nnz": int((reference > 0).sum()),
        }
        for config, values in dense.items()
    }
    return {config: len(docs) / seconds[config] for config in configs}, agreement


def measure_training(args, triplets):
    configs = args.train_configs.split(",")
    trainers = {config: Trainer(config, args) for config in configs}
    batches = [triplets[i : i + args.train_batch] for i in range(0, len(triplets), args.train_batch)]
    for config in configs:  # warm-up step
        trainers[config].step(batches[0])
    seconds = dict.fromkeys(configs, 0.0)
    for batch in batches[1 : args.train_steps + 1]:
        for config in configs:
            elapsed, _ = timed(trainers[config].step, batch)
            seconds[config] += elapsed
    return {config: args.train_steps / seconds[config] for config in configs}


def gemm_gflops(dtype, size=2048, repeats=5) -> float:
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def measure_head(args, docs):
    """Pooling alone on one batch of real projection inputs: chunk-size sweep and GFLOP/s vs GEMM peak."""
    from spladekit.model.pooling import splade_max_pool, splade_max_pool_fused

    model = load_ours(args.model, "fused", args.max_length)
    batch = model.tokenize(docs[: args.batch_size])
    with torch.no_grad():
        hidden, projection = model.head_inputs(batch)
    weight, bias, mask = projection.weight, projection.bias, batch["attention_mask"]
    work = 2 * hidden.shape[0] * hidden.shape[1] * weight.shape[0] * weight.shape[1]

    def inference(chunk_size, dtype=None):
        with torch.inference_mode():
            splade_max_pool_fused(hidden, weight, bias, mask, chunk_size=chunk_size, search_dtype=dtype)

    def training(chunk_size):
        h = hidden.detach().requires_grad_()
        splade_max_pool_fused(h, weight, bias, mask, chunk_size=chunk_size).sum().backward()

    def naive_inference():
        with torch.inference_mode():
            splade_max_pool(hidden, weight, bias, mask)

    cases = {}
    for chunk_size in CHUNK_SIZES:
        cases[f"fused fp32 c={chunk_size}"] = lambda c=chunk_size: inference(c)
        cases[f"fused bf16 c={chunk_size}"] = lambda c=chunk_size: inference(c, torch.bfloat16)
        cases[f"fused fp32 fwd+bwd c={chunk_size}"] = lambda c=chunk_size: training(c)
    cases["naive fp32"] = naive_inference
    best = {name: float("inf") for name in cases}
    for _ in range(args.head_repeats):  # interleaved; best of n is the least disturbed run
        for name, case in cases.items():
            best[name] = min(best[name], timed(case)[0])
    peaks = {"fp32": gemm_gflops(torch.float32), "bf16": gemm_gflops(torch.bfloat16)}
    return {
        "seconds": best,
        "gflops": {name: work / seconds / 1e9 for name, seconds in best.items()},
        "gemm_peak_gflops": peaks,
        "tokens": int(hidden.shape[0] * hidden.shape[1]),
    }


def worker(args) -> None:
    """Peak memory of one configuration in this fresh process; prints one JSON line."""
    import sentence_transformers  # noqa: F401  same imports for every configuration

    import spladekit  # noqa: F401

    mode, config = args.worker.split(":")
    if mode == "encode":
        docs = read_docs(args.corpus, args.memory_batches * args.batch_size)
        model = encoder_for(config, args)
        loaded = rss_mb()
        for start in range(0, len(docs), args.batch_size):
            encode(config, model, docs[start : start + args.batch_size], args.batch_size)
    else:
        triplets = read_triplets(args.triplets, args.memory_batches * args.train_batch)
        trainer = Trainer(config, args)
        loaded = rss_mb()
        for start in range(0, len(triplets), args.train_batch):
            trainer.step(triplets[start : start + args.train_batch])
    print(json.dumps({"after_load_mb": loaded, "peak_mb": peak_rss_mb()}))


def measure_memory(args) -> dict:
    results = {}
    for mode, configs in (("encode", args.encode_configs), ("train", args.train_configs)):
        for config in configs.split(","):
            command = [sys.executable, __file__, "--worker", f"{mode}:{config}", *args.passthrough]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            results[f"{mode}:{config}"] = json.loads(output.strip().splitlines()[-1])
    return results


def measure_screen(args, docs):
    """One batch of real projection inputs: the bf16 screen's three stages against the fp32 block pass, and
    how many terms per text the error bound keeps next to the true non-zero count."""
    from spladekit.model import bf16_screen, pooling

    model = load_ours(args.model, "fused", args.max_length)
    batch = model.tokenize(docs[: args.batch_size])
    mask = batch["attention_mask"]
    with torch.inference_mode():
        hidden, projection = model.head_inputs(batch)
        weight, bias = projection.weight, projection.bias
        chunk = pooling.default_chunk_size(hidden.shape[2], hidden.shape[0] * hidden.shape[1], hidden.element_size())
        fp32_s, (exact, _) = timed(pooling._block_max, hidden, weight, bias, mask, chunk, torch.float32, False)
        screen_s, (screen, _) = timed(pooling._block_max, hidden, weight, bias, mask, chunk, torch.bfloat16, False)
        bound_s, candidates = timed(bf16_screen.screen_candidates, screen, hidden, weight, bias, mask, torch.bfloat16)
        recompute_s, (recomputed, _) = timed(
            pooling._recompute_candidates, hidden, weight, bias, mask, candidates, chunk, False
        )
    nonzero = exact > 0
    return {
        "fp32_block_s": fp32_s,
        "bf16_screen_s": screen_s,
        "bound_s": bound_s,
        "recompute_s": recompute_s,
        "candidates_per_text": float(candidates.sum(1).float().mean()),
        "max_candidates_per_text": int(candidates.sum(1).max()),
        "nonzero_per_text": float(nonzero.sum(1).float().mean()),
        "missed_nonzero": int((nonzero & ~candidates).sum()),
        "recomputed_equals_fp32": bool(torch.equal(torch.where(candidates, recomputed, exact), exact)),
        "max_text_norm": float(torch.linalg.vector_norm(hidden, dim=2).amax()),
        "max_row_norm": float(torch.linalg.vector_norm(weight.detach(), dim=1).amax()),
    }


# ----------------------------------------------------------------------------------- report
def speed_table(task: str, unit: str, speeds: dict[str, float]) -> list[str]:
    st, fused = speeds["sentence-transformers"], speeds["fused"]
    lines = [f"| {task} configuration | {unit} | × sentence-transformers | × fused |", "|---|---|---|---|"]
    rows = [f"| {name} | {speed:.2f} | {speed / st:.2f}× | {speed / fused:.2f}× |" for name, speed in speeds.items()]
    return lines + rows


def markdown(report: dict) -> str:
    lines = []
    if "screen" in report:
        screen = report["screen"]
        lines += ["| bf16 screen, one batch | value |", "|---|---|"]
        lines += [
            f"| {name} | {value:.3f} |" if isinstance(value, float) else f"| {name} | {value} |"
            for name, value in screen.items()
        ]
        lines.append("")
    if "encode_docs_per_s" in report:
        lines += speed_table("encode", "docs/s", report["encode_docs_per_s"])
        lines += [
            "",
            "| agreement with naive fp32 | max abs diff | values off by > 1e-3 | non-zero set mismatches | naive nnz |",
            "|---|---|---|---|---|",
        ]
        for config, a in report["agreement"].items():
            lines.append(
                f"| {config} | {a['max_abs_diff']:.2e} | {a['values_off_by_more_than_1e-3']} | "
                f"{a['nonzero_set_mismatches']} | {a['reference_nnz']} |"
            )
        lines.append("")
    if "train_steps_per_s" in report:
        lines += [*speed_table("train", "steps/s", report["train_steps_per_s"]), ""]
    if {"memory", "head", "train_steps_per_s", "encode_docs_per_s"} <= report.keys():
        lines.append(full_markdown(report))
    return "\n".join(lines)


def full_markdown(report: dict) -> str:
    enc, train, mem, head = report["encode_docs_per_s"], report["train_steps_per_s"], report["memory"], report["head"]
    st_enc, st_train = enc["sentence-transformers"], train["sentence-transformers"]
    lines = [
        "| task | configuration | speed | × sentence-transformers | peak RSS MB | × ST "
        "| RSS growth after load MB | × ST |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, speeds, unit, reference in (("encode", enc, "docs/s", st_enc), ("train", train, "steps/s", st_train)):
        st_mem = mem[f"{mode}:sentence-transformers"]
        for config, speed in speeds.items():
            m = mem[f"{mode}:{config}"]
            growth, st_growth = m["peak_mb"] - m["after_load_mb"], st_mem["peak_mb"] - st_mem["after_load_mb"]
            lines.append(
                f"| {mode} | {config} | {speed:.2f} {unit} | {speed / reference:.2f}× | {m['peak_mb']:.0f} | "
                f"{m['peak_mb'] / st_mem['peak_mb']:.2f}× | {growth:.0f} | {growth / st_growth:.2f}× |"
            )
    lines += ["", "| head alone (one batch) | seconds | GFLOP/s | fraction of GEMM peak |", "|---|---|---|---|"]
    for name, seconds in head["seconds"].items():
        peak = head["gemm_peak_gflops"]["bf16" if "bf16" in name else "fp32"]
        gflops = head["gflops"][name]
        lines.append(f"| {name} | {seconds:.3f} | {gflops:.0f} | {gflops / peak:.2f} |")
    peaks = head["gemm_peak_gflops"]
    lines.append(f"\nGEMM peak (2048³): fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=SHARED / "models" / "splade-tiny-msmarco")
    parser.add_argument("--corpus", type=Path, default=SHARED / "data" / "scifact" / "corpus.jsonl")
    parser.add_argument("--triplets", type=Path, default=SHARED / "data" / "scifact" / "triplets-train.tsv")
    parser.add_argument("--docs", type=int, default=512, help="first N corpus documents to encode")
    parser.add_argument("--batch-size", type=int, default=32, help="encoding batch size")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--train-batch", type=int, default=8, help="triplets per training step")
    parser.add_argument("--train-steps", type=int, default=6, help="timed steps (after one warm-up step)")
    parser.add_argument("--head-repeats", type=int, default=3)
    parser.add_argument("--memory-batches", type=int, default=2, help="batches/steps run by each memory subprocess")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--parts",
        default="memory,head,encode,train",
        help="comma-separated measurements: memory, head, encode, train, screen",
    )
    parser.add_argument(
        "--encode-configs",
        default=",".join(ENCODE_CONFIGS),
        help="encode: sentence-transformers (or sentence-transformers+frozen) and spladekit poolings, each optionally "
        "+compile or +frozen (its backbone compiled, with the weights frozen in for +frozen), e.g. fused+frozen",
    )
    parser.add_argument(
        "--train-configs",
        default=",".join(TRAIN_CONFIGS),
        help="train: sentence-transformers and spladekit poolings, each optionally +compile, e.g. fused-bf16",
    )
    parser.add_argument("--output", type=Path, help="write the JSON report here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for option, value in (("--encode-configs", args.encode_configs), ("--train-configs", args.train_configs)):
        chosen = value.split(",")
        if not {"sentence-transformers", "fused"} <= set(chosen) or len(set(chosen)) < len(chosen):
            parser.error(f"{option}: sentence-transformers and fused, once each; got {value!r}")
        for error in filter(None, map(config_error, chosen)):
            parser.error(f"{option}: {error}")
        if option == "--train-configs" and any(config.endswith("+frozen") for config in chosen):
            parser.error("--train-configs: +frozen is for encoding (a frozen backbone does not see its new weights)")
    torch.set_num_threads(args.threads)
    args.passthrough = [
        f"--{name}={getattr(args, name.replace('-', '_'))}"
        for name in (
            "model",
            "corpus",
            "triplets",
            "batch-size",
            "max-length",
            "train-batch",
            "memory-batches",
            "threads",
        )
    ]
    if args.worker:
        worker(args)
        return
    docs = read_docs(args.corpus, args.docs)
    triplets = read_triplets(args.triplets, args.train_batch * (args.train_steps + 1))
    report = {"command": " ".join(sys.argv), "threads": args.threads, "docs": len(docs)}
    parts = set(args.parts.split(","))
    unknown = parts - {"memory", "head", "encode", "train", "screen"}
    if unknown:
        parser.error(f"unknown --parts {sorted(unknown)}")
    if "memory" in parts:
        report["memory"] = measure_memory(args)
    if "head" in parts:
        report["head"] = measure_head(args, docs)
    if "screen" in parts:
        report["screen"] = measure_screen(args, docs)
    if "encode" in parts:
        report["encode_docs_per_s"], report["agreement"] = measure_encoding(args, docs)
    if "train" in parts:
        report["train_steps_per_s"] = measure_training(args, triplets)
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))


if __name__ == "__main__":
    main()
