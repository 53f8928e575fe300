"""max_active_dims sweep: effectiveness vs index size and FLOPS when vectors keep only their k largest weights.

The corpus is encoded ONCE (``spladekit.evaluation.evaluate.encode_corpus``, through the evaluation cache, so a rerun
reads it back) and the queries once; every row then prunes those vectors with
``vectors_ops.keep_top_weights`` (the function behind ``--max-active-dims`` everywhere), builds an exact
index, searches, and scores the run with ``ir_measures``. Two regimes per k:

* ``documents``: only the documents are pruned (``spladekit index --max-active-dims k``), queries whole;
* ``both``: documents and queries pruned (``spladekit evaluate --max-active-dims k``).

The ``both`` row of the smallest k is checked against ``spladekit.evaluation.evaluate.evaluate(..., max_active_dims=k)``
(same metrics, or the script fails), so the table is what the product computes.

Reported per row: nDCG@10, RR@10, R@1000, FLOPS (``Σ_v p_q(v)·p_d(v)``), average active terms per
query / document, postings (stored document weights) and the bytes of the saved exact index folder.

    SPLADEKIT_CACHE=/tmp/mad-cache nice -n 10 python benchmarks/max_active_dims.py \\
        --model ../shared/models/splade-tiny-msmarco --data ../shared/data/scifact --split test \\
        --max-length 256 --output docs/results/max-active-dims
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import scipy.sparse as sp

from spladekit.common.atomic import atomic_file
from spladekit.common.sparse import keep_top_weights
from spladekit.data import Collection, load_collection, reconcile
from spladekit.evaluation.evaluate import active_per_row, compute_metrics, encode_corpus, evaluate, retrieval_flops
from spladekit.evaluation.run import Run
from spladekit.index import build_index
from spladekit.model.encoder import SparseEncoder

REGIMES = ("documents", "both")


def index_bytes(documents: sp.csr_matrix) -> int:
    """Bytes of the exact index folder (postings, manifest) that ``spladekit index`` would write."""
    searcher = build_index(documents, "exact")
    with tempfile.TemporaryDirectory() as folder:
        searcher.save(Path(folder) / "index")
        return sum(path.stat().st_size for path in (Path(folder) / "index").iterdir())


def sweep_row(
    collection: Collection, documents: sp.csr_matrix, queries: sp.csr_matrix, regime: str, k: int | None
) -> dict:
    if k is not None:
        documents = keep_top_weights(documents, k)
        if regime == "both":
            queries = keep_top_weights(queries, k)
    hits = build_index(documents, "exact").search_batches(queries, k=1000, show_progress=False)
    run = Run.from_hits(collection.queries.ids, collection.corpus.ids, hits.doc_indices, hits.scores)
    metrics, _ = compute_metrics(collection.qrels, run, collection.measures)
    return {
        "regime": regime,
        "max_active_dims": k,
        **metrics,
        "flops": retrieval_flops(queries, documents),
        "avg_q_nnz": float(active_per_row(queries).mean()),
        "avg_d_nnz": float(active_per_row(documents).mean()),
        "postings": int(documents.nnz),
        "index_bytes": index_bytes(documents),
    }


def markdown(rows: list[dict], measures: list[str]) -> str:
    header = ["pruned", "max_active_dims", *measures, "FLOPS", "avg q nnz", "avg d nnz", "postings", "index MB"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 2 + "---:|" * (len(header) - 2)]
    for row in rows:
        lines.append(
            "| "
            + " | ".join(
                [
                    row["regime"],
                    "none" if row["max_active_dims"] is None else str(row["max_active_dims"]),
                    *(f"{row[m]:.4f}" for m in measures),
                    f"{row['flops']:.2f}",
                    f"{row['avg_q_nnz']:.1f}",
                    f"{row['avg_d_nnz']:.1f}",
                    f"{row['postings']:,}",
                    f"{row['index_bytes'] / 1e6:.2f}",
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_size, by_flops) = plt.subplots(1, 2, figsize=(11, 4.2))
    for regime, marker in zip(REGIMES, "os"):
        chosen = [row for row in rows if row["regime"] == regime]
        label = {"documents": "documents pruned", "both": "documents and queries pruned"}[regime]
        for axis, key, scale in ((by_size, "index_bytes", 1e-6), (by_flops, "flops", 1.0)):
            axis.plot(
                [row[key] * scale for row in chosen], [row["nDCG@10"] for row in chosen], marker=marker, label=label
            )
            for row in chosen:
                axis.annotate(
                    "none" if row["max_active_dims"] is None else str(row["max_active_dims"]),
                    (row[key] * scale, row["nDCG@10"]),
                    textcoords="offset points",
                    xytext=(4, -10),
                    fontsize=8,
                )
    by_size.set_xlabel("exact index size (MB)")
    by_flops.set_xlabel("FLOPS (expected multiply-adds per query-document pair)")
    by_flops.set_xscale("log")
    for axis in (by_size, by_flops):
        axis.set_ylabel("nDCG@10")
        axis.grid(alpha=0.3)
    by_flops.legend(loc="lower right")
    figure.suptitle(title)
    figure.tight_layout()
    with atomic_file(path, mode="wb") as stream:
        figure.savefig(stream, format="png", dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="a collection folder (BEIR layout) or id")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-length", type=int, default=256, help="token limit of documents and queries")
    parser.add_argument("--ks", default="8,16,32,64,128", help="comma-separated max_active_dims values (plus none)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--output", type=Path, required=True, help="prefix: writes OUTPUT.json and OUTPUT.png")
    args = parser.parse_args()
    ks: list[int | None] = [*sorted(int(k) for k in args.ks.split(",")), None]

    encoder = SparseEncoder.from_pretrained(args.model)
    collection = reconcile(load_collection(args.data, args.split))
    documents, info = encode_corpus(encoder, collection.corpus, args.max_length, args.batch_size, cache=True)
    queries = encoder.encode_query(
        collection.queries.texts, batch_size=args.batch_size, max_length=args.max_length, ids=collection.queries.ids
    )
    rows = [sweep_row(collection, documents.matrix, queries, regime, k) for regime in REGIMES for k in ks]

    smallest = ks[0]
    product = evaluate(
        encoder,
        collection,
        max_length=args.max_length,
        batch_size=args.batch_size,
        max_active_dims=smallest,
        show_progress=False,
    )
    ours = next(row for row in rows if row["regime"] == "both" and row["max_active_dims"] == smallest)
    for measure, value in product.metrics.items():
        if abs(value - ours[measure]) > 1e-9:
            raise SystemExit(f"{measure}: sweep {ours[measure]} != evaluate(max_active_dims={smallest}) {value}")

    measures = list(collection.measures)
    payload = {
        "model": args.model,
        "data": args.data,
        "split": args.split,
        "max_length": args.max_length,
        "docs": len(collection.corpus),
        "queries": len(collection.queries),
        "encode_docs_seconds": info["encode_docs_seconds"],
        "corpus_cached": info["corpus_cached"],
        "rows": rows,
    }
    with atomic_file(args.output.with_suffix(".json")) as stream:
        stream.write(json.dumps(payload, indent=2) + "\n")
    plot(
        rows,
        args.output.with_suffix(".png"),
        f"max_active_dims on {collection.name} ({args.split}, {len(collection.queries)} queries), "
        f"{Path(args.model).name}",
    )
    print(markdown(rows, measures))


if __name__ == "__main__":
    main()
