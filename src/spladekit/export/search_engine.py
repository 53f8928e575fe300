"""SPLADE vectors → OpenSearch / Elasticsearch: bulk NDJSON documents, index mapping and query DSL.

Output folder (written atomically):

* ``mapping.json``     body of ``PUT /<index>``: the vector field (``rank_features``, or ``sparse_vector``
                       on Elasticsearch 8.11+) and a ``keyword`` ``doc_id``.
* ``documents.ndjson`` body of ``POST /_bulk``: ``{"index": {"_index", "_id"}}`` then
                       ``{"doc_id": …, "<field>": {feature: weight, …}}`` for every document.
* ``query.json``       the query DSL, filled with the first query's vector (or a two-term example).
* ``queries.jsonl``    with query vectors: one ``{"_id": query id, "query": DSL}`` per line.
* ``export.json``      the settings used (engine, field type, pruning, quantization, escaping).

Feature names are the backbone's token strings, escaped by :mod:`spladekit.export.feature_names` (no
``.``). Weights are positive finite numbers (zeros dropped, NaN or infinite ones refused before anything
is written), as both field types require; the engines keep about 9 significant bits of each. Both query
forms score by the plain dot product: ``rank_feature`` with the ``linear`` function and ``boost`` = query
weight (summed in a ``bool``/``should``), or Elasticsearch's ``sparse_vector`` query with ``query_vector``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.common.atomic import atomic_directory, final_path
from spladekit.common.errors import SpladekitError
from spladekit.common.sources import fetching
from spladekit.common.sparse import check_rounded_away, keep_top_weights, quantize
from spladekit.export.feature_names import escape_feature
from spladekit.model.foreign import resolve_model_folder

# engine → accepted field types, the first being the default
ENGINES = {"opensearch": ("rank_features",), "elasticsearch": ("sparse_vector", "rank_features")}
SIGNIFICANT_DIGITS = 7  # float32 precision; the engines keep fewer bits anyway


def _field_type(engine: str, field_type: str | None) -> str:
    if engine not in ENGINES:
        raise SpladekitError(f"engine must be one of {sorted(ENGINES)}, got {engine!r}")
    chosen = field_type or ENGINES[engine][0]
    if chosen not in ENGINES[engine]:
        raise SpladekitError(f"{engine} supports field types {ENGINES[engine]}, not {chosen!r}")
    return chosen


def feature_names(tokens: list[str]) -> list[str]:
    """Escaped feature name of every vocabulary id; refuses empty or duplicate names."""
    names = [escape_feature(token) for token in tokens]
    if any(not name for name in names):
        raise SpladekitError(f"vocabulary id {names.index('')} has an empty token string: not a valid feature name")
    if len(set(names)) != len(names):
        raise SpladekitError("the vocabulary has duplicate token strings: feature names would collide")
    return names


def _weight(value: float) -> float | int:
    return int(value) if float(value).is_integer() else float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def row_features(vectors: sp.csr_matrix, row: int, names: list[str]) -> dict[str, float]:
    """{feature name: weight} of one row, positive weights only (non-finite ones are refused earlier)."""
    start, end = vectors.indptr[row], vectors.indptr[row + 1]
    return {
        names[index]: _weight(value)
        for index, value in zip(vectors.indices[start:end].tolist(), vectors.data[start:end].tolist())
        if value > 0
    }


def mapping(field: str, field_type: str) -> dict:
    return {"mappings": {"properties": {"doc_id": {"type": "keyword"}, field: {"type": field_type}}}}


def query_dsl(features: dict[str, float], field: str, field_type: str, size: int = 10) -> dict:
    """Dot-product query over the vector field for one query vector ({feature name: weight})."""
    if field_type == "sparse_vector":
        return {"size": size, "query": {"sparse_vector": {"field": field, "query_vector": features}}}
    clauses = [
        {"rank_feature": {"field": f"{field}.{name}", "linear": {}, "boost": weight}}
        for name, weight in features.items()
    ]
    return {"size": size, "query": {"bool": {"should": clauses}}}


def _check_finite(vectors: sp.csr_matrix, ids: list[str], tokens: list[str], what: str) -> None:
    """The engines reject NaN and infinite feature values, and dropping them would silently change the
    vectors (pruning would also hide a NaN): refuse, naming the first bad row."""
    bad = np.flatnonzero(~np.isfinite(vectors.data))
    if bad.size:
        row = int(np.searchsorted(vectors.indptr, bad[0], side="right")) - 1
        raise SpladekitError(
            f"{what} {ids[row]!r} (vector row {row}) has weight {vectors.data[bad[0]]} for token "
            f"{tokens[vectors.indices[bad[0]]]!r}; Elasticsearch and OpenSearch reject NaN and infinite "
            f"values ({bad.size} such weights in all)"
        )


def _prepare(
    vectors: sp.csr_matrix,
    ids: list[str],
    tokens: list[str],
    what: str,
    max_active_dims: int | None,
    scale: float | None,
) -> sp.csr_matrix:
    vectors = vectors.tocsr()
    _check_finite(vectors, ids, tokens, what)
    if max_active_dims is not None:
        vectors = keep_top_weights(vectors, max_active_dims)
    if scale is not None:
        quantized = quantize(vectors, scale)
        check_rounded_away(vectors.nnz, vectors.nnz - quantized.nnz, scale, f"{what} vectors")
        vectors = quantized
    return vectors


def export_search_engine(
    vectors: sp.csr_matrix,
    ids: list[str],
    tokens: list[str],
    output: str | Path,
    engine: str = "opensearch",
    field_type: str | None = None,
    index: str = "spladekit",
    field: str = "splade",
    max_active_dims: int | None = None,
    scale: float | None = None,
    queries: tuple[sp.csr_matrix, list[str]] | None = None,
    overwrite: bool = False,
) -> dict:
    """Write the bulk NDJSON, mapping and query DSL for ``vectors`` (rows named by ``ids``).

    ``tokens[v]`` is the token string of vocabulary id v; ``max_active_dims`` keeps each document's (and query's)
    k heaviest terms; ``scale`` quantizes weights to whole numbers ``round(w × scale)``.
    """
    field_type = _field_type(engine, field_type)
    if "." in field or not field:
        raise SpladekitError(f"field name {field!r}: must be non-empty and without '.'")
    if vectors.shape[1] != len(tokens):
        raise SpladekitError(f"vectors have {vectors.shape[1]} dimensions but the vocabulary has {len(tokens)} tokens")
    names = feature_names(tokens)
    documents = _prepare(vectors, ids, tokens, "document", max_active_dims, scale)
    query_vectors, query_ids = queries if queries is not None else (None, [])
    if query_vectors is not None:
        query_vectors = _prepare(query_vectors, query_ids, tokens, "query", max_active_dims, scale)
    example = row_features(query_vectors, 0, names) if query_ids else dict(zip(names[:2], (1.0, 0.5)))
    settings = {
        "engine": engine,
        "field_type": field_type,
        "index": index,
        "field": field,
        "max_active_dims": max_active_dims,
        "quantization_scale": scale,
        "documents": len(ids),
        "queries": len(query_ids),
        "feature_escape": "'%' -> '%25', '.' -> '%2E' (spladekit.export.feature_names)",
    }
    with atomic_directory(output, overwrite=overwrite) as staging:
        (staging / "mapping.json").write_text(json.dumps(mapping(field, field_type), indent=2) + "\n")
        with open(staging / "documents.ndjson", "w", encoding="utf-8") as stream:
            for row, doc_id in enumerate(ids):
                stream.write(json.dumps({"index": {"_index": index, "_id": doc_id}}) + "\n")
                stream.write(
                    json.dumps({"doc_id": doc_id, field: row_features(documents, row, names)}, ensure_ascii=False)
                    + "\n"
                )
        (staging / "query.json").write_text(
            json.dumps(query_dsl(example, field, field_type), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        if query_ids:
            with open(staging / "queries.jsonl", "w", encoding="utf-8") as stream:
                for row, query_id in enumerate(query_ids):
                    body = query_dsl(row_features(query_vectors, row, names), field, field_type)
                    stream.write(json.dumps({"_id": query_id, "query": body}, ensure_ascii=False) + "\n")
        (staging / "export.json").write_text(json.dumps(settings, indent=2) + "\n")
    return settings | {"output": str(final_path(output))}


def vocabulary_tokens(model: str | Path, size: int, trust_remote_code: bool = False) -> list[str]:
    """Token string of every vocabulary id 0..size-1 of ``model``'s tokenizer (any folder spladekit loads).

    Ids the tokenizer does not know (embedding matrices padded past the tokenizer) are named ``[id:N]``. A model
    with a vocabulary fold (``head.vocab_fold``) names its dimensions by its ``vocabulary_fold.json``.
    """
    from transformers import AutoTokenizer

    from spladekit.model.folding import read_fold

    local = Path(model)
    source = resolve_model_folder(local).path if local.exists() else str(model)
    fold = read_fold(Path(source)) if local.exists() else None
    if fold is not None:
        if fold.dimensions != size:
            raise SpladekitError(f"{model}: its vocabulary fold has {fold.dimensions} dimensions, the vectors {size}")
        return list(fold.dimension_tokens)
    try:
        with fetching(str(source), "hub", "a local model folder"):
            tokenizer = AutoTokenizer.from_pretrained(str(source), trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        raise SpladekitError(f"{model}: cannot load its tokenizer: {str(error).splitlines()[0]}") from None
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    return [token if token is not None else f"[id:{index}]" for index, token in enumerate(tokens)]
