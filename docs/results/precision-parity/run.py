"""The pre-registered precision parity experiment of PREDICTIONS.md (issue 45, item 3): nDCG@10 of splade-tiny at each
precision against fp32 on the five shared collections, paired per query, with the stated equivalence margin.

For each collection and precision the model is loaded with ``spladekit.load_model(…, precision=P)`` and evaluated
with ``spladekit.evaluation.evaluate.evaluate(…, cache=False)`` (exact search, k = 1000, the model's token limits:
the same path as ``spladekit evaluate --precision P``); every query's nDCG@10 is written. Then each precision is
compared with fp32 by :func:`spladekit.experiments.stats.contrast` (stratified sign-flip test, query bootstrap, TOST
with ``--margin``) per collection and over the five (equal weights), and the vectors of the first ``--agreement-docs``
documents of each collection are compared with fp32's (top-10 overlap, largest |difference|).

    python docs/results/precision-parity/run.py --output docs/results/precision-parity/results.json

Smoke run (checks the script, proves nothing): ``--collections cranfield --limit-queries 20 --limit-docs 200``.

The GPU run of PREDICTIONS.md's "On a GPU" section (bf16 autocast on CUDA against fp32 on CUDA):

    python docs/results/precision-parity/run.py --device cuda --precisions bf16 --output results-gpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT / "src"))

COLLECTIONS = ("scifact", "cranfield", "cisi", "vaswani", "trec-dl-2019-subset")
PRECISIONS = ("fp32", "bf16", "int8")
MARGIN = 0.002  # stated in PREDICTIONS.md before any run; never changed after one
MEASURE = "nDCG@10"
ALPHA = 0.05


def limited(collection, queries: int | None, docs: int | None):
    """The collection cut to its first ``queries`` judged queries and to ``docs`` documents (those judged for the kept
    queries first, then the corpus in order): a smoke run's collection, not a result."""
    if queries is None and docs is None:
        return collection
    from spladekit.data.jsonl import Corpus

    keep_queries = [qid for qid in collection.queries.ids if qid in collection.qrels][:queries]
    kept = set(keep_queries)
    qrels = {qid: judged for qid, judged in collection.qrels.items() if qid in kept}
    position = {qid: i for i, qid in enumerate(collection.queries.ids)}
    queries_corpus = Corpus(keep_queries, [collection.queries.texts[position[qid]] for qid in keep_queries])
    judged = {doc for judged in qrels.values() for doc in judged}
    order = [i for i, doc in enumerate(collection.corpus.ids) if doc in judged]
    order += [i for i, doc in enumerate(collection.corpus.ids) if doc not in judged]
    order = sorted(order[: docs or len(order)])
    corpus = Corpus([collection.corpus.ids[i] for i in order], [collection.corpus.texts[i] for i in order])
    return replace(collection, corpus=corpus, queries=queries_corpus, qrels=qrels)


def top_k_overlap(reference: np.ndarray, other: np.ndarray, k: int = 10) -> float:
    shares = []
    for row_a, row_b in zip(reference, other):
        n = min(k, int((row_a > 0).sum()))
        if n:
            top_a = set(np.argsort(-row_a, kind="stable")[:n].tolist())
            top_b = set(np.argsort(-row_b, kind="stable")[:n].tolist())
            shares.append(len(top_a & top_b) / n)
    return float(np.mean(shares)) if shares else float("nan")


def machine() -> dict:
    cpu = ""
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    from spladekit.common.devices import native_bf16

    return {
        "cpu": cpu,
        "platform": platform.platform(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "native_bf16": native_bf16(torch.device("cpu")),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cuda_native_bf16": native_bf16(torch.device("cuda")) if torch.cuda.is_available() else None,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "commit": commit,
    }


def analyse(per_query: dict[str, dict[str, dict[str, float]]], collections: list[str], margin: float) -> dict:
    """Each precision against fp32: per collection and over all of them (equal weights), with TOST at ``margin``."""
    from spladekit.experiments.stats import contrast

    analysis = {}
    for precision in per_query:
        if precision == "fp32":
            continue
        rows = {}
        for name in collections + ["all"]:
            names = collections if name == "all" else [name]
            a = {(c, q): v for c in names for q, v in per_query[precision][c].items()}
            b = {(c, q): v for c in names for q, v in per_query["fp32"][c].items()}
            result = contrast([a], [b], precision, "fp32", margin=margin)
            rows[name] = None if result is None else asdict(result)
        holds = [rows[name] is not None and rows[name]["equivalent"] for name in collections + ["all"]]
        analysis[precision] = {
            "contrasts": rows,
            # the pre-registered decision rule (PREDICTIONS.md): equivalent on every collection and over all five
            "parity_holds": bool(all(holds)) and len(collections) == len(COLLECTIONS),
            "parity_holds_on_the_collections_run": bool(all(holds)),
        }
    return analysis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=SHARED / "models" / "splade-tiny-msmarco")
    parser.add_argument("--data-root", type=Path, default=SHARED / "data")
    parser.add_argument("--collections", default=",".join(COLLECTIONS))
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="fp32 is always run (the reference)")
    parser.add_argument("--margin", type=float, default=MARGIN, help="the pre-registered margin; do not change")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--agreement-docs", type=int, default=256)
    parser.add_argument("--limit-queries", type=int, help="smoke run only: the first N judged queries")
    parser.add_argument("--limit-docs", type=int, help="smoke run only: N documents (the judged ones first)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for the GPU section (int8 runs on the CPU only)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()

    from spladekit.common.errors import SpladekitError
    from spladekit.data.collections import load_collection
    from spladekit.evaluation.evaluate import evaluate
    from spladekit.model.loading import load_model

    collections = [name.strip() for name in args.collections.split(",") if name.strip()]
    precisions = ["fp32"] + [p.strip() for p in args.precisions.split(",") if p.strip() and p.strip() != "fp32"]
    smoke = args.limit_queries is not None or args.limit_docs is not None
    try:
        encoders = {p: load_model(args.model, device=args.device, precision=p) for p in precisions}
        loaded = {name: load_collection(args.data_root / name) for name in collections}
    except SpladekitError as error:
        raise SystemExit(f"run.py: {error}") from None
    report: dict = {
        "command": " ".join(["python", *sys.argv]),
        "smoke_run": smoke,
        "margin": args.margin,
        "alpha": ALPHA,
        "measure": MEASURE,
        "model": str(args.model),
        "device": args.device,
        "machine": machine(),
        "collections": {},
        "per_query": {p: {} for p in precisions},
    }
    for name in collections:
        collection = limited(loaded[name], args.limit_queries, args.limit_docs)
        sample = collection.corpus.texts[: args.agreement_docs]
        reference = encoders["fp32"].encode(sample, show_progress=False).toarray()
        entry: dict = {"documents": len(collection.corpus), "queries": len(collection.qrels), "precisions": {}}
        for precision, encoder in encoders.items():
            started = time.perf_counter()
            result = evaluate(encoder, collection, cache=False, show_progress=False, batch_size=args.batch_size)
            seconds = time.perf_counter() - started
            vectors = reference if precision == "fp32" else encoder.encode(sample, show_progress=False).toarray()
            entry["precisions"][precision] = {
                "metrics": result.metrics,
                "provenance_precision": result.provenance["precision"],
                "seconds": round(seconds, 1),
                "top10_overlap_vs_fp32": top_k_overlap(reference, vectors),
                "max_abs_difference_vs_fp32": float(np.abs(reference - vectors).max()),
            }
            report["per_query"][precision][name] = result.per_query[MEASURE]
            print(f"{name:<22} {precision:<5} {MEASURE} {result.metrics[MEASURE]:.4f}  ({seconds:.0f} s)", flush=True)
        report["collections"][name] = entry
    report["analysis"] = analyse(report["per_query"], collections, args.margin)
    for precision, verdict in report["analysis"].items():
        for name, row in verdict["contrasts"].items():
            if row is not None:
                print(
                    f"{precision} - fp32 {name:<22} D = {row['mean_difference']:+.4f} "
                    f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]  TOST p = {row['tost_p_value']:.4f}  "
                    f"equivalent: {row['equivalent']}"
                )
        print(f"{precision}: parity holds (pre-registered rule): {verdict['parity_holds']}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
