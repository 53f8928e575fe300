"""export: one sub-command per format. A model to sentence-transformers or ONNX; encoded vectors to OpenSearch /
Elasticsearch (bulk NDJSON, mapping, query DSL) or a CIFF file. (Vectors into Qdrant: ``spladekit index --backend
qdrant``.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer

from spladekit.cli.app import app, emit, opened
from spladekit.cli.options import JSON_FLAG, TRUST_REMOTE_CODE, max_active_dims_option, option
from spladekit.common.errors import SpladekitError
from spladekit.common.schema import MIN_TOKEN_LIMIT

export_app = typer.Typer(
    name="export",
    help="Export a model to sentence-transformers or ONNX, or encoded vectors to OpenSearch, Elasticsearch or a "
    "CIFF file: one sub-command per format, each with its own options. (Vectors into Qdrant: spladekit index "
    "VECTORS --backend qdrant.)",
    no_args_is_help=True,
)
app.add_typer(export_app, name="export")

MODEL_SOURCE = typer.Argument(..., help="A model: a hub id or a folder spladekit loads.")
VECTORS_SOURCE = typer.Argument(..., help="A vectors folder written by `spladekit encode`.")
MAX_LENGTH = option(None, "--max-length", min=MIN_TOKEN_LIMIT)
OVERWRITE = option(False, "--overwrite")
TOKENS_MODEL = option(
    None, "--model", detail="Here: its tokenizer names the terms (default: the model in the vectors' meta.json)."
)


def needs_output(output: Optional[Path], what: str) -> Path:
    """``--output``, which every format needs: its absence is one error line (not a usage screen)."""
    if output is None:
        raise SpladekitError(f"export {what} needs --output")
    return output


@export_app.command("sentence-transformers")
def sentence_transformers(
    source: str = MODEL_SOURCE,
    output: Optional[Path] = option(
        None, "--output", "-o", detail="Here (required): the sentence-transformers SparseEncoder folder."
    ),
    max_length: Optional[int] = MAX_LENGTH,
    overwrite: bool = OVERWRITE,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
) -> None:
    """Export a model as a sentence-transformers SparseEncoder folder (an inference-free model: a Router folder)."""
    from spladekit.export import export_sentence_transformers
    from spladekit.model.loading import load_model

    output = needs_output(output, "sentence-transformers")
    with opened(output, folder=True, overwrite=overwrite) as staged:
        encoder = load_model(source, trust_remote_code=trust_remote_code, max_length=max_length)
        export_sentence_transformers(encoder, staged, trust_remote_code=trust_remote_code)
    payload = {
        "format": "sentence-transformers",
        "model": source,
        "output": str(output),
        "max_length": encoder.max_length,
        "vocab_size": encoder.vocab_size,
    }
    emit(payload, as_json, None, f"exported {source} as sentence-transformers -> {output}")


@export_app.command("onnx")
def onnx(
    source: str = MODEL_SOURCE,
    output: Optional[Path] = option(
        None, "--output", "-o", detail="Here (required): the folder for model.onnx, the tokenizer and onnx.json."
    ),
    max_length: Optional[int] = MAX_LENGTH,
    max_active_dims: Optional[int] = option(
        None,
        "--max-active-dims",
        detail="Here: the graph returns them as indices and values (batch x K) instead of the batch x V weights.",
    ),
    int8: bool = typer.Option(False, "--int8", help="Dynamic int8 quantization of the graph's weights (onnxruntime)."),
    overwrite: bool = OVERWRITE,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
) -> None:
    """Export a model as one ONNX graph: backbone, head and SPLADE pooling (onnxruntime runs it).

    An inference-free model: its document encoder as the graph, and its query weight table as it is."""
    from spladekit.common.sparse import check_max_active_dims
    from spladekit.model.loading import load_model
    from spladekit.model.onnx import document_encoder, export_onnx

    output = needs_output(output, "onnx")
    check_max_active_dims(max_active_dims)
    with opened(output, folder=True, overwrite=overwrite) as staged:
        encoder = load_model(source, trust_remote_code=trust_remote_code, max_length=max_length, device="cpu")
        vocab_size = document_encoder(encoder).vocab_size
        if max_active_dims is not None and max_active_dims > vocab_size:
            raise SpladekitError(f"--max-active-dims {max_active_dims} is above the vocabulary size {vocab_size}")
        metadata = export_onnx(encoder, staged, top_k=max_active_dims, quantize="int8" if int8 else None)
    payload = {**metadata, "format": "onnx", "model": source, "output": str(output)}
    emit(payload, as_json, None, f"exported {source} as onnx -> {output}")


def search_engine(
    engine: str,
    vectors: Path,
    output: Optional[Path],
    model: Optional[str],
    query_vectors: Optional[Path],
    field_type: Optional[str],
    index_name: str,
    field: str,
    max_active_dims: Optional[int],
    scale: Optional[float],
    overwrite: bool,
    trust_remote_code: bool,
) -> dict:
    """What ``export opensearch`` and ``export elasticsearch`` do: the bulk NDJSON, mapping and query DSL."""
    from spladekit.common.sparse import check_max_active_dims
    from spladekit.export import export_search_engine
    from spladekit.export.search_engine import vocabulary_tokens
    from spladekit.vectors.artifact import Vectors

    output = needs_output(output, engine)
    check_max_active_dims(max_active_dims)
    with opened(output, folder=True, overwrite=overwrite) as staged:
        documents = Vectors.load(vectors)
        model = model or documents.meta.get("model")
        if not model:
            raise SpladekitError(f"{vectors}: meta.json names no model; pass --model for the token strings")
        query_pair = None
        if query_vectors is not None:
            encoded = Vectors.load(query_vectors)
            query_pair = (encoded.matrix, encoded.ids)
        tokens = vocabulary_tokens(model, documents.vocab_size, trust_remote_code=trust_remote_code)
        payload = export_search_engine(
            documents.matrix,
            documents.ids,
            tokens,
            staged,
            engine=engine,
            field_type=field_type,
            index=index_name,
            field=field,
            max_active_dims=max_active_dims,
            scale=scale,
            queries=query_pair,
        )
    return payload | {"output": str(output)}


def search_engine_command(engine: str, title: str, field_types: str) -> Callable[..., None]:
    """The ``export opensearch`` / ``export elasticsearch`` command: one parameter list, the engine's own help
    (``field_types``: what its --field-type accepts, as ``spladekit.export.search_engine.ENGINES`` says)."""

    def command(
        vectors: Path = VECTORS_SOURCE,
        output: Optional[Path] = option(
            None, "--output", "-o", detail="Here (required): the folder for the NDJSON, mapping and query DSL."
        ),
        model: Optional[str] = TOKENS_MODEL,
        query_vectors: Optional[Path] = option(
            None, "--query-vectors", detail="Here: also writes queries.jsonl, one query DSL per query."
        ),
        field_type: Optional[str] = option(None, "--field-type", detail=f"Here: {field_types}."),
        index_name: str = option("spladekit", "--index-name"),
        field: str = option("splade", "--field"),
        max_active_dims: Optional[int] = max_active_dims_option("document and query"),
        quantization_scale: Optional[float] = option(
            None, "--quantization-scale", detail="Default: none (float weights)."
        ),
        overwrite: bool = OVERWRITE,
        trust_remote_code: bool = TRUST_REMOTE_CODE,
        as_json: bool = JSON_FLAG,
    ) -> None:
        payload = search_engine(
            engine,
            vectors,
            output,
            model,
            query_vectors,
            field_type,
            index_name,
            field,
            max_active_dims,
            quantization_scale,
            overwrite,
            trust_remote_code,
        )
        emit(payload, as_json, None, f"exported {vectors} for {title} -> {output}")

    command.__doc__ = (
        f"Export encoded vectors for {title}: bulk NDJSON, the index mapping and the query DSL (with --query-vectors: "
        "one query per line)."
    )
    command.__name__ = engine
    return command


for _engine, _title, _field_types in (
    ("opensearch", "OpenSearch", "rank_features (the only one)"),
    ("elasticsearch", "Elasticsearch", "sparse_vector (8.11+, the default) or rank_features"),
):
    export_app.command(_engine)(search_engine_command(_engine, _title, _field_types))


@export_app.command("ciff")
def ciff(
    vectors: Path = VECTORS_SOURCE,
    output: Optional[Path] = option(
        None, "--output", "-o", detail="Here (required): the CIFF file (gzip-compressed when it ends in .gz)."
    ),
    model: Optional[str] = TOKENS_MODEL,
    quantization_scale: Optional[float] = option(
        None,
        "--quantization-scale",
        detail="Here: the impacts (CIFF tf); default derived from the vectors (2048 / the largest weight, as the pisa "
        "and anserini indexes).",
    ),
    overwrite: bool = OVERWRITE,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
) -> None:
    """Export encoded vectors as a CIFF file (Common Index File Format: Anserini/Lucene, Terrier, PISA).

    Needs ciff-toolkit (the install command is named when it is missing)."""
    from spladekit.export.ciff import export_ciff

    output = needs_output(output, "ciff")
    # export_ciff checks ciff-toolkit and the scale, then opens (checks, locks) the output before reading
    payload = export_ciff(
        vectors,
        output,
        model=model,
        scale=quantization_scale,
        overwrite=overwrite,
        trust_remote_code=trust_remote_code,
    )
    emit(payload, as_json, None, f"exported {vectors} as ciff -> {output}")


@export_app.command("qdrant-edge")
def qdrant_edge(
    vectors: Path = VECTORS_SOURCE,
    output: Optional[Path] = option(
        None,
        "--output",
        "-o",
        detail="Here (required): a Qdrant Edge shard folder, for your own code to open with "
        "qdrant_edge.EdgeShard.load(path); built beside it and swapped in complete.",
    ),
    vector_name: str = typer.Option("splade", help="Name of the sparse vector of each point."),
    overwrite: bool = option(False, "--overwrite", detail="Here: only a shard folder spladekit wrote."),
    as_json: bool = JSON_FLAG,
) -> None:
    """Export encoded vectors as a Qdrant Edge shard folder (Qdrant's engine in-process; needs qdrant-edge-py).

    To upload to a Qdrant server, or to search through spladekit, use `spladekit index VECTORS --backend qdrant`."""
    from spladekit.export import export_qdrant
    from spladekit.index import check_backend
    from spladekit.vectors.artifact import Vectors

    output = needs_output(output, "qdrant-edge")
    shard, source = output.resolve(), vectors.resolve()
    if shard == source or source in shard.parents or shard in source.parents:  # one would be written into the other
        raise SpladekitError(f"{output}: the shard folder and the vectors folder are one (or one holds the other)")
    check_backend("qdrant", {})  # qdrant-edge-py, before the vectors are read
    with opened(output, folder=True, overwrite=overwrite) as shard:
        documents = Vectors.load(vectors)
        payload = export_qdrant(
            documents.matrix, documents.ids, qdrant_path=shard, vector_name=vector_name, recreate=overwrite
        )
    emit(payload, as_json, None, f"exported {vectors} as a Qdrant Edge shard -> {output}")


@export_app.command("qdrant", hidden=True, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def qdrant() -> None:
    """Gone: vectors into Qdrant are `spladekit index VECTORS --backend qdrant` (a server, or an index spladekit
    searches) or `spladekit export qdrant-edge` (a shard folder for your own code)."""
    raise SpladekitError(
        "export qdrant is now spladekit index VECTORS --backend qdrant (--param url=URL, --param collection=NAME; "
        "see spladekit keys backends), or spladekit export qdrant-edge VECTORS -o SHARD for a Qdrant Edge shard folder"
    )
