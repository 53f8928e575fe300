"""Where the bf16 screen stops paying: splade-tiny's whole encode (tokenize, backbone, head) of real MS MARCO dev
queries and SciFact documents, at 1-16 texts a batch, with the head screened in bf16 (``fused-bf16``) and without it
(``fused``), side by side in one process; mean milliseconds per batch over one second each. The result sets
``spladekit.model.pooling.SCREEN_MIN_POSITIONS`` (the default ``auto`` head skips the screen below it).

    python docs/results/screen-threshold/run.py > docs/results/screen-threshold/result.txt
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    from spladekit.model.loading import load_model

    with (SHARED / "data" / "msmarco-passage-queries-qrels" / "queries-dev-small.jsonl").open() as lines:
        queries = [json.loads(line)["text"] for line, _ in zip(lines, range(400))]
    with (SHARED / "data" / "scifact" / "corpus.jsonl").open() as lines:
        documents = [json.loads(line)["text"] for line, _ in zip(lines, range(64))]
    model_path = SHARED / "models" / "splade-tiny-msmarco"
    models = {pooling: load_model(model_path, device="cpu", pooling=pooling) for pooling in ("fused-bf16", "fused")}
    tokenizer = models["fused"].tokenizer
    print("| texts | batch | padded positions (B × L) | fused-bf16 ms | fused ms | fused / fused-bf16 |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, texts in (("query", queries), ("document", documents)):
        for batch in (1, 2, 4, 8, 16):
            milliseconds = []
            for model in models.values():
                encode = model.encode_query if kind == "query" else model.encode_document
                for _ in range(3):
                    encode(texts[:batch], batch_size=batch, show_progress=False)
                calls, started = 0, time.perf_counter()
                while time.perf_counter() - started < 1.0:
                    first = (calls * batch) % (len(texts) - batch)
                    encode(texts[first : first + batch], batch_size=batch, show_progress=False)
                    calls += 1
                milliseconds.append((time.perf_counter() - started) / calls * 1000)
            limit = models["fused"].side_max_length(kind)
            ids = tokenizer(texts[:batch], truncation=True, max_length=limit)["input_ids"]
            positions = batch * max(len(row) for row in ids)
            screened, plain = milliseconds
            print(f"| {kind} | {batch} | {positions} | {screened:.2f} | {plain:.2f} | {plain / screened:.2f} |")


if __name__ == "__main__":
    main()
