"""ONNX export of a SPLADE model against torch, side by side in one run on this CPU: the largest |difference| of the
weights, documents/s, and nDCG@10 on a BEIR collection for torch, the fp32 graph and the int8 graph.

    python benchmarks/onnx_scifact.py --model ../shared/models/splade-tiny-msmarco --data ../shared/data/scifact \\
        --output onnx-scifact.json [--speed-docs 1000]

Speed: the first ``--speed-docs`` documents of the corpus (real lengths), batches of 32 at the model's token limit,
each encoder timed twice in turn (torch, fp32, int8, torch, fp32, int8), the better of its two runs reported.
nDCG@10: ``spladekit.evaluation.evaluate(…, cache=False)`` on the whole collection with each encoder (exact search).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from spladekit import SparseEncoder, load_collection
from spladekit.evaluation.evaluate import evaluate
from spladekit.model.onnx import OnnxEncoder, export_onnx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--speed-docs", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    torch_encoder = SparseEncoder.from_pretrained(args.model)
    collection = load_collection(args.data, split=args.split)
    with tempfile.TemporaryDirectory() as scratch:
        exports = {}
        for name, quantize in (("onnx fp32", None), ("onnx int8", "int8")):
            folder = Path(scratch) / name.replace(" ", "-")
            folder.mkdir()
            exports[name] = export_onnx(torch_encoder, folder, quantize=quantize)
        encoders = {"torch": torch_encoder} | {
            name: OnnxEncoder(Path(scratch) / name.replace(" ", "-")) for name in exports
        }
        texts = collection.corpus.texts[: args.speed_docs]
        seconds: dict[str, list[float]] = {name: [] for name in encoders}
        vectors = {}
        for _ in range(2):
            for name, encoder in encoders.items():
                started = time.perf_counter()
                vectors[name] = encoder.encode(texts, batch_size=32, show_progress=False)
                seconds[name].append(time.perf_counter() - started)
        reference = vectors["torch"].toarray()
        rows = []
        for name, encoder in encoders.items():
            result = evaluate(encoder, collection, cache=False, show_progress=False)
            best = min(seconds[name])
            rows.append(
                {
                    "encoder": name,
                    "max_abs_diff_vs_torch": float(np.abs(vectors[name].toarray() - reference).max()),
                    "docs_per_s": round(len(texts) / best, 1),
                    "speed_vs_torch": round(min(seconds["torch"]) / best, 3),
                    "ndcg@10": round(result.metrics["nDCG@10"], 4),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    report = {
        "model": args.model,
        "data": args.data,
        "speed_docs": len(texts),
        "threads": torch.get_num_threads(),
        "rows": rows,
        "exports": exports,
    }
    args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
