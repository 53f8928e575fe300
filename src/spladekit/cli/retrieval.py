"""index, search, evaluate: the vectors → run → metrics half of the pipeline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from spladekit.cli.app import app, emit, opened, write_json
from spladekit.cli.core import (
    BF16,
    COMPILE,
    DEVICE,
    JSON_FLAG,
    JSON_OUTPUT,
    PRECISION,
    TRUST_REMOTE_CODE,
    checked_device,
    chosen_precision,
    max_active_dims_option,
)
from spladekit.common.errors import SpladekitError
from spladekit.common.schema import MIN_TOKEN_LIMIT
from spladekit.index import BACKENDS, backend_class, check_backend
from spladekit.index.base import Restartable

if TYPE_CHECKING:
    import scipy.sparse as sp


def backend_help() -> str:
    """``--backend`` help, from the registry: every backend with its one-line summary."""
    return "Search backend: " + "; ".join(f"{name} ({searcher.summary})" for name, searcher in BACKENDS.items()) + "."


def params_help(role: str) -> str:
    """``--param`` help, from the declarations: every backend's parameters that ``role`` accepts (build: all,
    search ones included as the index's defaults; search: the search ones), with allowed values and default."""
    lines = []
    for name, searcher in BACKENDS.items():
        params = [param for param in searcher.declared_params if role == "build" or param.role == "search"]
        lines.append(f"{name}: " + ("; ".join(param.describe() for param in params) or "no parameters") + ".")
    intro = {
        "build": "Backend parameter NAME=VALUE, repeatable (search parameters set the index's defaults).",
        "search": "Search parameter NAME=VALUE, repeatable (default: the index's).",
    }[role]
    return "\n\n".join([intro, *lines])  # typer keeps a paragraph break as a line break


BACKEND = typer.Option("exact", help=backend_help())
BUILD_PARAMS = typer.Option([], "--param", help=params_help("build"))


def parse_params(pairs: list[str]) -> dict[str, str]:
    """``["n_postings=2000", "heap_factor=0.8"]`` → ``{"n_postings": "2000", "heap_factor": "0.8"}``: values stay
    strings; the backend's declarations type and check them (``Searcher.check_params``)."""
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SpladekitError(f"--param expects NAME=VALUE, got {pair!r}")
        params[name] = value
    return params


@app.command()
def index(
    vectors: Path = typer.Argument(
        ...,
        help="Vectors folder written by `spladekit encode` (sharded: read shard by "
        "shard, each checked against the manifest's sha256) or a single-file one "
        "(vectors.npz, ids.json).",
    ),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        help="Index folder to write (manifest.json with format "
        "version and sha256 per file, backend files, ids.json). Written atomically.",
    ),
    backend: str = BACKEND,
    param: list[str] = BUILD_PARAMS,
    max_active_dims: Optional[int] = max_active_dims_option(
        "document (pruned before the index is built; recorded in the manifest)"
    ),
    overwrite: bool = typer.Option(False, help="Replace an existing index folder (once the new one is complete)."),
    as_json: bool = JSON_FLAG,
) -> None:
    """Build a search index over encoded documents."""
    from spladekit.common.sparse import check_max_active_dims, keep_top_weights
    from spladekit.vectors.artifact import Vectors

    searcher_class = backend_class(backend)
    params = check_backend(backend, parse_params(param))  # parameters and prerequisites, before reading the vectors
    check_max_active_dims(max_active_dims)
    with opened(output, folder=True, overwrite=overwrite) as staged:
        ids: list[str] = []
        meta: dict = {}
        postings = 0
        reading = 0.0  # seconds spent reading and verifying shards, not building

        def blocks() -> Iterator[sp.csr_matrix]:  # shard by shard: pruned, ids and postings collected on the way
            nonlocal meta, postings, reading
            ids.clear()  # a builder may read the blocks twice (a scale derived from the weights): count the last
            postings = 0
            shards = Vectors.blocks(vectors)
            while True:
                started = time.perf_counter()
                block = next(shards, None)
                reading += time.perf_counter() - started
                if block is None:
                    return
                matrix = block.matrix if max_active_dims is None else keep_top_weights(block.matrix, max_active_dims)
                ids.extend(block.ids)
                meta = block.meta
                postings += int(matrix.nnz)
                yield matrix

        started = time.perf_counter()
        with searcher_class.build_from_blocks(Restartable(blocks), **params) as searcher:
            seconds = time.perf_counter() - started - reading
            if not searcher.n_docs:  # exact, seismic, qdrant and milvus would save an index of nothing
                raise SpladekitError(f"{vectors}: no document vectors: nothing to index")
            searcher.doc_ids = ids
            searcher.save(
                staged,
                meta={
                    "vectors": str(vectors),
                    "model": meta.get("model"),
                    "max_length": meta.get("max_length"),
                    "max_active_dims": max_active_dims,
                },
            )
    payload = {
        "index": str(output),
        "backend": backend,
        "docs": searcher.n_docs,
        "vocab_size": searcher.vocab_size,
        "params": searcher.params,
        "max_active_dims": max_active_dims,
        "postings": postings,
        "build_seconds": round(seconds, 3),
    }
    emit(
        payload, as_json, None, f"{backend} index of {searcher.n_docs:,} documents built in {seconds:.1f}s -> {output}"
    )


@app.command()
def search(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Folder written by `spladekit index`."),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        help="TREC run file to write (query Q0 doc rank score tag; must not exist unless --overwrite).",
    ),
    queries: Optional[Path] = typer.Option(None, help='Queries to encode with --model: JSONL {"_id", "text"}.'),
    model: Optional[str] = typer.Option(None, help="Model that encoded the documents (hub id or folder)."),
    query_vectors: Optional[Path] = typer.Option(
        None, help="Pre-encoded queries (a `spladekit encode` folder) instead of --queries/--model."
    ),
    k: int = typer.Option(1000, "--hits", min=1, help="Documents retrieved per query."),
    max_length: Optional[int] = typer.Option(
        None,
        "--query-max-length",
        min=MIN_TOKEN_LIMIT,
        help="Query token limit (default: the model's query limit, else its max length).",
    ),
    batch_size: int = typer.Option(32, min=1, help="Queries per forward pass."),
    param: list[str] = typer.Option([], "--param", help=params_help("search")),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output run file."),
    device: str = DEVICE,
    precision: str = PRECISION,
    bf16: bool = BF16,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
) -> None:
    """Search an index with queries and write a TREC run file."""
    from spladekit.data import read_corpus
    from spladekit.evaluation.run import Run
    from spladekit.index import index_backend
    from spladekit.vectors.artifact import Vectors

    if query_vectors is None and (queries is None or model is None):
        raise SpladekitError("give --queries and --model, or --query-vectors")
    checked_device(device)
    precision = chosen_precision(precision, bf16)
    with opened(output, folder=False, overwrite=overwrite) as staged:
        searcher_class = index_backend(index_dir)
        params = searcher_class.check_params(parse_params(param), "search")  # before reading anything
        # then the queries: unreadable or empty ones fail before the index is opened (an engine's may be rebuilt)
        if query_vectors is not None:
            encoded = Vectors.load(query_vectors)
            vectors, query_ids = encoded.matrix, encoded.ids
            if not query_ids:
                raise SpladekitError(f"{query_vectors}: no query vectors: nothing to search")
        else:
            assert queries is not None  # checked above
            parsed = read_corpus(queries)  # an empty file is refused
            query_ids = parsed.ids
        with searcher_class.load(index_dir) as searcher:
            if searcher.doc_ids is None:
                raise SpladekitError(f"{index_dir}: index has no ids.json; rebuild it with `spladekit index`")
            if query_vectors is None:
                from spladekit.model.loading import load_model

                assert model is not None  # checked above
                encoder = load_model(model, trust_remote_code=trust_remote_code, device=device, precision=precision)
                if encoder.vocab_size != searcher.vocab_size:
                    raise SpladekitError(
                        f"vocabulary mismatch: model {model} has {encoder.vocab_size} terms, the index "
                        f"{searcher.vocab_size}"
                    )
                vectors = encoder.encode_query(
                    parsed.texts, batch_size=batch_size, max_length=max_length, ids=parsed.ids
                )
            started = time.perf_counter()
            result = searcher.search(vectors, k=k, **params)
            seconds = time.perf_counter() - started
            Run.from_hits(query_ids, searcher.doc_ids, result.doc_indices, result.scores).write(
                staged, tag=f"spladekit-{searcher.name}"
            )
    payload = {
        "run": str(output),
        "queries": len(query_ids),
        "k": k,
        "backend": searcher.name,
        "search_ms_per_query": 1000 * seconds / max(len(query_ids), 1),
    }
    emit(
        payload,
        as_json,
        None,
        f"searched {len(query_ids):,} queries ({payload['search_ms_per_query']:.2f} ms/query) -> {output}",
    )


@app.command()
def evaluate(
    model: str = typer.Argument(
        ...,
        help="Hub id or folder of a model (spladekit, inference-free spladekit, "
        "sentence-transformers SPLADE or inference-free Router, or any masked-LM).",
    ),
    data: str = typer.Option(
        ...,
        help="A collection folder (BEIR: corpus.jsonl, queries.jsonl, qrels/<split>.tsv; "
        "or HF parquet layout), an ir_datasets id (beir/scifact/test, "
        "msmarco-passage/dev/small), a HF dataset id (zeta-alpha-ai/NanoSciFact) or a suite: "
        "msmarco-dev, dl19, beir13, nanobeir.",
    ),
    split: str = typer.Option(
        "test", help="Qrels split (BEIR folders: qrels/<split>.tsv; ir_datasets: <id>/<split> when it exists)."
    ),
    data_root: Optional[Path] = typer.Option(
        None,
        help="For suites: read every member from DATA_ROOT/<name>/ "
        "instead of downloading (names: see docs/evaluation.md).",
    ),
    backend: str = BACKEND,
    param: list[str] = BUILD_PARAMS,
    k: int = typer.Option(1000, "--hits", min=1, help="Documents retrieved per query (R@1000 needs 1000)."),
    max_length: Optional[int] = typer.Option(
        None,
        min=MIN_TOKEN_LIMIT,
        help="Token limit for documents, and for queries unless "
        "--query-max-length (default: the model's limit for each side, "
        "else 256).",
    ),
    query_max_length: Optional[int] = typer.Option(
        None,
        min=MIN_TOKEN_LIMIT,
        help="Token limit for queries (default: --max-length if given, else the model's query limit).",
    ),
    max_active_dims: Optional[int] = max_active_dims_option(
        "query and document (the cached corpus encoding is kept whole and pruned after reading)"
    ),
    batch_size: int = typer.Option(32, min=1, help="Texts per forward pass."),
    cache: bool = typer.Option(
        True,
        "--cache/--no-cache",
        help="Reuse/stash encoded corpora in $SPLADEKIT_CACHE "
        "(default ~/.cache/spladekit), keyed by model hash, corpus hash, max length.",
    ),
    run_dir: Optional[Path] = typer.Option(
        None,
        help="Also write each collection's TREC run to RUN_DIR/<name>.trec "
        "(a new folder unless --overwrite, written atomically).",
    ),
    device: str = DEVICE,
    precision: str = PRECISION,
    bf16: bool = BF16,
    compiled: bool = COMPILE,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
    output: Optional[Path] = JSON_OUTPUT,
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace an existing --json-out file and --run-dir folder."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Evaluate nothing: print the estimated encode / index / "
        "search time and disk for DATA (a suite: each collection and the total) from a "
        "short measurement on the machine it runs on (docs/evaluation.md). Reads no corpus, writes "
        "nothing (no --json-out, --run-dir or cache).",
    ),
    dry_run_sample: int = typer.Option(
        64,
        min=1,
        help="--dry-run: documents and queries encoded for the "
        "measurement (a local collection's first ones, else synthetic texts).",
    ),
    dry_run_index_docs: int = typer.Option(
        10_000, min=1, help="--dry-run: synthetic documents indexed and searched for the measurement."
    ),
) -> None:
    """Evaluate a model: nDCG@10 / RR@10 / R@1000 (ir_measures), FLOPS, nnz, encode and search time.

    Under `torchrun --nproc-per-node N -m spladekit evaluate …` every rank encodes its share of each corpus
    (one GPU per rank) into the shared evaluation cache; rank 0 encodes the queries, searches, scores and
    reports."""
    from spladekit.common import distributed
    from spladekit.common.sparse import check_max_active_dims
    from spladekit.evaluation.evaluate import evaluate_data, results_table
    from spladekit.model.loading import load_model

    backend_params = check_backend(backend, parse_params(param))  # parameters and prerequisites, before the model
    check_max_active_dims(max_active_dims)
    checked_device(device)
    precision = chosen_precision(precision, bf16)
    if dry_run:
        from spladekit.evaluation.cost import estimate_evaluation, estimate_table, workloads

        if distributed.launched():
            raise SpladekitError("--dry-run measures one process: run it without torchrun")
        if output is not None or run_dir is not None:
            raise SpladekitError("--dry-run writes nothing: drop --json-out / --run-dir (--json prints the estimate)")
        workloads(data, split, data_root)  # bad data is reported before the model loads
        encoder = load_model(model, trust_remote_code=trust_remote_code, device=device, precision=precision)
        estimate = estimate_evaluation(
            encoder,
            data,
            split=split,
            data_root=data_root,
            backend=backend,
            backend_params=backend_params,
            k=k,
            max_length=max_length,
            query_max_length=query_max_length,
            batch_size=batch_size,
            max_active_dims=max_active_dims,
            sample=dry_run_sample,
            synthetic_docs=dry_run_index_docs,
        )
        emit({"model": model, **estimate}, as_json, None, estimate_table(estimate))
        return
    if output is not None and run_dir is not None and output.absolute() == run_dir.absolute():
        raise SpladekitError(f"{output}: --json-out and --run-dir must differ")
    processes = distributed.setup(device) if distributed.launched() else None  # torchrun: every rank encodes
    if processes is not None and not processes.main:
        from spladekit.evaluation.evaluate import cache_corpora

        encoder = load_model(
            model,
            trust_remote_code=trust_remote_code,
            device=str(processes.device),
            precision=precision,
            compiled=compiled,
        )
        cache_corpora(encoder, data, split, data_root, max_length, batch_size, processes)
        distributed.teardown(processes)
        return  # rank 0 searches, scores and reports
    with (
        opened(output, folder=False, overwrite=overwrite) as staged,
        opened(run_dir, folder=True, overwrite=overwrite) as staged_runs,
    ):
        where = device if processes is None else str(processes.device)
        encoder = load_model(
            model, trust_remote_code=trust_remote_code, device=where, precision=precision, compiled=compiled
        )
        result = evaluate_data(
            encoder,
            data,
            split=split,
            data_root=data_root,
            run_dir=staged_runs,
            backend=backend,
            backend_params=backend_params,
            k=k,
            max_length=max_length,
            query_max_length=query_max_length,
            max_active_dims=max_active_dims,
            batch_size=batch_size,
            cache=cache,
            processes=processes,
        )
        payload = {"model": model, **result.to_dict()}
        write_json(staged, payload)
    if processes is not None:
        distributed.teardown(processes)
    emit(payload, as_json, None, results_table(result))


@app.command()
def fidelity(
    model: str = typer.Argument(..., help="Hub id or folder of a model (any model `evaluate` takes)."),
    data: str = typer.Option(
        ..., help="One collection: a BEIR folder, HF parquet folder or dataset id, or an ir_datasets id (no suites)."
    ),
    split: str = typer.Option("test", help="Qrels split."),
    target: list[str] = typer.Option(
        [],
        "--target",
        help="A target to measure, repeatable (default: all): lucene-9bit (Elasticsearch / OpenSearch rank_features, "
        "ES sparse_vector), opensearch-byte (OpenSearch sparse_vector, swept over its ingest ceiling), qdrant-uint8, "
        "qdrant-float16, impacts (CIFF / Anserini / PISA, swept over the scale), bmp (run on BMP); onnx-int8 (the int8 "
        "ONNX graph: re-encodes the collection, only when named).",
    ),
    k: int = typer.Option(1000, "--hits", min=1, help="Documents retrieved per query (R@1000 needs 1000)."),
    tolerance: float = typer.Option(
        0.001, help="Drift of a measure from float32 still counted as none (the sweep summary); >= 0."
    ),
    max_length: Optional[int] = typer.Option(
        None, min=MIN_TOKEN_LIMIT, help="Token limit for documents, and for queries unless --query-max-length."
    ),
    query_max_length: Optional[int] = typer.Option(None, min=MIN_TOKEN_LIMIT, help="Token limit for queries."),
    batch_size: int = typer.Option(32, min=1, help="Texts per forward pass."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Reuse/stash the encoded corpus in $SPLADEKIT_CACHE."),
    device: str = DEVICE,
    precision: str = PRECISION,
    bf16: bool = BF16,
    compiled: bool = COMPILE,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
    output: Optional[Path] = JSON_OUTPUT,
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --json-out file."),
) -> None:
    """What each engine's storage of the weights costs: the collection searched with the weights as Elasticsearch,
    OpenSearch, Qdrant, CIFF/Anserini/PISA and BMP hold them: each measure's drift from exact float32, and the top-10
    kept (docs/export.md)."""
    from spladekit.data import load_collection
    from spladekit.data.suites import SUITES
    from spladekit.evaluation.fidelity import check_targets, check_tolerance, fidelity_table
    from spladekit.evaluation.fidelity import fidelity as measure_fidelity
    from spladekit.model.loading import load_model

    check_targets(target)
    check_tolerance(tolerance)
    checked_device(device)
    precision = chosen_precision(precision, bf16)
    if data in SUITES:
        raise SpladekitError(f"fidelity measures one collection, and {data} is a suite: name one of its collections")
    with opened(output, folder=False, overwrite=overwrite) as staged:
        collection = load_collection(data, split)
        encoder = load_model(model, trust_remote_code=trust_remote_code, device=device, precision=precision)
        report = measure_fidelity(
            encoder,
            collection,
            targets=target or None,
            k=k,
            max_length=max_length,
            query_max_length=query_max_length,
            batch_size=batch_size,
            cache=cache,
            tolerance=tolerance,
        )
        payload = {"model": model, "data": data, "split": split, **report.to_dict()}
        write_json(staged, payload)
    emit(payload, as_json, None, fidelity_table(report))


def parse_grid(pairs: list[str]) -> dict[str, list[str]] | None:
    """``["query_cut=5,10", "heap_factor=0.7"]`` → ``{"query_cut": ["5", "10"], "heap_factor": ["0.7"]}``."""
    if not pairs:
        return None
    grid = {}
    for pair in pairs:
        name, sep, values = pair.partition("=")
        if not sep or not name or not values:
            raise SpladekitError(f"--grid expects NAME=V1,V2,…, got {pair!r}")
        grid[name] = values.split(",")
    return grid


@app.command("tune-index")
def tune_index(
    vectors: Path = typer.Argument(..., help="Document vectors folder (`spladekit encode`): the model's own vectors."),
    query_vectors: Path = typer.Option(..., help="Query vectors folder (`spladekit encode --side query`)."),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        help="Folder to write: tuning.json (every point, the frontier, the choice per target), frontier.png and, "
        "unless --no-index, index/ built with the choice for --index-target. Written atomically.",
    ),
    backend: str = typer.Option(
        "seismic", help="Backend to tune: seismic, bmp or pisa (default grids), or any with --grid."
    ),
    grid: list[str] = typer.Option(
        [],
        "--grid",
        help="NAME=V1,V2,… repeatable: the values of one parameter to try (default: spladekit.evaluation.tuning.GRIDS; "
        "seismic: n_postings, summary_energy, query_cut, heap_factor; bmp: bsize, alpha, beta; pisa: block_size, "
        "algorithm). Every combination is tried.",
    ),
    k: int = typer.Option(10, "--hits", min=1, help="Recall is recall@K of the exact top-K."),
    target: list[float] = typer.Option([], "--target", help="Recall targets, repeatable (default: 0.90 0.95 0.99)."),
    index_target: float = typer.Option(0.95, help="The target whose fastest configuration builds index/."),
    repeats: int = typer.Option(3, min=1, help="Timed passes over the queries per configuration (the best counts)."),
    write_index: bool = typer.Option(
        True, "--index/--no-index", help="Build index/ with the choice for --index-target."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output folder."),
    as_json: bool = JSON_FLAG,
) -> None:
    """Sweep a backend's build and search parameters on your vectors and queries: µs/query (one thread) and
    recall@k against exact search, the recall-latency frontier, and the fastest configuration per recall target."""
    from spladekit.evaluation.tuning import TARGETS, check_grid, plot_frontier, tune
    from spladekit.vectors.artifact import Vectors

    targets = tuple(target) or TARGETS
    parsed = parse_grid(grid)
    check_grid(backend, parsed)  # before reading anything
    if not all(0 < value <= 1 for value in (*targets, index_target)):
        raise SpladekitError("recall targets (--target, --index-target) must be in (0, 1]")
    if write_index and index_target not in targets:
        raise SpladekitError(
            f"--index-target {index_target:g} is not one of the targets {', '.join(map(str, targets))}"
        )
    with opened(output, folder=True, overwrite=overwrite) as staged:
        documents, queries = Vectors.load(vectors), Vectors.load(query_vectors)
        if documents.vocab_size != queries.vocab_size:
            raise SpladekitError(
                f"{query_vectors}: {queries.vocab_size} dimensions, the documents {documents.vocab_size} "
                "(encode both with one model)"
            )
        tuning = tune(documents.matrix, queries.matrix, backend, parsed, k=k, targets=targets, repeats=repeats)
        report = {"vectors": str(vectors), "query_vectors": str(query_vectors), **tuning.to_dict()}
        plot_frontier(tuning, staged / "frontier.png")
        chosen = tuning.chosen().get(f"{index_target:g}")
        report["index"] = None
        if write_index and chosen is not None:
            with backend_class(backend).build(documents.matrix, **chosen.build, **chosen.search) as searcher:
                searcher.doc_ids = documents.ids
                searcher.save(
                    staged / "index",
                    meta={
                        "vectors": str(vectors),
                        "model": documents.meta.get("model"),
                        "tuning": report["chosen"],
                        "tuned_for_recall": index_target,
                    },
                )
            report["index"] = str(output / "index")
        write_json(staged / "tuning.json", report)
    lines = [
        f"{backend}: {len(tuning.points)} configurations on {tuning.docs:,} documents, {tuning.queries:,} queries; "
        f"exact search: {tuning.exact_us_per_query:,.0f} µs/query (one thread)"
    ]
    for name, point in tuning.chosen().items():
        lines.append(
            f"  recall@{k} >= {name}: "
            + (
                "not reached"
                if point is None
                else f"{point.us_per_query:,.0f} µs/query, recall {point.recall:.4f}, {point.build | point.search}"
            )
        )
    if write_index:
        lines.append(f"index for {index_target:g}: {report['index'] or 'not built (target not reached)'}")
    emit(report, as_json, None, "\n".join(lines + [f"-> {output}"]))
