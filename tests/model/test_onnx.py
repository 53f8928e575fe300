"""model/onnx.py: one ONNX graph (backbone + MLM head + SPLADE pooling) whose onnxruntime weights equal torch's for
every seed architecture (padding and RoBERTa's position offset included); top-k outputs; int8; the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit import SparseEncoder
from spladekit.common.atomic import OUTPUT_MARK
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.sparse import keep_top_weights
from tiny_models import ARCHITECTURES, SAMPLE_TEXTS

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
from spladekit.model.onnx import OnnxEncoder, export_onnx


def _load(tiny_model_dirs, arch):
    return SparseEncoder.from_pretrained(tiny_model_dirs[arch], trust_remote_code=arch == "gte")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_onnxruntime_weights_equal_torch_for_every_architecture(tiny_model_dirs, tmp_path, arch):
    """Batches of 3 texts of different lengths (padding inside every batch): within 1e-5 of torch, same support."""
    encoder = _load(tiny_model_dirs, arch)
    metadata = export_onnx(encoder, tmp_path)
    ours = OnnxEncoder(tmp_path).encode(SAMPLE_TEXTS, batch_size=3, show_progress=False).toarray()
    theirs = encoder.encode(SAMPLE_TEXTS, batch_size=3, show_progress=False).toarray()
    assert np.abs(ours - theirs).max() < 1e-5 and metadata["max_abs_diff_vs_torch"] < 1e-5
    assert np.array_equal(ours > 1e-5, theirs > 1e-5)


def test_top_k_outputs_are_the_k_largest_weights(tiny_model_dirs, tmp_path):
    encoder = _load(tiny_model_dirs, "bert")
    metadata = export_onnx(encoder, tmp_path, top_k=5)
    assert metadata["outputs"] == ["indices", "values"]
    ours = OnnxEncoder(tmp_path).encode(SAMPLE_TEXTS, show_progress=False)
    theirs = keep_top_weights(encoder.encode(SAMPLE_TEXTS, show_progress=False), 5)
    assert (np.diff(ours.indptr) <= 5).all()
    np.testing.assert_allclose(ours.toarray(), theirs.toarray(), atol=1e-5)


def test_int8_quantization_changes_the_weights_but_keeps_the_vectors_close(tiny_model_dirs, tmp_path):
    encoder = _load(tiny_model_dirs, "bert")
    metadata = export_onnx(encoder, tmp_path, quantize="int8")
    quantized = OnnxEncoder(tmp_path)
    assert metadata["quantized"] == "int8" and quantized.pooling == "onnx-int8"
    ours = quantized.encode(SAMPLE_TEXTS, show_progress=False).toarray()
    theirs = encoder.encode(SAMPLE_TEXTS, show_progress=False).toarray()
    cosine = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert metadata["max_abs_diff_vs_torch"] > 1e-5 and (cosine > 0.9).all()


def test_query_and_document_sides_use_their_token_limits(tiny_model_dirs, tmp_path):
    encoder = _load(tiny_model_dirs, "bert")
    export_onnx(encoder, tmp_path)
    onnx = OnnxEncoder(tmp_path)
    long_text = " ".join(SAMPLE_TEXTS) * 3
    np.testing.assert_allclose(
        onnx.encode_query([long_text], max_length=8, show_progress=False).toarray(),
        encoder.encode_query([long_text], max_length=8, show_progress=False).toarray(),
        atol=1e-5,
    )
    assert onnx.encode_document([long_text], max_active_dims=3, show_progress=False).nnz == 3


def test_a_folder_that_is_not_an_onnx_export_is_one_error(tmp_path):
    (tmp_path / "onnx.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(InputError, match="not a spladekit ONNX folder"):
        OnnxEncoder(tmp_path)


def test_top_k_beyond_the_vocabulary_is_refused(tiny_model_dirs, tmp_path):
    encoder = _load(tiny_model_dirs, "bert")
    with pytest.raises(SpladekitError, match="top_k must be between 1 and the vocabulary size"):
        export_onnx(encoder, tmp_path, top_k=encoder.vocab_size + 1)


def test_cli_export_onnx(tiny_model_dirs, tmp_path, cli):
    result = cli("export", "onnx", tiny_model_dirs["bert"], "--output", tmp_path / "onnx", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["format"] == "onnx" and payload["max_abs_diff_vs_torch"] < 1e-5
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [
        OUTPUT_MARK,
        "model.onnx",
        "onnx.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    again = cli("export", "onnx", tiny_model_dirs["bert"], "--output", tmp_path / "onnx")
    assert again.returncode == 2 and "already exists" in again.stderr
    matrix = OnnxEncoder(tmp_path / "onnx").encode(["a cat"], show_progress=False)
    assert isinstance(matrix, sp.csr_matrix) and matrix.shape[0] == 1


def test_an_inference_free_model_exports_its_document_graph_and_its_query_table(tiny_model_dirs, tmp_path):
    from spladekit.model.inference_free import InferenceFreeEncoder, idf_weights

    documents = _load(tiny_model_dirs, "bert")
    weights = idf_weights(documents.tokenizer, SAMPLE_TEXTS, documents.vocab_size, show_progress=False)
    model = InferenceFreeEncoder(documents, weights, query_max_length=8)
    metadata = export_onnx(model, tmp_path)
    onnx = OnnxEncoder(tmp_path)
    assert metadata["kind"] == "inference-free" and (tmp_path / "query_weights.safetensors").is_file()
    queries = ["what is the capital of france", "a cat a cat"]
    assert (
        onnx.encode_query(queries, show_progress=False) != model.encode_query(queries, show_progress=False)
    ).nnz == 0
    np.testing.assert_allclose(
        onnx.encode_document(SAMPLE_TEXTS, show_progress=False).toarray(),
        model.encode_document(SAMPLE_TEXTS, show_progress=False).toarray(),
        atol=1e-5,
    )


HEAD = {"logit_shift": 0.2, "position_top_k": 5, "vocab_fold": "space", "lowercase": True}


def _with_head(tiny_model_dirs, arch, **options):
    from spladekit.model.head_options import HeadOptions

    return SparseEncoder.from_pretrained(
        tiny_model_dirs[arch], trust_remote_code=arch == "gte", head=HeadOptions(**(options or HEAD))
    )


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_graph_carries_the_head_options_for_every_architecture(tiny_model_dirs, tmp_path, arch):
    """Shift, per-token top-k and fold in the graph, lowercasing in OnnxEncoder: within 1e-5 of torch."""
    encoder = _with_head(tiny_model_dirs, arch)
    export_onnx(encoder, tmp_path)
    texts = [text.upper() for text in SAMPLE_TEXTS]
    ours = OnnxEncoder(tmp_path).encode(texts, batch_size=3, show_progress=False).toarray()
    theirs = encoder.encode(texts, batch_size=3, show_progress=False).toarray()
    assert ours.shape[1] == encoder.vocab_size < encoder.head.vocab_size  # folded
    assert np.abs(ours - theirs).max() < 1e-5
    assert np.array_equal(ours > 1e-5, theirs > 1e-5)


@pytest.mark.parametrize("options", [{"logit_shift": 0.3}, {"position_top_k": 3}, {"vocab_fold": "space"}], ids=str)
def test_each_head_option_in_the_graph(tiny_model_dirs, tmp_path, options):
    encoder = _with_head(tiny_model_dirs, "bert", **options)
    plain = _load(tiny_model_dirs, "bert")
    metadata = export_onnx(encoder, tmp_path)
    assert metadata["head"] == encoder.head_options.to_dict() and metadata["max_abs_diff_vs_torch"] < 1e-5
    ours = OnnxEncoder(tmp_path).encode(SAMPLE_TEXTS, batch_size=3, show_progress=False)
    theirs = encoder.encode(SAMPLE_TEXTS, batch_size=3, show_progress=False)
    assert np.abs(ours.toarray() - theirs.toarray()).max() < 1e-5
    # the option changed the vectors (a graph that ignored it would fail here)
    before = plain.encode(SAMPLE_TEXTS, batch_size=3, show_progress=False)
    assert ours.shape != before.shape or np.abs(ours.toarray() - before.toarray()).max() > 1e-3
