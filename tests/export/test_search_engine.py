"""OpenSearch / Elasticsearch export: bulk NDJSON, mapping and query DSL checked against the engines'
documented field rules (no server here), escape round trip, pruning and quantization."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from spladekit.common.errors import SpladekitError
from spladekit.common.sparse import keep_top_weights
from spladekit.export import (
    escape_feature,
    export_search_engine,
    quantize,
    unescape_feature,
)
from spladekit.export.search_engine import vocabulary_tokens
from spladekit.vectors.artifact import Vectors

TOKENS = ["[PAD]", ".", "u.s.", "100%", "%2E", "##ing", "Ġthe", "▁über", "a.b%25c", "naïve"]


def random_vectors(rows: int, seed: int) -> sp.csr_matrix:
    matrix = sp.random(rows, len(TOKENS), density=0.5, format="csr", random_state=seed, dtype=np.float32)
    matrix.data = matrix.data * 3 + 0.01
    return matrix


# ----------------------------------------------------------------------------- the engines' rules
def check_feature_map(features) -> None:
    """rank_features / sparse_vector values: {non-empty name without '.': positive finite number}."""
    assert isinstance(features, dict)
    for name, weight in features.items():
        assert isinstance(name, str) and name and "." not in name, name
        assert isinstance(weight, (int, float)) and not isinstance(weight, bool)
        assert weight > 0 and math.isfinite(weight)


def read_bulk(folder, field) -> list[tuple[str, dict]]:
    """Parse documents.ndjson as the _bulk API does: action line, then source line; final newline."""
    text = (folder / "documents.ndjson").read_text(encoding="utf-8")
    assert text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) % 2 == 0
    documents = []
    for action_line, source_line in zip(lines[::2], lines[1::2]):
        action, source = json.loads(action_line), json.loads(source_line)
        assert list(action) == ["index"] and set(action["index"]) == {"_index", "_id"}
        assert source["doc_id"] == action["index"]["_id"] and set(source) == {"doc_id", field}
        check_feature_map(source[field])
        documents.append((action["index"]["_id"], source[field]))
    return documents


def check_mapping(folder, field, field_type) -> None:
    mapping = json.loads((folder / "mapping.json").read_text())
    assert mapping["mappings"]["properties"][field] == {"type": field_type}
    assert mapping["mappings"]["properties"]["doc_id"] == {"type": "keyword"}


def query_features(body, field, field_type) -> dict[str, float]:
    """The {feature: weight} a query DSL body scores with, checked against the documented query shape."""
    if field_type == "sparse_vector":
        assert set(body["query"]) == {"sparse_vector"}
        assert body["query"]["sparse_vector"]["field"] == field
        features = body["query"]["sparse_vector"]["query_vector"]
    else:
        features = {}
        for clause in body["query"]["bool"]["should"]:
            rank_feature = clause["rank_feature"]
            assert rank_feature["linear"] == {}  # linear: score = stored value (so boost × value = a product)
            prefix, name = rank_feature["field"].split(".")  # exactly one '.': field.feature
            assert prefix == field
            features[name] = rank_feature["boost"]
    check_feature_map(features)
    return features


def as_matrix(feature_maps: list[dict], names: list[str]) -> np.ndarray:
    column = {escape_feature(token): index for index, token in enumerate(names)}
    matrix = np.zeros((len(feature_maps), len(names)))
    for row, features in enumerate(feature_maps):
        for name, weight in features.items():
            assert unescape_feature(name) == names[column[name]]
            matrix[row, column[name]] = weight
    return matrix


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize(
    "engine,field_type",
    [("opensearch", "rank_features"), ("elasticsearch", "sparse_vector"), ("elasticsearch", "rank_features")],
)
def test_export_follows_field_rules_and_round_trips(tmp_path, engine, field_type):
    documents, queries = random_vectors(30, seed=1), random_vectors(5, seed=2)
    ids, query_ids = [f"doc-{i}" for i in range(30)], [f"q{i}" for i in range(5)]
    out = tmp_path / "es"
    summary = export_search_engine(
        documents, ids, TOKENS, out, engine=engine, field_type=field_type, field="vec", queries=(queries, query_ids)
    )
    assert summary["field_type"] == field_type
    check_mapping(out, "vec", field_type)
    parsed = read_bulk(out, "vec")
    assert [doc_id for doc_id, _ in parsed] == ids
    recovered = as_matrix([features for _, features in parsed], TOKENS)
    np.testing.assert_allclose(recovered, documents.toarray(), rtol=1e-6)
    # queries: one DSL per query; scoring it the way the engine does gives the dot product
    lines = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
    assert [line["_id"] for line in lines] == query_ids
    query_matrix = as_matrix([query_features(line["query"], "vec", field_type) for line in lines], TOKENS)
    np.testing.assert_allclose(query_matrix @ recovered.T, (queries @ documents.T).toarray(), rtol=1e-5)
    example = json.loads((out / "query.json").read_text())
    assert query_features(example, "vec", field_type) == query_features(lines[0]["query"], "vec", field_type)
    assert json.loads((out / "export.json").read_text())["engine"] == engine


def test_pruning_and_quantization_in_export(tmp_path):
    documents = random_vectors(20, seed=3)
    export_search_engine(documents, [str(i) for i in range(20)], TOKENS, tmp_path / "es", max_active_dims=3, scale=100)
    parsed = read_bulk(tmp_path / "es", "splade")
    recovered = as_matrix([features for _, features in parsed], TOKENS)
    expected = quantize(keep_top_weights(documents, 3), 100).toarray()
    np.testing.assert_array_equal(recovered, expected)
    assert all(len(features) <= 3 for _, features in parsed)
    assert all(isinstance(weight, int) for _, features in parsed for weight in features.values())


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("max_active_dims", [None, 2])
def test_non_finite_weights_are_refused_before_anything_is_written(tmp_path, bad, max_active_dims):
    """The engines reject NaN and infinite feature values; dropping them would silently change the vectors."""
    documents, queries = random_vectors(4, seed=5).toarray(), random_vectors(2, seed=6).toarray()
    documents[2, 3] = queries[1, 4] = bad
    documents, queries = sp.csr_matrix(documents), sp.csr_matrix(queries)
    with pytest.raises(SpladekitError, match=r"document 'doc-2' \(vector row 2\).*'100%'.* (nan|inf)"):
        export_search_engine(
            documents, [f"doc-{i}" for i in range(4)], TOKENS, tmp_path / "es", max_active_dims=max_active_dims
        )
    assert not (tmp_path / "es").exists()
    with pytest.raises(SpladekitError, match=r"query 'q1' \(vector row 1\)"):
        export_search_engine(
            random_vectors(4, seed=5),
            [f"doc-{i}" for i in range(4)],
            TOKENS,
            tmp_path / "es",
            max_active_dims=max_active_dims,
            queries=(queries, ["q0", "q1"]),
        )
    assert not (tmp_path / "es").exists()


def test_keep_top_weights_keeps_heaviest_and_lower_id_on_ties():
    matrix = sp.csr_matrix(
        np.array([[0.5, 2.0, 0.0, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0], [3.0, 0.0, 1.0, 0.0, 0.0]], dtype=np.float32)
    )
    pruned = keep_top_weights(matrix, 2).toarray()
    np.testing.assert_array_equal(pruned, [[0, 2, 0, 2, 0], [0, 0, 0, 0, 0], [3, 0, 1, 0, 0]])
    np.testing.assert_array_equal(keep_top_weights(matrix, 1).toarray()[0], [0, 2, 0, 0, 0])


def test_quantize_rounds_and_drops_zeros():
    matrix = sp.csr_matrix(np.array([[0.004, 0.126, 1.0]], dtype=np.float32))
    quantized = quantize(matrix, 100)
    assert quantized.nnz == 2
    np.testing.assert_array_equal(quantized.toarray(), [[0, 13, 100]])
    with pytest.raises(SpladekitError):
        quantize(matrix, 0)


def test_bad_settings_are_refused(tmp_path):
    documents = random_vectors(2, seed=4)
    with pytest.raises(SpladekitError, match="opensearch supports"):
        export_search_engine(
            documents, ["a", "b"], TOKENS, tmp_path / "x", engine="opensearch", field_type="sparse_vector"
        )
    with pytest.raises(SpladekitError, match="without '.'"):
        export_search_engine(documents, ["a", "b"], TOKENS, tmp_path / "x", field="a.b")
    with pytest.raises(SpladekitError, match="collide"):
        export_search_engine(documents, ["a", "b"], TOKENS[:-1] + ["."], tmp_path / "x")
    assert not (tmp_path / "x").exists()


@given(st.text())
def test_escape_round_trip(token):
    escaped = escape_feature(token)
    assert "." not in escaped
    assert unescape_feature(escaped) == token


@given(st.text(), st.text())
def test_escape_is_injective(first, second):
    if first != second:
        assert escape_feature(first) != escape_feature(second)


def test_escape_examples():
    assert escape_feature("u.s.") == "u%2Es%2E"
    assert escape_feature("100%") == "100%25"
    assert escape_feature("%2E") == "%252E" and unescape_feature("%252E") == "%2E"
    assert escape_feature("##ing") == "##ing"


def test_cli_export_opensearch_with_real_tokenizer(tiny_model_dirs, tmp_path, cli):
    from spladekit.model.encoder import SparseEncoder

    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    texts = ["the capital of france is paris.", "u.s. vitamin d"]
    vectors = encoder.encode(texts, show_progress=False)
    Vectors(vectors, ["d1", "d2"], {"model": str(tiny_model_dirs["bert"])}).save(tmp_path / "vectors")
    result = cli("export", "opensearch", tmp_path / "vectors", "--output", tmp_path / "os", "--json")
    assert result.returncode == 0, result.stderr
    tokens = vocabulary_tokens(tiny_model_dirs["bert"], vectors.shape[1])
    assert tokens[encoder.tokenizer.convert_tokens_to_ids(".")] == "."
    parsed = read_bulk(tmp_path / "os", "splade")
    recovered = as_matrix([features for _, features in parsed], tokens)
    np.testing.assert_allclose(recovered, vectors.toarray(), rtol=1e-6)
    if vectors[0, tokens.index(".")] > 0:
        assert "%2E" in parsed[0][1]
