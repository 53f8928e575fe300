"""Inference-free vs full SPLADE, trained by the same recipe: SciFact nDCG@10 and query encoding speed.

Both models start from the same backbone and train with ``configs/train-example.yaml`` (plus ``--set``
overrides, e.g. ``optimization.steps=200``); the inference-free run adds ``model.kind=inference-free`` and
``regularizer.lambda_q=0`` (sentence-transformers' inference-free recipe: ``query_regularizer_weight=0``;
its query table starts from the IDF of the training documents). Both are evaluated in this process on the
same collection with the exact backend (one worker process per model, side by side). Query encoding speed is
timed on the collection's queries,
interleaved (one full pass of each model, repeated ``--repeats`` times, the best pass kept), so load from
other processes hits both alike; the ratio is the result.

The inference-free model is then exported to a sentence-transformers ``Router`` folder: sentence-transformers'
own ``encode_query`` / ``encode_document`` (every query, the first ``--router-docs`` documents) and
spladekit's reload of that folder are compared with spladekit's vectors (max |diff|) and with the rankings
spladekit gives over those documents (same exact index, top 10 and top 100 identical per query).

    nice python benchmarks/inference_free.py --output /tmp/inffree-bench --set optimization.steps=200
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from spladekit.data.collections import Collection, load_collection, reconcile
from spladekit.data.jsonl import Corpus
from spladekit.evaluation.evaluate import evaluate
from spladekit.export import export_sentence_transformers
from spladekit.index import build_index
from spladekit.model.loading import RetrievalModel, load_model
from spladekit.training import load_config, train

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def query_speed(models: dict[str, RetrievalModel], queries: list[str], batch_size: int, repeats: int) -> dict:
    """Best-of-``repeats`` queries/s of each model, passes interleaved model by model."""
    best = {name: float("inf") for name in models}
    for _ in range(repeats):
        for name, model in models.items():
            started = time.perf_counter()
            model.encode_query(queries, batch_size=batch_size, show_progress=False)
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: len(queries) / seconds for name, seconds in best.items()}


def test_collection(args: argparse.Namespace) -> Collection:
    """``--data`` / ``--split``; with ``--queries N --docs M`` a subset: the first N judged queries, every
    document they judge, and random other documents (seed 0) up to M documents."""
    collection = reconcile(load_collection(args.data, args.split))
    if args.queries is None:
        return collection
    keep_queries = collection.queries.ids[: args.queries]
    judged = {doc for query in keep_queries for doc in collection.qrels.get(query, {})}
    others = [doc for doc in collection.corpus.ids if doc not in judged]
    rng = np.random.default_rng(0)
    extra = rng.choice(len(others), size=max(0, min(len(others), args.docs - len(judged))), replace=False)
    keep_docs = judged | {others[i] for i in extra}
    rows = [i for i, doc in enumerate(collection.corpus.ids) if doc in keep_docs]
    return dataclasses.replace(
        collection,
        name=f"{collection.name} (subset: {len(keep_queries)} queries, {len(rows)} documents)",
        corpus=Corpus([collection.corpus.ids[i] for i in rows], [collection.corpus.texts[i] for i in rows]),
        queries=Corpus(keep_queries, collection.queries.texts[: args.queries]),
        qrels={query: collection.qrels[query] for query in keep_queries if query in collection.qrels},
    )


def evaluate_folder(folder: Path, args: argparse.Namespace, run_path: Path) -> dict:
    """Metrics, efficiency and timings of the model in ``folder`` on the test collection (in a worker process)."""
    collection = test_collection(args)
    result = evaluate(
        load_model(folder),
        collection,
        max_length=args.max_length,
        batch_size=args.batch_size,
        cache=False,
        run_path=run_path,
        show_progress=False,
    )
    return {**result.metrics, **result.efficiency, **result.timings}


def to_csr(tensor: torch.Tensor) -> sp.csr_matrix:
    """A sentence-transformers sparse (COO) embedding tensor as scipy CSR, without densifying it."""
    tensor = tensor.coalesce().cpu()
    rows, cols = tensor.indices().numpy()
    return sp.csr_matrix((tensor.values().float().numpy(), (rows, cols)), shape=tuple(tensor.shape), dtype=np.float32)


def max_abs_diff(a: sp.csr_matrix, b: sp.csr_matrix) -> float:
    difference = abs(a - b)
    return float(difference.max()) if difference.nnz else 0.0


def router_round_trip(free: RetrievalModel, collection: Collection, args: argparse.Namespace) -> dict:
    """Export ``free`` as a ``Router`` folder; compare sentence-transformers' ``encode_query`` /
    ``encode_document`` and spladekit's reload of the folder with spladekit's vectors (every query, the first
    ``--router-docs`` documents) and the rankings each gives over those documents."""
    from sentence_transformers import SparseEncoder as STSparseEncoder

    exported = export_sentence_transformers(free, args.output / "inference-free-st", overwrite=True)
    st_model = STSparseEncoder(str(exported), device="cpu")
    st_model.max_seq_length = args.max_length  # the document route's limit, as spladekit's evaluation used
    queries, documents = collection.queries.texts, collection.corpus.texts[: args.router_docs]
    reloaded = load_model(exported)
    vectors = {
        "spladekit": (
            free.encode_query(queries, show_progress=False),
            free.encode(documents, max_length=args.max_length, show_progress=False),
        ),
        "sentence-transformers": (
            to_csr(st_model.encode_query(queries, convert_to_tensor=True)),
            to_csr(st_model.encode_document(documents, batch_size=args.batch_size, convert_to_tensor=True)),
        ),
        "spladekit reload": (
            reloaded.encode_query(queries, show_progress=False),
            reloaded.encode(documents, max_length=args.max_length, show_progress=False),
        ),
    }
    hits = {name: build_index(d, "exact").search(q, k=100) for name, (q, d) in vectors.items()}
    ours_q, ours_d = vectors["spladekit"]
    report: dict = {"queries": len(queries), "documents": len(documents)}
    for name in ("sentence-transformers", "spladekit reload"):
        q, d = vectors[name]
        same = [np.array_equal(a, b) for a, b in zip(hits["spladekit"].doc_indices, hits[name].doc_indices)]
        top10 = [np.array_equal(a[:10], b[:10]) for a, b in zip(hits["spladekit"].doc_indices, hits[name].doc_indices)]
        report[name] = {
            "max_abs_diff_queries": max_abs_diff(q, ours_q),
            "max_abs_diff_documents": max_abs_diff(d, ours_d),
            "max_abs_diff_scores": float(np.abs(hits[name].scores - hits["spladekit"].scores).max()),
            "identical_top100": int(sum(same)),
            "identical_top10": int(sum(top10)),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "train-example.yaml")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="config override for both runs, e.g. optimization.steps=200 (repeatable)",
    )
    parser.add_argument("--data", type=Path, default=SHARED / "data" / "scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--queries", type=int, help="evaluate on a subset: the first N judged queries…")
    parser.add_argument("--docs", type=int, default=1000, help="…their judged documents + random others, M in all")
    parser.add_argument("--max-length", type=int, default=128, help="document token limit at evaluation")
    parser.add_argument("--router-docs", type=int, default=200, help="documents of the Router round trip")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, required=True, help="folder for the runs and results.json")
    parser.add_argument("--reuse", action="store_true", help="reuse the trained models already in --output")
    args = parser.parse_args()

    args.output.mkdir(parents=True, exist_ok=True)
    kinds = {"splade": [], "inference-free": ["model.kind=inference-free", "regularizer.lambda_q=0"]}
    results: dict = {"command_overrides": args.overrides, "train_seconds": {}, "evaluation": {}}
    models: dict[str, RetrievalModel] = {}
    for kind, extra in kinds.items():
        if args.reuse and (args.output / kind / "model").is_dir():
            models[kind] = load_model(args.output / kind / "model")
            continue
        config = load_config(args.config, [*args.overrides, *extra, "logging.progress=false"])
        started = time.perf_counter()
        run = train(config, args.output / kind, overwrite=True)
        results["train_seconds"][kind] = round(time.perf_counter() - started, 1)
        models[kind] = load_model(run.model)

    def save() -> None:  # after every stage, so that a long run shows what it has
        (args.output / "results.json").write_text(json.dumps(results, indent=2) + "\n")

    collection = test_collection(args)
    results["collection"] = {
        "name": collection.name,
        "queries": len(collection.queries),
        "documents": len(collection.corpus),
    }
    # one process per model: the same work, side by side (on a shared machine each gets its share of the CPUs)
    with ProcessPoolExecutor(max_workers=len(models), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {
            kind: pool.submit(evaluate_folder, args.output / kind / "model", args, args.output / f"{kind}.trec")
            for kind in models
        }
        results["evaluation"] = {kind: future.result() for kind, future in futures.items()}
    save()
    speed = query_speed(models, collection.queries.texts, args.batch_size, args.repeats)
    results["queries_per_second"] = speed
    results["query_speedup"] = speed["inference-free"] / speed["splade"]
    save()
    results["router_round_trip"] = router_round_trip(models["inference-free"], collection, args)
    save()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
