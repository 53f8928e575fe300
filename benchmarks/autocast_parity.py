"""nDCG@10 parity of bf16 autocast against fp32 encoding (issue 16, item 2).

Evaluates one model on one collection twice, the same code path both times: fp32, then with the backbone
and head under ``torch.autocast(dtype=bfloat16)`` (``spladekit.common.devices.autocast``, what training's
``optimization.bf16`` uses). Reports nDCG@10 (and the collection's other measures) for both, a paired
randomization test over queries (``spladekit.experiments.stats.paired_test``), the encode time, and how far
the bf16 vectors of the first ``--sample`` documents are from fp32 (max abs difference, non-zero sets).
Nothing is cached: both passes encode the whole corpus.

    python benchmarks/autocast_parity.py --model ../shared/models/splade-tiny-msmarco \
        --data ../shared/data/scifact --device cuda --output parity.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def vector_agreement(encoder, texts: list[str], max_length: int, device: torch.device) -> dict:
    """How the bf16-autocast vectors of ``texts`` differ from fp32 ones."""
    from spladekit.common.devices import autocast

    fp32 = encoder.encode(texts, max_length=max_length, show_progress=False).toarray()
    with autocast(device, True):
        bf16 = encoder.encode(texts, max_length=max_length, show_progress=False).toarray()
    both = (fp32 > 0) | (bf16 > 0)
    return {
        "texts": len(texts),
        "max_abs_difference": float(np.abs(fp32 - bf16).max()),
        "max_fp32_weight": float(fp32.max()),
        "nonzero_fp32": int((fp32 > 0).sum()),
        "nonzero_bf16": int((bf16 > 0).sum()),
        "nonzero_jaccard": float(((fp32 > 0) & (bf16 > 0)).sum() / max(both.sum(), 1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model folder or hub id")
    parser.add_argument("--data", required=True, help="collection (folder, ir_datasets or HF id)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    parser.add_argument("--max-length", type=int, default=256, help="document token limit")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sample", type=int, default=256, help="documents whose vectors are compared")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--output", type=Path, help="also write the results as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from spladekit import SparseEncoder
    from spladekit.common.devices import autocast, resolve_device
    from spladekit.common.errors import SpladekitError
    from spladekit.data.collections import load_collection
    from spladekit.evaluation.evaluate import evaluate
    from spladekit.experiments.stats import paired_test

    try:  # every bad argument is one line naming it, before any encoding
        device = resolve_device(args.device)
        encoder = SparseEncoder.from_pretrained(args.model, device=str(device))
        collection = load_collection(args.data, split=args.split)
    except SpladekitError as error:
        raise SystemExit(f"autocast_parity.py: {error}") from None
    results = {}
    for name, bf16 in (("fp32", False), ("bf16-autocast", True)):
        started = time.perf_counter()
        with autocast(device, bf16):
            result = evaluate(
                encoder,
                collection,
                max_length=args.max_length,
                batch_size=args.batch_size,
                cache=False,
                show_progress=False,
            )
        results[name] = {
            "metrics": result.metrics,
            "efficiency": result.efficiency,
            "timings": result.timings,
            "seconds": round(time.perf_counter() - started, 2),
            "per_query": result.per_query,
        }
        print(f"{name}: {json.dumps(result.metrics)} in {results[name]['seconds']} s", file=sys.stderr)
    sample = list(collection.corpus.texts[: args.sample])
    report = {
        "model": args.model,
        "data": args.data,
        "split": args.split,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "command": " ".join(sys.argv),
        "max_length": args.max_length,
        "vectors": vector_agreement(encoder, sample, args.max_length, device),
        "results": results,
    }
    test = paired_test(
        results["bf16-autocast"]["per_query"]["nDCG@10"],
        results["fp32"]["per_query"]["nDCG@10"],
        "bf16-autocast",
        "fp32",
    )
    report["paired_test_ndcg10"] = test.to_dict() if test else None
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    for name, row in results.items():
        print(
            f"| {name} | "
            + " | ".join(f"{key} {value:.4f}" for key, value in row["metrics"].items())
            + f" | FLOPS {row['efficiency']['flops']:.2f} | {row['seconds']} s |"
        )
    print(json.dumps({"vectors": report["vectors"], "paired_test_ndcg10": report["paired_test_ndcg10"]}, indent=1))


if __name__ == "__main__":
    main()
