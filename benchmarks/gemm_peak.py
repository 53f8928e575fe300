"""How close each encoding configuration of ``precision_bench.py`` comes to this CPU's GEMM peak for its precision
(issue 45, item 5).

**The peak**, measured here, best of ``--repeats`` with ``--threads`` threads, at two shapes: BERT-base's
feed-forward (4,096 tokens × 768 → 3,072) and a square 2,048³:

* fp32: ``torch.mm`` on float32; bf16: ``torch.mm`` on bfloat16 (native on AVX512-BF16 / AMX);
* int8: ``torch._int_mm`` (int8 × int8 → int32, VNNI), the hardware's int8 rate; beside it, torch's dynamic int8
  ``Linear`` (what ``--precision int8`` runs: activations quantized per batch, the result dequantized), reported but
  not used as the peak.

**Each configuration's useful FLOP/s**: its docs/s (from a ``precision_bench.py --output`` JSON, or a registry
results file holding its row) times the forward
FLOPs of its documents, dense-equivalent, from the model's config and each document's real token count n (the
texts and token limit the bench used; padding is not counted)::

    FLOPs(doc) = n · (layers · (8·d² + 4·d·f) + 2·d² + 2·d·V) + layers · 4·n²·d

(per layer and token: Q, K, V and output projections 4·d² multiply-adds, the feed-forward 2·d·f; the MLM head's
transform d² and vocabulary projection d·V per token; attention's QKᵀ and AV n²·d each per layer; embeddings,
norms and activations left out). The fraction is that rate over the peak of the configuration's precision (fp32 for
sentence-transformers, ONNX fp32, fastembed and spladekit fp32; bf16 for the autocast rows; int8 for the int8 rows).
A path that skips work is credited with the work it skipped — spladekit's default head screens the vocabulary
projection in bf16 — so a fraction is an upper bound on the arithmetic's share of the time, not a measured one.

    python benchmarks/gemm_peak.py --precision-bench docs/results/precision-bench-splade-tiny.json \
        --precision-bench docs/results/bench/amd-epyc-2-core-avx512-bf16.json --output gemm-peak.json
    python benchmarks/gemm_peak.py --quick      # the peaks only, small shapes: a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

PRECISION_OF = {
    "st-fp32": "fp32",
    "onnx-fp32": "fp32",
    "fastembed": "fp32",
    "ours-fp32": "fp32",
    "st-bf16": "bf16",
    "ours-bf16": "bf16",
    "onnx-int8": "int8",
    "ours-int8": "int8",
}
SHAPES = {"bert-base feed-forward": (4096, 768, 3072), "square 2048": (2048, 2048, 2048)}
QUICK_SHAPES = {"small": (256, 128, 512)}


def best_seconds(function, arguments: tuple, repeats: int) -> float:
    function(*arguments)  # warm-up: first-call allocations, packing
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function(*arguments)
        best = min(best, time.perf_counter() - started)
    return best


def gemm_rates(shapes: dict[str, tuple[int, int, int]], repeats: int) -> dict[str, dict[str, float]]:
    """GFLOP/s (2·m·k·n per product) per kind and shape."""
    generator = torch.Generator().manual_seed(0)
    rates: dict[str, dict[str, float]] = {}
    for label, (m, k, n) in shapes.items():
        flops = 2 * m * k * n
        a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
        a8 = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=generator)
        b8 = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=generator)
        linear = torch.ao.nn.quantized.dynamic.Linear(k, n)
        a16, b16 = a.bfloat16(), b.bfloat16()
        runs = {
            "fp32": (torch.mm, (a, b)),
            "bf16": (torch.mm, (a16, b16)),
            "int8": (torch._int_mm, (a8, b8)),
            "int8 dynamic Linear": (linear, (a,)),
        }
        with torch.inference_mode():
            for kind, (function, arguments) in runs.items():
                rates.setdefault(kind, {})[label] = flops / best_seconds(function, arguments, repeats) / 1e9
    return rates


def forward_flops(config: dict, tokens: int) -> float:
    """Dense-equivalent forward FLOPs of one document of ``tokens`` tokens (the formula in the module docstring)."""
    d, f, layers, vocabulary = (
        config["hidden_size"],
        config["intermediate_size"],
        config["num_hidden_layers"],
        config["vocab_size"],
    )
    per_token = layers * (8 * d * d + 4 * d * f) + 2 * d * d + 2 * d * vocabulary
    return tokens * per_token + layers * 4 * tokens * tokens * d


def resolved(path: str) -> Path:
    """A settings path as recorded (absolute, or relative to the repository root, where the bench runs)."""
    candidate = Path(path)
    return candidate if candidate.is_absolute() else ROOT / candidate


def model_inputs(model: str, settings: dict) -> tuple[Path, list[str]]:
    """The folder holding the model's config and tokenizer, and the texts the bench encoded."""
    from precision_bench import read_jsonl_texts

    if model == "bert-base":
        folder, corpus = resolved(settings["backbone_files"]), resolved(settings["passages"])
    else:
        folder, corpus = resolved(settings["splade_tiny"]), resolved(settings["scifact"]) / "corpus.jsonl"
    for needed in (folder / "config.json", corpus):
        if not needed.is_file():
            raise SystemExit(f"gemm_peak.py: {needed} is missing (the bench's inputs are needed to count tokens)")
    return folder, read_jsonl_texts(corpus, settings["docs"])


def model_flops(model: str, settings: dict) -> dict[str, float]:
    """Mean tokens and dense-equivalent GFLOPs per document of the bench's texts."""
    from transformers import AutoTokenizer

    folder, texts = model_inputs(model, settings)
    config = json.loads((folder / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=settings["max_length"])["input_ids"]]
    total = sum(forward_flops(config, length) for length in lengths)
    return {"mean_tokens": sum(lengths) / len(lengths), "gflops_per_doc": total / len(lengths) / 1e9}


def fractions(bench: dict, peaks: dict[str, float], work: dict[str, dict[str, float]]) -> dict[str, dict]:
    """Per model of one precision_bench run (``work``: :func:`model_flops` of each), each configuration's useful
    GFLOP/s and its share of the peak of its precision."""
    report = {}
    for model, entry in bench["models"].items():
        rows = {}
        for name, row in entry["results"].items():
            if "docs_per_s" not in row or name not in PRECISION_OF:
                continue
            precision = PRECISION_OF[name]
            achieved = row["docs_per_s"] * work[model]["gflops_per_doc"]
            rows[name] = {
                "precision": precision,
                "docs_per_s": row["docs_per_s"],
                "useful_gflop_per_s": achieved,
                "peak_gflop_per_s": peaks[precision],
                "fraction_of_peak": achieved / peaks[precision],
            }
        report[model] = {**work[model], "configs": rows}
    return report


def read_benches(paths: list[Path]) -> list[tuple[dict, dict[str, dict[str, float]]]]:
    """Every precision_bench run in ``paths`` with its models' work, read and checked before any timing: a bad file
    ends the script in one line."""
    found = []
    for path in paths:
        try:
            runs = precision_runs(json.loads(path.read_text()))
            for bench in runs:
                found.append((bench, {model: model_flops(model, bench["settings"]) for model in bench["models"]}))
        except OSError as error:
            raise SystemExit(f"gemm_peak.py: --precision-bench {path}: {error.strerror or error}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise SystemExit(
                f"gemm_peak.py: --precision-bench {path}: not a precision_bench result ({error!r})"
            ) from None
        if not runs:
            raise SystemExit(f"gemm_peak.py: --precision-bench {path}: holds no precision_bench run")
    return found


def precision_runs(data: dict) -> list[dict]:
    """A precision_bench.py JSON, or the precision_bench runs inside a ``python -m benchmarks`` results file (its
    rows' raw outputs: docs/results/bench/)."""
    if "rows" not in data:
        return [data]
    raws = [row.get("raw", {}) for row in data["rows"].values()]
    return [raw for raw in raws if "models" in raw and "settings" in raw]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision-bench", type=Path, action="append", default=[], help="a precision_bench JSON")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument("--repeats", type=int, default=5, help="timed products per kind and shape; the best counts")
    parser.add_argument("--quick", action="store_true", help="small shapes, two repeats")
    parser.add_argument("--output", type=Path, help="also write the results as JSON")
    args = parser.parse_args()
    if args.threads < 1 or args.repeats < 1:
        raise SystemExit("gemm_peak.py: --threads and --repeats must be at least 1")
    if args.output is not None and (args.output.is_dir() or not args.output.parent.is_dir()):
        raise SystemExit(f"gemm_peak.py: --output {args.output}: not a file in an existing folder")
    benches = read_benches(args.precision_bench)
    torch.set_num_threads(args.threads)
    rates = gemm_rates(QUICK_SHAPES if args.quick else SHAPES, 2 if args.quick else args.repeats)
    peaks = {kind: max(by_shape.values()) for kind, by_shape in rates.items()}
    report: dict = {
        "command": " ".join(["python", *sys.argv]),
        "torch": torch.__version__,
        "threads": args.threads,
        "gemm_gflop_per_s": rates,
        "peak_gflop_per_s": peaks,
        "models": {},
    }
    print(f"GEMM peak, {args.threads} threads (GFLOP/s):")
    for kind, by_shape in rates.items():
        shapes = ", ".join(f"{label} {value:,.0f}" for label, value in by_shape.items())
        print(f"  {kind:<20} {peaks[kind]:>8,.0f}   ({shapes})")
    for bench, work in benches:
        for model, entry in fractions(bench, peaks, work).items():
            report["models"][model] = entry
            print(f"{model}: {entry['mean_tokens']:.1f} tokens, {entry['gflops_per_doc']:.2f} GFLOP per document")
            print(f"  {'config':<10} {'docs/s':>8} {'GFLOP/s':>9} {'peak':>7} {'of peak':>8}")
            for name, row in entry["configs"].items():
                print(
                    f"  {name:<10} {row['docs_per_s']:>8.1f} {row['useful_gflop_per_s']:>9.0f} "
                    f"{row['peak_gflop_per_s']:>7.0f} {row['fraction_of_peak']:>7.0%} ({row['precision']})"
                )
    if args.output is not None:
        args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
