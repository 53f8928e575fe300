"""export: a model to sentence-transformers, or encoded vectors to Qdrant / OpenSearch / Elasticsearch / CIFF."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from spladekit.cli.app import app, emit, opened
from spladekit.common.errors import SpladekitError
from spladekit.common.schema import MIN_TOKEN_LIMIT


class ExportFormat(str, Enum):
    sentence_transformers = "sentence-transformers"
    qdrant = "qdrant"
    opensearch = "opensearch"
    elasticsearch = "elasticsearch"
    ciff = "ciff"
    onnx = "onnx"


def _sentence_transformers(
    source: str, output: Path, max_length: Optional[int], overwrite: bool, trust_remote_code: bool
) -> dict:
    from spladekit.export import export_sentence_transformers
    from spladekit.model.loading import load_model

    with opened(output, folder=True, overwrite=overwrite) as staged:
        encoder = load_model(source, trust_remote_code=trust_remote_code, max_length=max_length)
        export_sentence_transformers(encoder, staged, trust_remote_code=trust_remote_code)
    return {
        "format": "sentence-transformers",
        "model": source,
        "output": str(output),
        "max_length": encoder.max_length,
        "vocab_size": encoder.vocab_size,
    }


def _onnx(
    source: str,
    output: Path,
    max_length: Optional[int],
    top_k: Optional[int],
    int8: bool,
    overwrite: bool,
    trust_remote_code: bool,
) -> dict:
    from spladekit.model.loading import load_model
    from spladekit.model.onnx import export_onnx

    with opened(output, folder=True, overwrite=overwrite) as staged:
        encoder = load_model(source, trust_remote_code=trust_remote_code, max_length=max_length, device="cpu")
        metadata = export_onnx(encoder, staged, top_k=top_k, quantize="int8" if int8 else None)
    return {**metadata, "format": "onnx", "model": source, "output": str(output)}


def _overlap(first: Path, second: Path) -> bool:
    """Whether two folders are one, or one holds the other: an output there would be written into (or, with
    --recreate / --overwrite, replace) the other."""
    first, second = first.resolve(), second.resolve()
    return first == second or first in second.parents or second in first.parents


def _qdrant(
    source: str,
    output: Optional[Path],
    url: Optional[str],
    qdrant_path: Optional[Path],
    collection: str,
    vector_name: str,
    recreate: bool,
    overwrite: bool,
) -> dict:
    from spladekit.export import export_qdrant

    if output is None and url is None and qdrant_path is None:
        raise SpladekitError(
            "--format qdrant needs --url (server), --qdrant-path (a Qdrant Edge shard) "
            "or --output (spladekit index folder)"
        )
    if url is not None and qdrant_path is not None:
        raise SpladekitError("--url (a server) and --qdrant-path (a local shard) name two places: give one")
    for first, second, names in (
        (output, qdrant_path, "--output and --qdrant-path"),
        (Path(source), qdrant_path, "the vectors folder and --qdrant-path"),
        (Path(source), output, "the vectors folder and --output"),
    ):
        if first is not None and second is not None and _overlap(first, second):
            raise SpladekitError(f"{second}: {names} are one folder (or one holds the other); give each its own")
    from spladekit.index import check_backend
    from spladekit.vectors.artifact import Vectors

    check_backend("qdrant", {"url": url})  # qdrant-client or qdrant-edge-py, before the vectors are read

    with (
        opened(output, folder=True, overwrite=overwrite) as staged,
        opened(qdrant_path, folder=True, overwrite=recreate, option="--recreate") as shard,
    ):
        documents = Vectors.load(source)
        payload = export_qdrant(
            documents.matrix,
            documents.ids,
            url=url,
            qdrant_path=shard,
            output=staged,
            collection=collection,
            vector_name=vector_name,
            recreate=recreate,
        )
    return payload


def _search_engine(
    source: str,
    engine: str,
    output: Optional[Path],
    model: Optional[str],
    queries: Optional[Path],
    field_type: Optional[str],
    index: str,
    field: str,
    max_active_dims: Optional[int],
    quantize: Optional[float],
    overwrite: bool,
    trust_remote_code: bool,
) -> dict:
    from spladekit.export import export_search_engine
    from spladekit.export.search_engine import vocabulary_tokens

    if output is None:
        raise SpladekitError(f"--format {engine} needs --output (folder for the NDJSON, mapping and query)")
    from spladekit.vectors.artifact import Vectors

    with opened(output, folder=True, overwrite=overwrite) as staged:
        documents = Vectors.load(source)
        model = model or documents.meta.get("model")
        if not model:
            raise SpladekitError(f"{source}: meta.json names no model; pass --model for the token strings")
        query_pair = None
        if queries is not None:
            encoded = Vectors.load(queries)
            query_pair = (encoded.matrix, encoded.ids)
        tokens = vocabulary_tokens(model, documents.vocab_size, trust_remote_code=trust_remote_code)
        payload = export_search_engine(
            documents.matrix,
            documents.ids,
            tokens,
            staged,
            engine=engine,
            field_type=field_type,
            index=index,
            field=field,
            max_active_dims=max_active_dims,
            scale=quantize,
            queries=query_pair,
        )
    return payload | {"output": str(output)}


def _ciff(
    source: str,
    output: Optional[Path],
    model: Optional[str],
    scale: Optional[float],
    overwrite: bool,
    trust_remote_code: bool,
) -> dict:
    from spladekit.export.ciff import export_ciff

    if output is None:
        raise SpladekitError("--format ciff needs --output (the .ciff file to write)")
    # export_ciff checks ciff-toolkit and the scale, then opens (checks, locks) the output before reading
    return export_ciff(
        source, output, model=model, scale=scale, overwrite=overwrite, trust_remote_code=trust_remote_code
    )


@app.command()
def export(
    source: str = typer.Argument(
        ...,
        help="sentence-transformers: a model (hub id or folder spladekit loads; an "
        "inference-free model becomes a Router folder). onnx: a model (inference-free: its document encoder, "
        "and its query weight table as it is). "
        "qdrant/opensearch/elasticsearch/ciff: a vectors folder written by `spladekit "
        "encode`.",
    ),
    fmt: ExportFormat = typer.Option(..., "--format", "-f", help="What to write (see SOURCE)."),
    output: Optional[Path] = typer.Option(
        None,
        "--output",
        "-o",
        help="Folder to write (atomically): the "
        "sentence-transformers model; the NDJSON + mapping + query for "
        "opensearch/elasticsearch; a spladekit index folder for qdrant; the "
        "CIFF file for ciff (gzip-compressed when it ends in .gz).",
    ),
    overwrite: bool = typer.Option(False, help="Replace an existing output folder (once the new one is complete)."),
    max_length: Optional[int] = typer.Option(
        None,
        min=MIN_TOKEN_LIMIT,
        help="sentence-transformers, onnx: token limit written into the folder (default: the model's, else 256).",
    ),
    top_k: Optional[int] = typer.Option(
        None, min=1, help="onnx: the graph returns the K largest weights (indices, values) instead of B × V weights."
    ),
    int8: bool = typer.Option(False, "--int8", help="onnx: dynamic int8 quantization of the graph's weights."),
    url: Optional[str] = typer.Option(None, help="qdrant: server/cluster URL (API key from $QDRANT_API_KEY)."),
    qdrant_path: Optional[Path] = typer.Option(
        None,
        help="qdrant: a new folder for a Qdrant Edge shard (Qdrant's engine in-process; open it with "
        "qdrant_edge.EdgeShard.load(path)); built beside it and swapped in complete, never among other files.",
    ),
    collection: str = typer.Option("spladekit", help="qdrant: collection name."),
    vector_name: str = typer.Option("splade", help="qdrant: name of the sparse vector in the collection."),
    recreate: bool = typer.Option(
        False,
        help="qdrant: replace an existing collection of that name (server), or the shard folder of --qdrant-path if "
        "spladekit wrote it (once the new one is complete).",
    ),
    model: Optional[str] = typer.Option(
        None,
        help="opensearch/elasticsearch/ciff: model whose tokenizer names the "
        "features / terms (default: the model recorded in the vectors' meta.json).",
    ),
    queries: Optional[Path] = typer.Option(
        None, help="opensearch/elasticsearch: query vectors folder; writes queries.jsonl with one query DSL per query."
    ),
    field_type: Optional[str] = typer.Option(
        None, help="opensearch: rank_features; elasticsearch: sparse_vector (8.11+, default) or rank_features."
    ),
    index: str = typer.Option("spladekit", help="opensearch/elasticsearch: index name in the bulk actions."),
    field: str = typer.Option("splade", help="opensearch/elasticsearch: name of the vector field."),
    max_active_dims: Optional[int] = typer.Option(
        None,
        min=1,
        help="opensearch/elasticsearch: keep only the "
        "k heaviest terms of each vector (as every command's "
        "--max-active-dims).",
    ),
    quantization_scale: Optional[float] = typer.Option(
        None,
        "--quantization-scale",
        help="Weights -> whole "
        "numbers round(w x SCALE); weights that round to 0 are "
        "dropped. ciff: the impacts (CIFF tf), default derived from "
        "the vectors (2048 / the largest weight, as the pisa and "
        "anserini indexes); opensearch/"
        "elasticsearch: default none (float weights).",
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="Allow the model folder/hub repo to run its own Python code."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON instead of a summary."),
) -> None:
    """Export a model to sentence-transformers or to ONNX (backbone, head and SPLADE pooling in one graph), or
    encoded vectors to Qdrant, OpenSearch, Elasticsearch or a CIFF file (Common Index File Format:
    Anserini/Lucene, Terrier, PISA; needs ciff-toolkit)."""
    if fmt is ExportFormat.sentence_transformers:
        if output is None:
            raise SpladekitError("--format sentence-transformers needs --output")
        payload = _sentence_transformers(source, output, max_length, overwrite, trust_remote_code)
    elif fmt is ExportFormat.onnx:
        if output is None:
            raise SpladekitError("--format onnx needs --output")
        payload = _onnx(source, output, max_length, top_k, int8, overwrite, trust_remote_code)
    elif fmt is ExportFormat.ciff:
        payload = _ciff(source, output, model, quantization_scale, overwrite, trust_remote_code)
    elif fmt is ExportFormat.qdrant:
        payload = _qdrant(source, output, url, qdrant_path, collection, vector_name, recreate, overwrite)
    else:
        payload = _search_engine(
            source,
            fmt.value,
            output,
            model,
            queries,
            field_type,
            index,
            field,
            max_active_dims,
            quantization_scale,
            overwrite,
            trust_remote_code,
        )
    emit(
        payload,
        as_json,
        None,
        f"exported {source} as {fmt.value} -> "
        f"{payload.get('output') or payload.get('url') or payload.get('qdrant_path')}",
    )
