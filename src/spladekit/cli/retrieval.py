"""index, search, evaluate: the vectors → run → metrics half of the pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from spladekit.cli.app import app, emit, opened, write_json
from spladekit.cli.core import checked_device, chosen_precision
from spladekit.cli.options import (
    BF16,
    COMPILE,
    DEVICE,
    JSON_FLAG,
    JSON_OUTPUT,
    OVERWRITE_FILE,
    PRECISION,
    TRUST_REMOTE_CODE,
    doc_max_length_option,
    max_active_dims_option,
    option,
    query_max_length_option,
)
from spladekit.common.errors import SpladekitError
from spladekit.index import BACKENDS, check_backend


def backend_help() -> str:
    """``--backend`` help, from the registry: every backend with its one-line summary."""
    return "; ".join(f"{name} ({searcher.summary})" for name, searcher in BACKENDS.items()) + "."


def params_help(role: str) -> str:
    """``--param`` help, from the declarations: every backend's parameters that ``role`` accepts (build: all,
    search ones included as the index's defaults; search: the search ones), with allowed values and default."""
    lines = []
    for name, searcher in BACKENDS.items():
        params = [param for param in searcher.declared_params if role == "build" or param.role == "search"]
        lines.append(f"{name}: " + ("; ".join(param.describe() for param in params) or "no parameters") + ".")
    intro = {
        "build": "Search parameters set the index's defaults.",
        "search": "Here: search parameters only (default: the index's).",
    }[role]
    return "\n\n".join([intro, *lines])  # typer keeps a paragraph break as a line break


BACKEND = option("exact", "--backend", detail=backend_help())
BUILD_PARAMS = option([], "--param", detail=params_help("build"))


DOC_AND_QUERY_LIMIT = (
    "Here: also for queries unless --query-max-length (default: the model's limit for each side, else 256)."
)
QUERY_LIMIT = "Default: --doc-max-length if given, else the model's query limit."


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
    output: Path = option(
        ...,
        "--output",
        "-o",
        detail="Here: the index folder (manifest.json with format version and sha256 per file, backend files, "
        "ids.json).",
    ),
    backend: str = BACKEND,
    param: list[str] = BUILD_PARAMS,
    max_active_dims: Optional[int] = max_active_dims_option(
        "document (pruned before the index is built; recorded in the manifest)"
    ),
    overwrite: bool = option(False, "--overwrite"),
    as_json: bool = JSON_FLAG,
) -> None:
    """Build a search index over encoded documents."""
    from spladekit.index.building import build_index_folder

    built = build_index_folder(vectors, output, backend, parse_params(param), max_active_dims, overwrite)
    emit(
        built.to_dict(),
        as_json,
        None,
        f"{backend} index of {built.docs:,} documents built in {built.build_seconds:.1f}s -> {output}",
    )


@app.command()
def search(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Folder written by `spladekit index`."),
    output: Path = option(..., "--output", "-o", detail="Here: a TREC run file (query Q0 doc rank score tag)."),
    queries: Optional[Path] = option(None, "--queries", detail="Encoded with --model."),
    model: Optional[str] = option(None, "--model", detail="Here: the model that encoded the documents."),
    query_vectors: Optional[Path] = option(None, "--query-vectors", detail="Instead of --queries/--model."),
    k: int = option(1000, "--hits", min=1),
    max_length: Optional[int] = query_max_length_option(
        detail="(default: the model's query limit, else its document limit)."
    ),
    batch_size: int = option(32, "--batch-size", min=1),
    param: list[str] = option([], "--param", detail=params_help("search")),
    overwrite: bool = option(False, "--overwrite"),
    device: str = DEVICE,
    precision: str = PRECISION,
    bf16: bool = BF16,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
) -> None:
    """Search an index with queries and write a TREC run file."""
    from spladekit.evaluation.searching import search_to_run

    checked_device(device)
    searched = search_to_run(
        index_dir,
        output,
        queries=queries,
        model=model,
        query_vectors=query_vectors,
        k=k,
        query_max_length=max_length,
        batch_size=batch_size,
        params=parse_params(param),
        device=device,
        precision=chosen_precision(precision, bf16),
        trust_remote_code=trust_remote_code,
        overwrite=overwrite,
    )
    emit(
        searched.to_dict(),
        as_json,
        None,
        f"searched {searched.queries:,} queries ({searched.search_ms_per_query:.2f} ms/query) -> {output}",
    )


@app.command()
def evaluate(
    model: str = typer.Argument(
        ...,
        help="Hub id or folder of a model (spladekit, inference-free spladekit, "
        "sentence-transformers SPLADE or inference-free Router, or any masked-LM).",
    ),
    data: str = option(
        ...,
        "--data",
        detail="A collection folder (BEIR: corpus.jsonl, queries.jsonl, qrels/<split>.tsv; "
        "or HF parquet layout), an ir_datasets id (beir/scifact/test, "
        "msmarco-passage/dev/small), a HF dataset id (zeta-alpha-ai/NanoSciFact) or a suite: "
        "msmarco-dev, dl19, beir13, nanobeir.",
    ),
    split: str = option("test", "--split"),
    data_root: Optional[Path] = typer.Option(
        None,
        help="For suites: read every member from DATA_ROOT/<name>/ "
        "instead of downloading (names: see docs/evaluation.md).",
    ),
    backend: str = BACKEND,
    param: list[str] = BUILD_PARAMS,
    k: int = option(1000, "--hits", min=1, detail="R@1000 needs 1000."),
    max_length: Optional[int] = doc_max_length_option(detail=DOC_AND_QUERY_LIMIT),
    query_max_length: Optional[int] = query_max_length_option(detail=QUERY_LIMIT),
    max_active_dims: Optional[int] = max_active_dims_option(
        "query and document (the cached corpus encoding is kept whole and pruned after reading)"
    ),
    batch_size: int = option(32, "--batch-size", min=1),
    cache: bool = option(True, "--cache/--no-cache"),
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
    overwrite: bool = option(False, "--overwrite", detail="Here: the --json-out file and --run-dir folder."),
    dry_run: bool = option(
        False,
        "--dry-run",
        detail="Here: the estimated encode / index / search time and disk for DATA (a suite: each collection and "
        "the total) from a short measurement on the machine it runs on (docs/evaluation.md); reads no corpus, no "
        "--json-out, --run-dir or cache.",
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
    data: str = option(
        ...,
        "--data",
        detail="Here: one collection: a BEIR folder, HF parquet folder or dataset id, or an ir_datasets id "
        "(no suites).",
    ),
    split: str = option("test", "--split"),
    target: list[str] = typer.Option(
        [],
        "--target",
        help="A target to measure, repeatable (default: all): lucene-9bit (Elasticsearch / OpenSearch rank_features, "
        "ES sparse_vector), opensearch-byte (OpenSearch sparse_vector, swept over its ingest ceiling), qdrant-uint8, "
        "qdrant-float16, impacts (CIFF / Anserini / PISA, swept over the scale), bmp (run on BMP); onnx-int8 (the int8 "
        "ONNX graph: re-encodes the collection, only when named).",
    ),
    k: int = option(1000, "--hits", min=1, detail="R@1000 needs 1000."),
    tolerance: float = typer.Option(
        0.001, help="Drift of a measure from float32 still counted as none (the sweep summary); >= 0."
    ),
    max_length: Optional[int] = doc_max_length_option(detail=DOC_AND_QUERY_LIMIT),
    query_max_length: Optional[int] = query_max_length_option(detail=QUERY_LIMIT),
    batch_size: int = option(32, "--batch-size", min=1),
    cache: bool = option(True, "--cache/--no-cache"),
    device: str = DEVICE,
    precision: str = PRECISION,
    bf16: bool = BF16,
    compiled: bool = COMPILE,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
    output: Optional[Path] = JSON_OUTPUT,
    overwrite: bool = OVERWRITE_FILE,
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
    query_vectors: Path = option(..., "--query-vectors"),
    output: Path = option(
        ...,
        "--output",
        "-o",
        detail="Here: a folder with tuning.json (every point, the frontier, the choice per recall target), "
        "frontier.png and, unless --no-build-index, index/ built with the choice for --index-recall-target.",
    ),
    backend: str = option(
        "seismic",
        "--backend",
        detail="Here: the one to tune: seismic, bmp or pisa (default grids), or any with --grid.",
    ),
    grid: list[str] = typer.Option(
        [],
        "--grid",
        help="NAME=V1,V2,… repeatable: the values of one parameter to try (default: spladekit.evaluation.tuning.GRIDS; "
        "seismic: n_postings, summary_energy, query_cut, heap_factor; bmp: bsize, alpha, beta; pisa: block_size, "
        "algorithm). Every combination is tried.",
    ),
    k: int = option(10, "--hits", min=1, detail="Recall is recall@K of the exact top-K."),
    target: list[float] = typer.Option(
        [], "--recall-target", help="Recall targets, repeatable (default: 0.90 0.95 0.99)."
    ),
    index_target: float = typer.Option(
        0.95, "--index-recall-target", help="The recall target whose fastest configuration builds index/."
    ),
    repeats: int = typer.Option(3, min=1, help="Timed passes over the queries per configuration (the best counts)."),
    write_index: bool = typer.Option(
        True, "--build-index/--no-build-index", help="Build index/ with the choice for --index-recall-target."
    ),
    overwrite: bool = option(False, "--overwrite"),
    as_json: bool = JSON_FLAG,
) -> None:
    """Sweep a backend's build and search parameters on your vectors and queries: µs/query (one thread) and
    recall@k against exact search, the recall-latency frontier, and the fastest configuration per recall target."""
    from spladekit.evaluation.tuning import TARGETS, tune_folders

    tuning, report = tune_folders(
        vectors,
        query_vectors,
        output,
        backend,
        parse_grid(grid),
        k=k,
        targets=tuple(target) or TARGETS,
        index_target=index_target,
        repeats=repeats,
        write_index=write_index,
        overwrite=overwrite,
    )
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
