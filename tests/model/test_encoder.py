"""encoder.py: SPLADE vectors — padding and batch-size invariance, vocabulary-sized output, term ids; spladekit.json
and the rescale record read strictly."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spladekit import SparseEncoder
from spladekit.common.errors import InputError, SpladekitError
from spladekit.model.batches import length_groups
from tiny_models import SAMPLE_TEXTS as TEXTS


def load(directory, arch):
    return SparseEncoder.from_pretrained(directory, trust_remote_code=arch == "gte")


@pytest.mark.parametrize("arch", ["bert", "distilbert", "albert", "roberta", "modernbert", "ettin", "gte"])
def test_padding_and_batch_size_invariance(arch, tiny_model_dirs):
    encoder = load(tiny_model_dirs[arch], arch)
    alone = sp.vstack([encoder.encode([text], show_progress=False) for text in TEXTS]).toarray()
    for batch_size in (2, 5):
        batched = encoder.encode(TEXTS, batch_size=batch_size, show_progress=False).toarray()
        np.testing.assert_allclose(batched, alone, atol=1e-5)
        assert np.array_equal(batched > 0, alone > 0)


@pytest.mark.parametrize("arch", ["bert", "distilbert", "albert", "roberta", "modernbert", "ettin", "gte"])
def test_length_grouped_forward_gives_the_padded_batchs_vectors_and_gradients(arch, tiny_model_dirs):
    """Texts cut by length into groups, each padded to its own longest (RoBERTa's position offset, ModernBERT's
    own unpadding and GTE's remote code included): the same vectors, the same gradients, the same real tokens."""
    encoder = load(tiny_model_dirs[arch], arch)
    texts = TEXTS * 3  # lengths 2 to 21 tokens, repeated: groups hold texts of several rows
    results = {}
    for groups in (1, 3, 100):
        encoder.zero_grad()
        vectors, tokens = encoder.forward_texts(texts, 32, groups)
        (vectors * torch.linspace(0.5, 1.5, vectors.shape[1])).sum().backward()
        grads = [p.grad.clone() for p in encoder.parameters() if p.grad is not None]
        results[groups] = vectors.detach(), tokens, grads
    padded, padded_tokens, padded_grads = results[1]
    for groups in (3, 100):
        vectors, tokens, grads = results[groups]
        assert tokens == padded_tokens
        torch.testing.assert_close(vectors, padded, atol=1e-5, rtol=1e-5)
        assert len(grads) == len(padded_grads)
        for grad, expected in zip(grads, padded_grads):
            torch.testing.assert_close(grad, expected, atol=1e-4, rtol=1e-4)


def test_length_groups_pad_fewest_tokens():
    rng = np.random.default_rng(0)

    def padded(parts, lengths):
        return sum(len(part) * lengths[part].max() for part in parts)

    def best_by_enumeration(lengths, groups):  # every cut of the sorted lengths into at most ``groups`` runs
        ordered = np.sort(lengths)
        best = len(ordered) * ordered[-1]
        for k in range(1, groups):
            for cuts in itertools.combinations(range(1, len(ordered)), k):
                bounds = (0, *cuts, len(ordered))
                best = min(best, sum((b - a) * ordered[b - 1] for a, b in zip(bounds, bounds[1:])))
        return best

    for _ in range(30):
        lengths = rng.integers(1, 60, size=int(rng.integers(1, 9)))
        groups = int(rng.integers(1, 5))
        parts = length_groups(lengths, groups)
        assert sorted(np.concatenate(parts).tolist()) == list(range(len(lengths))) and len(parts) <= groups
        assert padded(parts, lengths) == best_by_enumeration(lengths, groups)
    with pytest.raises(SpladekitError, match="length groups must be an integer >= 1"):
        length_groups(np.array([3, 4]), 0)


def test_tiny_tokenizer_knows_the_test_words(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    assert encoder.tokenizer.unk_token not in encoder.tokenizer.tokenize(" ".join(TEXTS))


def test_output_is_vocabulary_sized_float32_csr_in_input_order(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    vectors = encoder.encode(TEXTS, batch_size=2, show_progress=False)
    assert sp.isspmatrix_csr(vectors) and vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), encoder.vocab_size)
    assert (vectors.data > 0).all()
    reversed_vectors = encoder.encode(TEXTS[::-1], batch_size=2, show_progress=False)
    # Other batch neighbours can change the last float bits, never the structure.
    np.testing.assert_allclose(reversed_vectors[::-1].toarray(), vectors.toarray(), atol=1e-5)
    assert np.array_equal(reversed_vectors[::-1].toarray() > 0, vectors.toarray() > 0)


@pytest.mark.parametrize("method", ["encode", "encode_query", "encode_document"])
def test_one_string_is_one_text(tiny_model_dirs, method):
    encoder = load(tiny_model_dirs["bert"], "bert")
    one = getattr(encoder, method)(TEXTS[0], show_progress=False)
    assert one.shape == (1, encoder.vocab_size)  # not one row per character
    np.testing.assert_array_equal(one.toarray(), getattr(encoder, method)([TEXTS[0]], show_progress=False).toarray())


def test_term_ids_match_the_models_own_logits(tiny_model_dirs):
    """Column v of the CSR must be max_t log1p(relu(logits[t, v])) from the unmodified model forward."""
    encoder = load(tiny_model_dirs["bert"], "bert")
    vectors = encoder.encode(TEXTS, show_progress=False)
    for row, text in enumerate(TEXTS):
        batch = encoder.tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            logits = encoder.model(**batch).logits[0]
        expected = torch.log1p(torch.relu(logits)).amax(dim=0).numpy()
        np.testing.assert_allclose(vectors[row].toarray()[0], expected, atol=1e-5)
        assert set(vectors[row].indices) == set(np.flatnonzero(expected))


def test_empty_input_and_decode(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    assert encoder.encode([], show_progress=False).shape == (0, encoder.vocab_size)
    vector = encoder.encode(["the capital of france"], show_progress=False)
    terms = encoder.decode(vector[0], top=5)
    assert len(terms) == 5
    weights = list(terms.values())
    assert weights == sorted(weights, reverse=True) and weights[0] == pytest.approx(vector.data.max())


def test_max_length_truncates(tiny_model_dirs):
    encoder = load(tiny_model_dirs["bert"], "bert")
    long_text = " ".join(["cat"] * 50 + ["france"])
    full = encoder.encode([long_text], max_length=64, show_progress=False)
    short = encoder.encode([long_text], max_length=8, show_progress=False)
    assert (full != short).nnz > 0


@pytest.mark.parametrize("arch", ["bert", "distilbert", "albert", "roberta", "modernbert", "ettin", "gte"])
def test_a_token_limit_above_the_positions_is_clamped_to_them_with_one_warning(arch, tiny_model_dirs, caplog):
    """Today's failure: a limit above the position table ran into the backbone ("size of tensor a (1202) …")."""
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs[arch], trust_remote_code=arch == "gte")
    long_text = " ".join(["the cat sat on the mat"] * 100)
    assert len(encoder.tokenizer(long_text)["input_ids"]) > encoder.positions
    at_limit = encoder.encode([long_text, "a dog"], max_length=encoder.positions, show_progress=False)
    with caplog.at_level("WARNING", logger="spladekit"):
        clamped = encoder.encode([long_text, "a dog"], max_length=100_000, show_progress=False)
        encoder.encode_query(long_text, max_length=100_000, show_progress=False)
    assert (clamped != at_limit).nnz == 0
    assert [r.getMessage() for r in caplog.records if "100000" in r.getMessage()] == [
        f"token limit 100000 is above the {encoder.positions} positions of {encoder.source}: texts are cut at "
        f"{encoder.positions} tokens"
    ]


def test_a_token_limit_below_8_or_not_an_integer_is_refused_before_encoding(tiny_model_dirs):
    from spladekit.common.errors import SpladekitError

    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    for bad in (7, 0, -1, 2.5, True):
        with pytest.raises(SpladekitError, match="token limit"):
            encoder.encode(["a dog"], max_length=bad, show_progress=False)
    with pytest.raises(SpladekitError, match="token limit"):
        SparseEncoder.from_pretrained(tiny_model_dirs["bert"], query_max_length=3)
    # the default (256) on a backbone of 128 positions is spladekit's choice, not the user's: no warning, no error
    assert encoder.max_length == encoder.positions == 128


def test_encode_query_and_encode_document_differ_only_by_their_max_length(tiny_model_dirs):
    long_text = " ".join(["cat"] * 50 + ["france"])
    texts = [long_text, *TEXTS]
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], max_length=64, query_max_length=8)
    assert encoder.side_max_length("query") == 8 and encoder.side_max_length("document") == 64
    queries = encoder.encode_query(texts, show_progress=False)
    documents = encoder.encode_document(texts, show_progress=False)
    np.testing.assert_array_equal(queries.toarray(), encoder.encode(texts, max_length=8, show_progress=False).toarray())
    np.testing.assert_array_equal(documents.toarray(), encoder.encode(texts, show_progress=False).toarray())
    assert (queries[0] != documents[0]).nnz > 0  # the long text is truncated on the query side only
    # an explicit max_length wins on either side: then both sides give the same vectors
    np.testing.assert_array_equal(
        encoder.encode_query(texts, max_length=64, show_progress=False).toarray(), documents.toarray()
    )
    # a model that records no query limit encodes queries with its max length, as before the sides existed
    unrecorded = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], max_length=64)
    assert unrecorded.query_max_length is None and unrecorded.side_max_length("query") == 64
    np.testing.assert_array_equal(unrecorded.encode_query(texts, show_progress=False).toarray(), documents.toarray())


def test_query_max_length_is_saved_and_read_back(tiny_model_dirs, tmp_path):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], query_max_length=12)
    encoder.save(tmp_path / "model")
    assert json.loads((tmp_path / "model" / "spladekit.json").read_text())["query_max_length"] == 12
    assert "(queries: 12)" in (tmp_path / "model" / "README.md").read_text()
    loaded = SparseEncoder.from_pretrained(tmp_path / "model")
    assert loaded.query_max_length == 12 and loaded.max_length == encoder.max_length
    assert SparseEncoder.from_pretrained(tmp_path / "model", query_max_length=20).query_max_length == 20
    SparseEncoder.from_pretrained(tiny_model_dirs["bert"]).save(tmp_path / "plain")  # none recorded: null
    assert json.loads((tmp_path / "plain" / "spladekit.json").read_text())["query_max_length"] is None
    assert SparseEncoder.from_pretrained(tmp_path / "plain").query_max_length is None


@pytest.mark.parametrize("side", ["query", "document"])
def test_max_active_dims_keeps_the_k_largest_weights_of_each_vector(tiny_model_dirs, side):
    from spladekit.common.sparse import keep_top_weights

    encoder = load(tiny_model_dirs["bert"], "bert")
    encode = encoder.encode_query if side == "query" else encoder.encode_document
    full = encode(TEXTS, show_progress=False)
    assert np.diff(full.indptr).max() > 3  # so that k = 3 prunes something
    pruned = encode(TEXTS, show_progress=False, max_active_dims=3)
    assert np.diff(pruned.indptr).max() == 3
    np.testing.assert_array_equal(pruned.toarray(), keep_top_weights(full, 3).toarray())


def test_bad_max_active_dims_or_side_is_refused_before_encoding(tiny_model_dirs):
    from spladekit.common.errors import SpladekitError

    encoder = load(tiny_model_dirs["bert"], "bert")
    encoder.forward = None  # encoding would fail with a TypeError
    with pytest.raises(SpladekitError, match="max_active_dims must be a whole number >= 1, got 0"):
        encoder.encode_document(TEXTS, max_active_dims=0, show_progress=False)
    with pytest.raises(SpladekitError, match="unknown side 'passage'"):
        encoder.side_max_length("passage")


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"max_length": "abc"}, "'max_length' must be an integer, got 'abc'"),
        ({"max_length": 0}, "'max_length' must be a positive integer"),
        ({"query_max_length": "32"}, "'query_max_length' must be an integer, got '32'"),
        ({"query_max_length": -1}, "'query_max_length' must be a positive integer"),
        ({"backbone": ["a"]}, "'backbone' must be a string, got a JSON list"),
        ([1, 2], "expected a JSON object, got list"),
    ],
)
def test_spladekit_json_of_the_wrong_type_is_an_error_naming_it(tiny_model_dirs, tmp_path, metadata, message):
    folder = Path(shutil.copytree(tiny_model_dirs["bert"], tmp_path / "model"))
    (folder / "spladekit.json").write_text(json.dumps(metadata))
    with pytest.raises(InputError, match=re.escape(f"{folder / 'spladekit.json'}: {message}")):
        SparseEncoder.from_pretrained(folder)


@pytest.mark.parametrize(
    "record, message",
    [
        ("tied", "'spladekit_rescale' must be a JSON object"),
        ({"k": "x", "mode": "tied", "rescale_bias": False}, "k must be a positive finite number"),
        ({"k": 2, "mode": "sideways", "rescale_bias": False}, "mode must be one of tied, untie"),
        ({"k": 2, "mode": "tied", "rescale_bias": "no"}, "rescale_bias must be true or false"),
    ],
)
def test_rescale_record_of_the_wrong_type_is_an_error_naming_config_json(tiny_model_dirs, tmp_path, record, message):
    folder = Path(shutil.copytree(tiny_model_dirs["bert"], tmp_path / "model"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"spladekit_rescale": record}))
    with pytest.raises(InputError, match=re.escape(str(folder / "config.json")) + ".*" + re.escape(message)):
        SparseEncoder.from_pretrained(folder)


def poison_texts_with(encoder, word):
    """Make ``forward`` return NaN for every text containing ``word`` (a model broken for some inputs)."""
    token = encoder.tokenizer.convert_tokens_to_ids(word)
    forward = encoder.forward

    def poisoned(batch):
        vectors = forward(batch)
        hit = (batch["input_ids"] == token).any(dim=1)
        return torch.where(hit[:, None], torch.full_like(vectors, float("nan")), vectors)

    encoder.forward = poisoned


@pytest.mark.parametrize("batch_size", [1, 2, 32])
def test_a_non_finite_vector_is_refused_naming_the_text(tiny_model_dirs, batch_size):
    from spladekit.model.encoder import NonFiniteVector

    encoder = load(tiny_model_dirs["bert"], "bert")
    poison_texts_with(encoder, "seine")  # only TEXTS[1] holds it; length sorting moves it first
    with pytest.raises(
        NonFiniteVector, match=r"^text 1 \(id 'd1'\) encodes to a vector with NaN/inf weights"
    ) as caught:
        encoder.encode(TEXTS, batch_size=batch_size, show_progress=False, ids=[f"d{i}" for i in range(len(TEXTS))])
    assert caught.value.index == 1
    with pytest.raises(NonFiniteVector, match=r"^text 1 encodes"):
        encoder.encode(TEXTS, batch_size=batch_size, show_progress=False)
    assert encoder.encode([TEXTS[0], TEXTS[2]], show_progress=False).nnz > 0


def test_save_refuses_non_finite_weights_and_writes_nothing(tiny_model_dirs, tmp_path):
    from spladekit.common.errors import SpladekitError
    from spladekit.model.backbone import MLMHead

    encoder = load(tiny_model_dirs["bert"], "bert")
    with torch.no_grad():
        MLMHead.of(encoder.model).projection.weight[5, 0] = float("inf")
    with pytest.raises(SpladekitError, match=r"refusing to save: the model's weights hold NaN or inf \(.*weight"):
        encoder.save(tmp_path / "model")
    assert not (tmp_path / "model").exists() and list(tmp_path.iterdir()) == []


def test_cli_encode_with_a_damaged_model_exits_2_naming_the_document(tiny_model_dirs, tmp_path, cli):
    import json
    import shutil

    from spladekit.model.backbone import MLMHead

    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_model_dirs["bert"], damaged)
    encoder = load(damaged, "bert")
    with torch.no_grad():
        MLMHead.of(encoder.model).projection.weight[7] = float("nan")
    encoder.model.save_pretrained(damaged)  # bypasses SparseEncoder.save's check: a file damaged elsewhere
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"doc-{i}", "text": text}) + "\n" for i, text in enumerate(TEXTS)))
    result = cli("encode", damaged, "--corpus", corpus, "--output", tmp_path / "vectors")
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]  # (a progress bar too)
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert errors[0].startswith("error: text 1 (id 'doc-1') encodes to a vector with NaN/inf weights")
    assert not (tmp_path / "vectors").exists()


def test_cli_encode_failing_after_a_complete_shard_keeps_it_for_resume(tiny_model_dirs, tmp_path, cli, monkeypatch):
    import json

    from spladekit.model.encoder import NonFiniteVector, SparseEncoder

    encode_document = SparseEncoder.encode_document

    def fail_on_the_second_shard(self, texts, *args, **kwargs):
        if kwargs.get("ids") and kwargs["ids"][0] == "doc-1":
            raise NonFiniteVector("text 0 (id 'doc-1') encodes to a vector with NaN/inf weights", 0)
        return encode_document(self, texts, *args, **kwargs)

    monkeypatch.setattr(SparseEncoder, "encode_document", fail_on_the_second_shard)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"doc-{i}", "text": text}) + "\n" for i, text in enumerate(TEXTS)))
    result = cli(
        "encode", tiny_model_dirs["bert"], "--corpus", corpus, "--output", tmp_path / "vectors", "--shard-size", "1"
    )
    assert result.returncode == 2 and "text 0 (id 'doc-1')" in result.stderr
    assert "1 complete shard(s) kept in" in result.stderr and "--resume" in result.stderr
    assert (tmp_path / "vectors" / "shards" / "00000" / "shard.json").is_file()
    assert not (tmp_path / "vectors" / "manifest.json").exists()


def test_a_batch_that_does_not_fit_is_retried_at_half_the_size(tiny_model_dirs, monkeypatch, caplog):
    """A device that holds at most 2 texts a forward pass (an out-of-memory error above): encoding with batches of 8
    halves to 4, then 2, logs each halving, and returns what batches of 2 return."""
    encoder = load(tiny_model_dirs["bert"], "bert")
    expected = encoder.encode(TEXTS, batch_size=2, show_progress=False)
    forward, sizes = encoder.forward, []

    def small_device(batch):
        sizes.append(len(batch["input_ids"]))
        if len(batch["input_ids"]) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(batch)

    monkeypatch.setattr(encoder, "forward", small_device)
    with caplog.at_level("WARNING", logger="spladekit"):
        result = encoder.encode(TEXTS, batch_size=8, show_progress=False)
    assert (result != expected).nnz == 0
    assert sizes[:3] == [min(8, len(TEXTS)), 4, 2] and set(sizes[3:]) <= {1, 2}
    assert re.findall(r"continuing with batches of (\d+)", caplog.text) == ["4", "2"]


def test_out_of_memory_at_one_text_is_raised(tiny_model_dirs, monkeypatch):
    encoder = load(tiny_model_dirs["bert"], "bert")

    def no_memory(batch):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(encoder, "forward", no_memory)
    with pytest.raises(torch.OutOfMemoryError):
        encoder.encode(TEXTS, batch_size=4, show_progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("frozen", [False, True])
def test_a_compiled_backbone_encodes_the_same_vectors_with_one_graph_for_every_shape(frozen, tiny_model_dirs, tmp_path):
    from torch._dynamo.utils import counters

    eager = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    compiled = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    torch._dynamo.reset()  # graphs compiled by earlier tests (same model class) would be reused
    compiled.compile_backbone(frozen=frozen)
    counters.clear()
    for size in (2, 3, 5):  # batches of other shapes (texts and padded lengths)
        expected = eager.encode(TEXTS[:size], batch_size=size, show_progress=False).toarray()
        got = compiled.encode(TEXTS[:size], batch_size=size, show_progress=False).toarray()
        assert (expected > 0).sum() > 0
        np.testing.assert_allclose(got, expected, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 1  # dynamic shapes: no recompilation per shape
    # the weights and their names are the eager model's: what save writes loads back to the same vectors
    reloaded = SparseEncoder.from_pretrained(compiled.save(tmp_path / "saved"))
    np.testing.assert_allclose(
        reloaded.encode(TEXTS, show_progress=False).toarray(), eager.encode(TEXTS, show_progress=False).toarray()
    )


@pytest.mark.slow
def test_two_frozen_models_of_one_architecture_encode_their_own_weights(tiny_model_dirs):
    """Freezing makes the weights constants of a compiled graph: a second model of the same architecture, with
    other weights, must not reuse the first one's graph (Dynamo's guards tell them apart)."""
    first, second = (SparseEncoder.from_pretrained(tiny_model_dirs["bert"]) for _ in range(2))
    with torch.no_grad():
        for parameter in second.model.parameters():
            parameter.mul_(1.5)
    expected = [model.encode(TEXTS, show_progress=False).toarray() for model in (first, second)]
    for model in (first, second):
        model.compile_backbone(frozen=True)
    got = [model.encode(TEXTS, show_progress=False).toarray() for model in (first, second)]
    assert np.abs(expected[1] - expected[0]).max() > 0.1  # the two models differ
    for vectors, reference in zip(got, expected):
        np.testing.assert_allclose(vectors, reference, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("frozen", [False, True])
def test_freezing_makes_the_weights_constants_of_the_compiled_graph(frozen, tiny_model_dirs):
    """What compile_backbone(frozen=True) promises and warns about: the weights are folded into the graph (so a
    change made afterwards is not seen), which a plain compile does not do. Fails if freezing is not applied."""
    torch._dynamo.reset()
    model = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    model.compile_backbone(frozen=frozen)
    before = model.encode(TEXTS, show_progress=False).toarray()
    # the transformer layers' matrices only (the head's projection runs outside the compiled graph; freezing folds
    # the linear layers' weights, prepacked: biases and norms may stay inputs)
    linears = [
        module.weight for module in model.model.base_model.encoder.modules() if isinstance(module, torch.nn.Linear)
    ]
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for weight in linears:
            weight.add_(torch.randn(weight.shape, generator=generator))
    after = model.encode(TEXTS, show_progress=False).toarray()
    changed = np.abs(after - before).max() > 1e-3
    assert changed != frozen
