"""Inference-free SPLADE: IDF init, query vectors, save/load, training, the sentence-transformers Router format."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from collection_files import write_beir
from spladekit.common.errors import InputError, SpladekitError
from spladekit.export import export_sentence_transformers
from spladekit.model.encoder import SparseEncoder
from spladekit.model.inference_free import QUERY_WEIGHTS_FILE, InferenceFreeEncoder, idf_weights
from spladekit.model.loading import is_inference_free, load_model
from spladekit.training import train
from tiny_models import SAMPLE_TEXTS, VOCAB
from train_helpers import TINY_BERT, TRIPLETS, tiny_config

tiny_bert, triplets_file = TINY_BERT, TRIPLETS
QUERIES = ["what is the capital of france", "capital capital the the", "vitamin d bone pain", "a", "unknownword"]


@pytest.fixture(scope="module")
def free_model(tiny_bert) -> InferenceFreeEncoder:
    """A tiny inference-free model with a random positive table (so every token's weight differs)."""
    documents = SparseEncoder.from_pretrained(tiny_bert)
    weights = torch.rand(documents.vocab_size, generator=torch.Generator().manual_seed(0)) + 0.1
    return InferenceFreeEncoder(documents, weights, query_max_length=8)


def token_id(token: str) -> int:
    return VOCAB.index(token)


def test_idf_equals_a_hand_computation(free_model):
    documents = ["the cat", "the dog the", "a cat", "[CLS] [SEP]"]  # the last holds only special tokens
    weights = idf_weights(free_model.tokenizer, documents, free_model.vocab_size, show_progress=False)
    n = 3  # documents with a non-special token

    def idf(df: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    expected = {"the": idf(2), "cat": idf(2), "dog": idf(1), "a": idf(1)}
    for token, value in expected.items():
        assert weights[token_id(token)].item() == pytest.approx(value, rel=1e-6)
    others = [i for i in range(len(weights)) if i not in {token_id(t) for t in expected}]
    assert torch.count_nonzero(weights[others]) == 0  # unseen and special tokens: 0
    assert idf(1) > idf(2) > 0


def test_query_vectors_are_the_table_entries_of_the_distinct_tokens(free_model):
    vectors = free_model.encode_query(QUERIES, show_progress=False)
    table = free_model.query_weights.detach().numpy()
    assert vectors.shape == (len(QUERIES), free_model.vocab_size) and vectors.dtype == np.float32
    for row, text in enumerate(QUERIES):
        ids = free_model.tokenizer(text, add_special_tokens=False, truncation=True, max_length=8)["input_ids"]
        expected = np.zeros(free_model.vocab_size, dtype=np.float32)
        expected[ids] = table[ids]  # each distinct token once, however often it occurs
        np.testing.assert_array_equal(vectors[row].toarray()[0], expected)
    repeated = vectors[1].toarray()[0]
    assert repeated[token_id("capital")] == table[token_id("capital")]
    assert all(vectors[:, token_id(special)].nnz == 0 for special in ("[CLS]", "[SEP]"))
    long = free_model.encode_query(
        [" ".join(["paris", "seine", "cat", "dog", "fox", "mat", "river", "city", "sun", "moon"])], show_progress=False
    )
    assert long.nnz == 8  # truncated at query_max_length tokens


def test_query_forward_is_the_differentiable_encode_query(free_model):
    dense = free_model.query_forward(QUERIES)
    np.testing.assert_allclose(dense.detach().numpy(), free_model.encode_query(QUERIES, show_progress=False).toarray())
    dense.sum().backward()
    assert free_model.query_weights.grad is not None and free_model.query_weights.grad.sum() > 0
    free_model.query_weights.grad = None


def test_max_active_dims_keeps_the_heaviest_weights(free_model):
    full = free_model.encode_query(QUERIES[:1], show_progress=False)
    top = free_model.encode_query(QUERIES[:1], show_progress=False, max_active_dims=2)
    assert top.nnz == 2 and sorted(top.data) == sorted(full.data)[-2:]
    documents = free_model.encode_document(SAMPLE_TEXTS, show_progress=False, max_active_dims=3)
    assert max(np.diff(documents.indptr)) <= 3
    with pytest.raises(SpladekitError, match="max_active_dims"):
        free_model.encode_query(QUERIES, max_active_dims=0)


def test_encode_is_the_document_side(free_model):
    documents = free_model.encode(SAMPLE_TEXTS, show_progress=False)
    np.testing.assert_array_equal(
        documents.toarray(), free_model.document_encoder.encode(SAMPLE_TEXTS, show_progress=False).toarray()
    )


@pytest.mark.parametrize("method", ["encode", "encode_query", "encode_document"])
def test_one_string_is_one_text(free_model, method):
    one = getattr(free_model, method)(SAMPLE_TEXTS[0], show_progress=False)
    assert one.shape == (1, free_model.vocab_size)  # not one row per character
    np.testing.assert_array_equal(
        one.toarray(), getattr(free_model, method)([SAMPLE_TEXTS[0]], show_progress=False).toarray()
    )


def test_save_and_load_round_trip(free_model, tmp_path):
    folder = free_model.save(tmp_path / "free")
    assert (folder / QUERY_WEIGHTS_FILE).is_file()
    metadata = json.loads((folder / "spladekit.json").read_text())
    assert metadata["kind"] == "inference-free" and metadata["query_max_length"] == 8
    loaded = load_model(folder)
    assert isinstance(loaded, InferenceFreeEncoder) and is_inference_free(folder)
    torch.testing.assert_close(loaded.query_weights.detach(), free_model.query_weights.detach())
    np.testing.assert_array_equal(
        loaded.encode_query(QUERIES, show_progress=False).toarray(),
        free_model.encode_query(QUERIES, show_progress=False).toarray(),
    )
    np.testing.assert_allclose(
        loaded.encode_document(SAMPLE_TEXTS, show_progress=False).toarray(),
        free_model.encode_document(SAMPLE_TEXTS, show_progress=False).toarray(),
        atol=1e-6,
    )
    with pytest.raises(SpladekitError, match="exists"):
        free_model.save(folder)
    free_model.save(folder, overwrite=True)


def test_a_plain_folder_loads_as_a_sparse_encoder(tiny_bert):
    assert type(load_model(tiny_bert)) is SparseEncoder and not is_inference_free(tiny_bert)


def test_damaged_query_weights_are_an_input_error(free_model, tmp_path):
    folder = free_model.save(tmp_path / "free")
    (folder / QUERY_WEIGHTS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(InputError) as error:
        load_model(folder)
    assert error.value.path == str(folder / QUERY_WEIGHTS_FILE)
    (folder / QUERY_WEIGHTS_FILE).unlink()
    with pytest.raises(InputError, match="query weight table"):
        load_model(folder)


def test_nan_in_the_table_is_refused_on_save(free_model, tmp_path):
    broken = InferenceFreeEncoder(free_model.document_encoder, torch.full((free_model.vocab_size,), float("nan")))
    with pytest.raises(SpladekitError, match="NaN"):
        broken.save(tmp_path / "broken")
    assert not (tmp_path / "broken").exists()


# ------------------------------------------------------------------------------------------ training
def _weights(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.model.state_dict().items()}


@pytest.mark.parametrize("frozen", [False, True])
def test_training_changes_the_table_and_the_document_encoder(tiny_bert, triplets_file, tmp_path, frozen):
    config = tiny_config(tiny_bert, triplets_file, model={"kind": "inference-free", "freeze_query_weights": frozen})
    run = train(config, tmp_path / "run")
    trained = load_model(run.model)
    assert isinstance(trained, InferenceFreeEncoder)
    backbone = SparseEncoder.from_pretrained(tiny_bert)
    from spladekit.data.training import load_training_set

    training_set = load_training_set(config.data)
    documents = training_set.document_texts(training_set.document_rows())
    initial = idf_weights(backbone.tokenizer, documents, backbone.vocab_size, show_progress=False)
    table = trained.query_weights.detach()
    if frozen:
        torch.testing.assert_close(table, initial)
    else:
        assert not torch.allclose(table, initial)
    before, after = _weights(backbone), _weights(trained)
    assert any(not torch.equal(before[name], after[name]) for name in before)
    assert "IDF of the" in json.loads((run.model / "spladekit.json").read_text())["query_weights_origin"]


def test_resume_continues_the_table_exactly(tiny_bert, triplets_file, tmp_path):
    config = tiny_config(tiny_bert, triplets_file, model={"kind": "inference-free"})
    whole = train(config, tmp_path / "whole")
    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "model")  # as if killed after the step-3 checkpoint
    assert [p.name for p in (tmp_path / "resumed" / "checkpoints").iterdir()] == ["step-00000003"]
    resumed = train(config, tmp_path / "resumed", resume=True)
    torch.testing.assert_close(load_model(resumed.model).query_weights, load_model(whole.model).query_weights)


def test_query_weights_lr_is_its_own_parameter_group(free_model):
    from spladekit.training.config import OptimizationConfig
    from spladekit.training.setup import parameter_groups

    groups = parameter_groups(free_model, OptimizationConfig(weight_decay=0.01), query_weights_lr=0.5)
    assert groups[-1]["params"] == [free_model.query_weights] and groups[-1]["lr"] == 0.5
    assert all(p is not free_model.query_weights for group in groups[:-1] for p in group["params"])


def test_freeze_query_weights_needs_an_inference_free_model(tiny_bert, triplets_file):
    with pytest.raises(InputError, match="freeze_query_weights"):
        tiny_config(tiny_bert, triplets_file, model={"freeze_query_weights": True})


# ------------------------------------------------------------------------------------------ Router format
@pytest.fixture
def st():
    """sentence-transformers' sparse encoder (the ``interop`` extra): only the tests that read or write its format
    skip without it (a module-level skip also hid the explain and mining tests below)."""
    return pytest.importorskip("sentence_transformers.sparse_encoder")


def test_router_round_trip_gives_identical_vectors_and_rankings(free_model, tmp_path, st):
    folder = export_sentence_transformers(free_model, tmp_path / "router")
    router = json.loads((folder / "router_config.json").read_text())
    assert router["structure"]["query"] == ["query_0_SparseStaticEmbedding"]
    model = st.SparseEncoder(str(folder), device="cpu")
    st_queries = model.encode_query(QUERIES, convert_to_tensor=True).to_dense().numpy()
    st_documents = model.encode_document(SAMPLE_TEXTS, convert_to_tensor=True).to_dense().numpy()
    ours_queries = free_model.encode_query(QUERIES, show_progress=False).toarray()
    ours_documents = free_model.encode_document(SAMPLE_TEXTS, show_progress=False).toarray()
    np.testing.assert_allclose(st_queries, ours_queries, atol=1e-5)
    np.testing.assert_allclose(st_documents, ours_documents, atol=1e-5)
    ours_order = np.argsort(-(ours_queries @ ours_documents.T), axis=1, kind="stable")
    np.testing.assert_array_equal(np.argsort(-(st_queries @ st_documents.T), axis=1, kind="stable"), ours_order)
    reloaded = load_model(folder)  # and back into spladekit
    assert isinstance(reloaded, InferenceFreeEncoder) and reloaded.query_max_length == free_model.query_max_length
    np.testing.assert_allclose(reloaded.encode_query(QUERIES, show_progress=False).toarray(), ours_queries, atol=1e-6)
    np.testing.assert_allclose(
        reloaded.encode_document(SAMPLE_TEXTS, show_progress=False).toarray(), ours_documents, atol=1e-6
    )


def test_router_with_other_routes_is_refused(free_model, tmp_path, st):
    folder = export_sentence_transformers(free_model, tmp_path / "router")
    config_file = folder / "router_config.json"
    config = json.loads(config_file.read_text())
    config["structure"]["query"] = ["document_0_Transformer", "document_1_SpladePooling"]
    config_file.write_text(json.dumps(config))
    with pytest.raises(InputError, match="inference-free SPLADE routers") as error:
        load_model(folder)
    assert error.value.path == str(config_file)


def test_router_with_another_query_tokenizer_is_refused(free_model, tmp_path, st):
    folder = export_sentence_transformers(free_model, tmp_path / "router")
    tokenizer_config = folder / "query_0_SparseStaticEmbedding" / "tokenizer_config.json"
    values = json.loads(tokenizer_config.read_text())
    values["do_lower_case"] = False  # "What" and "what" now tokenize apart
    tokenizer_config.write_text(json.dumps(values))
    with pytest.raises(InputError, match="tokenizer differs"):
        load_model(folder)


# ------------------------------------------------------------------------------------------ CLI
def test_cli_evaluate_search_and_export_an_inference_free_folder(cli, free_model, tmp_path, st):
    folder = free_model.save(tmp_path / "free")
    data = write_beir(tmp_path / "beir")
    result = cli("evaluate", folder, "--data", data, "--no-cache", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["query_max_length"] == 8
    judged = {line.split("\t")[0] for line in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    queries = free_model.encode_query(
        [query["text"] for query in map(json.loads, (data / "queries.jsonl").open()) if query["_id"] in judged],
        show_progress=False,
    )
    assert payload["avg_q_nnz"] == pytest.approx(np.diff(queries.indptr).mean())
    exported = cli("export", "sentence-transformers", folder, "--output", tmp_path / "st")
    assert exported.returncode == 0, exported.stderr
    again = cli("evaluate", tmp_path / "st", "--data", data, "--no-cache", "--json")
    assert again.returncode == 0, again.stderr
    reloaded = json.loads(again.stdout)
    assert [reloaded[m] for m in payload["measures"]] == pytest.approx([payload[m] for m in payload["measures"]])


def test_explain_reads_an_inference_free_folder_as_one(cli, free_model, tmp_path):
    """Today explain loaded the folder as a plain SPLADE model: the query went through the MLM, silently."""
    folder = free_model.save(tmp_path / "free")
    done = cli("explain", folder, "what is the capital of france", "--side", "query", "--json")
    assert done.returncode == 0, done.stderr
    expected = free_model.decode(free_model.encode_query("what is the capital of france", show_progress=False))
    terms = json.loads(done.stdout)["terms"]
    assert {term["token"]: term["weight"] for term in terms} == pytest.approx(expected, rel=1e-6)


def test_mining_with_an_inference_free_model_ranks_with_its_query_table(free_model, tmp_path, monkeypatch):
    """Today `mine --model` loaded the folder as a plain SPLADE model and encoded queries at the document limit."""
    from spladekit.data.collections import load_collection
    from spladekit.index import ExactSearcher
    from spladekit.training.mining import MiningSettings, model_ranker

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    folder = free_model.save(tmp_path / "free")
    collection = load_collection(write_beir(tmp_path / "beir", split="train"), "train")
    rank = model_ranker(collection, MiningSettings(model=str(folder)), show_progress=False)
    queries = collection.queries.texts
    rows, scores = rank(queries, 3)
    documents = free_model.encode_document(collection.corpus.texts, show_progress=False)
    expected = ExactSearcher.build(documents).search(free_model.encode_query(queries, show_progress=False), k=3)
    np.testing.assert_array_equal(rows, expected.doc_indices)
    np.testing.assert_allclose(scores, expected.scores, rtol=1e-5)
