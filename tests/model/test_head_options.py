"""head_options.py, folding.py and the pooling's position_top_k: every head option against a naive dense reference
(values and gradients) at every pooling, with ties; recorded with the model; bad values refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from test_pooling import random_inputs

from conftest import shared_path
from spladekit import SparseEncoder
from spladekit.common.errors import InputError, SpladekitError
from spladekit.model.folding import FOLD_FILE, build_fold, fold_key, read_fold
from spladekit.model.head_options import HeadOptions, head_options
from spladekit.model.pooling import keep_position_top_k, splade_max_pool, splade_max_pool_fused
from tiny_models import ARCHITECTURES
from tiny_models import SAMPLE_TEXTS as TEXTS

POOLINGS_ON_CPU = ("naive", "fused", "fused-bf16", "fused-adaptive", "auto")


def dense_reference(hidden, weight, bias, mask, shift=0.0, top_k=None, token_map=None, dims=None):
    """The options written out on the B × L × V logits, one loop per rule (no code shared with the product)."""
    logits = hidden @ weight.T + (bias if bias is not None else 0) - shift
    if top_k is not None:
        kept = torch.zeros_like(logits, dtype=torch.bool)
        for b in range(logits.shape[0]):
            for t in range(logits.shape[1]):
                row = logits[b, t].detach().tolist()
                order = sorted(range(len(row)), key=lambda v: (-row[v], v))[:top_k]
                kept[b, t, order] = True
        logits = torch.where(kept, logits, torch.zeros_like(logits))
    weights = torch.log1p(torch.relu(logits)) * mask.unsqueeze(-1).to(logits.dtype)
    vectors = weights.amax(dim=1)
    if token_map is None:
        return vectors
    columns = []
    for d in range(dims):
        members = [v for v in range(len(token_map)) if token_map[v] == d]
        columns.append(vectors[:, members].amax(dim=1))
    return torch.stack(columns, dim=1)


def grads(fn, hidden, weight, bias, grad_output):
    leaves = [tensor.detach().clone().requires_grad_() for tensor in (hidden, weight, bias)]
    out = fn(*leaves)
    return out.detach(), torch.autograd.grad(out, leaves, grad_output)


@pytest.mark.parametrize("top_k", [1, 3, 7])
@pytest.mark.parametrize("chunk_size", [4, 5, 64])
@pytest.mark.parametrize("integers", [False, True], ids=["random", "ties"])
def test_position_top_k_fused_and_naive_equal_the_dense_reference(top_k, chunk_size, integers):
    hidden, weight, bias, mask = random_inputs(vocab=23)
    if integers:
        # small integers: every logit is exact whatever the GEMM's blocking, so equal logits are bitwise ties (at
        # the k-th place too); random floats tie only up to the rounding of each GEMM
        hidden, weight, bias = hidden.round().clamp(-2, 2), weight.round().clamp(-2, 2), bias.round() + 0.5
        # ... but different tokens must not tie on a term (the fused head gives such a max's gradient to the first
        # token, autograd shares it: a difference of measure zero on real logits): a last unit that adds t / 1024
        # to token t's logits, except on the all-zero row (term 0, whose tie at every token both heads share)
        offsets = torch.arange(hidden.shape[1], dtype=hidden.dtype) / 1024
        hidden[..., -1] = offsets
        hidden[0, 2] = hidden[0, 4]  # still two identical tokens
        weight[1:, -1] = 1
        weight[5], bias[5] = weight[9], bias[9]
        weight[14], bias[14] = weight[9], bias[9]
    grad_output = torch.rand(hidden.shape[0], weight.shape[0], dtype=hidden.dtype)

    def reference(h, w, b):
        return dense_reference(h, w, b, mask, top_k=top_k)

    expected, expected_grads = grads(reference, hidden, weight, bias, grad_output)
    for fn in (
        lambda h, w, b: splade_max_pool(h, w, b, mask, position_top_k=top_k),
        lambda h, w, b: splade_max_pool_fused(h, w, b, mask, chunk_size=chunk_size, position_top_k=top_k),
    ):
        value, gradients = grads(fn, hidden, weight, bias, grad_output)
        torch.testing.assert_close(value, expected, rtol=0, atol=1e-12)
        for got, want in zip(gradients, expected_grads):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # the option does something here: fewer active terms than without it
    assert int((expected > 0).sum()) < int((dense_reference(hidden, weight, bias, mask) > 0).sum())


def test_ties_at_the_k_th_place_go_to_the_lower_vocabulary_id():
    logits = torch.tensor([[[3.0, 1.0, 2.0, 2.0, 2.0, 0.5]]])
    kept = keep_position_top_k(logits, 3)
    assert kept.tolist() == [[[3.0, 0.0, 2.0, 2.0, 0.0, 0.0]]]
    hidden = torch.eye(6).unsqueeze(0)[:, :1]  # one token whose logits are the bias
    fused = splade_max_pool_fused(hidden, torch.zeros(6, 6), logits[0, 0], torch.ones(1, 1), position_top_k=3)
    assert (fused[0] > 0).tolist() == [True, False, True, True, False, False]


def test_position_top_k_over_the_vocabulary_or_zero_is_refused():
    hidden, weight, bias, mask = random_inputs(vocab=10)
    for bad in (0, 11, True):
        with pytest.raises(ValueError, match="position_top_k"):
            splade_max_pool_fused(hidden, weight, bias, mask, position_top_k=bad)


def tiny_encoder(tiny_model_dirs, arch="bert", pooling="naive", **options) -> SparseEncoder:
    torch.manual_seed(0)
    return SparseEncoder.from_pretrained(
        tiny_model_dirs[arch], pooling=pooling, head=HeadOptions(**options), trust_remote_code=arch == "gte"
    )


OPTION_SETS = [
    {"logit_shift": 0.3},
    {"position_top_k": 5},
    {"vocab_fold": "space"},
    {"logit_shift": 0.2, "position_top_k": 4, "vocab_fold": "case_space", "lowercase": True},
]


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(o))
def test_every_pooling_gives_the_dense_references_values_and_gradients(tiny_model_dirs, arch, options):
    encoder = tiny_encoder(tiny_model_dirs, arch, "naive", **options)
    encoder.model.eval()
    texts = [text.upper() for text in TEXTS[:3]] if options.get("lowercase") else TEXTS[:3]
    batch = encoder.tokenize(texts)
    hidden, projection = encoder.head_inputs(batch)
    hidden = hidden.detach().double()
    weight, bias = projection.weight.detach().double(), projection.bias
    bias = torch.zeros(weight.shape[0], dtype=torch.float64) if bias is None else bias.detach().double()
    fold = encoder.fold
    grad_output = torch.rand(hidden.shape[0], encoder.vocab_size, dtype=torch.float64)
    reference, reference_grads = grads(
        lambda h, w, b: dense_reference(
            h,
            w,
            b,
            batch["attention_mask"],
            options.get("logit_shift", 0.0),
            options.get("position_top_k"),
            None if fold is None else fold.token_map,
            None if fold is None else fold.dimensions,
        ),
        hidden,
        weight,
        bias,
        grad_output,
    )
    assert reference.shape[1] == encoder.vocab_size
    for pooling in POOLINGS_ON_CPU:
        encoder.pooling = pooling
        leaves = [tensor.detach().clone().requires_grad_() for tensor in (hidden, weight, bias)]
        out = encoder.pool(*leaves, batch["attention_mask"])
        gradients = torch.autograd.grad(out, leaves, grad_output)
        torch.testing.assert_close(out.detach(), reference, rtol=1e-9, atol=1e-9, msg=pooling)
        for got, want in zip(gradients, reference_grads):
            torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-9, msg=pooling)


def test_the_triton_head_applies_the_options_through_its_interpreter(tiny_model_dirs):
    pytest.importorskip("triton")
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter is set only where no GPU is present")
    options = {"logit_shift": 0.2, "position_top_k": 4, "vocab_fold": "space"}
    naive = tiny_encoder(tiny_model_dirs, "bert", "naive", **options)
    triton = tiny_encoder(tiny_model_dirs, "bert", "triton", **options)
    for shift_only in (False, True):
        if shift_only:
            naive = tiny_encoder(tiny_model_dirs, "bert", "naive", logit_shift=0.2)
            triton = tiny_encoder(tiny_model_dirs, "bert", "triton", logit_shift=0.2)
        a = naive.encode(TEXTS[:4], show_progress=False)
        b = triton.encode(TEXTS[:4], show_progress=False)
        np.testing.assert_allclose(a.toarray(), b.toarray(), rtol=1e-5, atol=1e-6)


def test_logit_shift_is_a_lower_bias_and_sparsifies(tiny_model_dirs):
    plain = tiny_encoder(tiny_model_dirs, "roberta", "fused")
    shifted = tiny_encoder(tiny_model_dirs, "roberta", "fused", logit_shift=0.5)
    a, b = plain.encode(TEXTS, show_progress=False), shifted.encode(TEXTS, show_progress=False)
    assert b.nnz < a.nnz
    # every weight the shift keeps was a weight of at least the shift's size before: log1p(relu(x - s)) > 0 ⇒ x > s
    before = np.expm1(a.toarray())
    after = np.expm1(b.toarray())
    kept = after > 0
    np.testing.assert_allclose(after[kept], before[kept] - 0.5, rtol=1e-4, atol=1e-5)


def test_packed_and_length_grouped_batches_apply_the_options(tiny_model_dirs):
    encoder = tiny_encoder(tiny_model_dirs, "bert", "fused", logit_shift=0.1, position_top_k=3, vocab_fold="space")
    encoder.model.eval()
    with torch.no_grad():
        padded, _ = encoder.forward_texts(TEXTS[:5])
        grouped, _ = encoder.forward_texts(TEXTS[:5], groups=3)
        packed, _ = encoder.forward_texts(TEXTS[:5], packing=True)
    torch.testing.assert_close(grouped, padded, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-6)
    assert padded.shape[1] == encoder.vocab_size < encoder.head.vocab_size


def cased(encoder: SparseEncoder) -> SparseEncoder:
    """The tiny models' tokenizer lowercases by itself: made cased, as ModernBERT's or RoBERTa's are."""
    from tokenizers.normalizers import BertNormalizer

    encoder.tokenizer.backend_tokenizer.normalizer = BertNormalizer(lowercase=False)
    return encoder


def test_lowercase_makes_case_irrelevant(tiny_model_dirs):
    encoder = cased(tiny_encoder(tiny_model_dirs, "bert", "fused", lowercase=True))
    upper = encoder.encode([text.upper() for text in TEXTS[:3]], show_progress=False)
    lower = encoder.encode([text.lower() for text in TEXTS[:3]], show_progress=False)
    np.testing.assert_array_equal(upper.toarray(), lower.toarray())
    plain = cased(tiny_encoder(tiny_model_dirs, "bert", "fused"))
    assert (plain.encode([t.upper() for t in TEXTS[:3]], show_progress=False) != lower).nnz > 0


def test_the_options_and_the_fold_are_saved_with_the_model_and_read_back(tiny_model_dirs, tmp_path):
    options = {"logit_shift": 0.25, "position_top_k": 6, "vocab_fold": "space", "lowercase": True}
    encoder = tiny_encoder(tiny_model_dirs, "modernbert", "fused", **options)
    vectors = encoder.encode(TEXTS[:3], show_progress=False)
    encoder.save(tmp_path / "model")
    metadata = json.loads((tmp_path / "model" / "spladekit.json").read_text())
    assert metadata["head"] == options
    assert (tmp_path / "model" / FOLD_FILE).is_file()
    assert "position_top_k" in (tmp_path / "model" / "README.md").read_text()
    loaded = SparseEncoder.from_pretrained(tmp_path / "model", pooling="fused")
    assert loaded.head_options == HeadOptions(**options)
    np.testing.assert_allclose(loaded.encode(TEXTS[:3], show_progress=False).toarray(), vectors.toarray(), atol=1e-6)
    with pytest.raises(SpladekitError, match="trained with head options"):
        SparseEncoder.from_pretrained(tmp_path / "model", head=HeadOptions(logit_shift=1.0))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"logit_shift": -1}, "head.logit_shift"),
        ({"position_top_k": 0}, "head.position_top_k"),
        ({"vocab_fold": "cases"}, "head.vocab_fold"),
        ({"lowercase": "yes"}, "head.lowercase"),
        ({"shift": 1}, "head.shift"),
    ],
)
def test_bad_head_options_are_refused_naming_the_key(values, message, tmp_path):
    with pytest.raises(InputError, match=message) as error:
        head_options(values, tmp_path / "spladekit.json")
    assert "\n" not in str(error.value)
    if "shift" not in values:  # an unknown keyword is Python's TypeError
        with pytest.raises(SpladekitError, match=message):
            HeadOptions(**values)


def test_position_top_k_over_the_vocabulary_is_refused_at_load(tiny_model_dirs):
    with pytest.raises(SpladekitError, match="head.position_top_k must be at most the vocabulary size"):
        tiny_encoder(tiny_model_dirs, "bert", position_top_k=10**6)


class WordPieceStub:
    """A tokenizer's vocabulary, nothing else (what build_fold reads)."""

    def __init__(self, tokens, special=()):
        self.tokens, self.all_special_ids = tokens, list(special)

    def __len__(self):
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        return [self.tokens[i] for i in ids]


def test_fold_classes_by_marker_and_case():
    tokens = ["[CLS]", "[cls]", "Ġthe", "the", "ĠThe", "The", "Ġ", "Ã©", "Ã‰", "ĠĠx"]
    stub = WordPieceStub(tokens, special=[0])
    space = build_fold(stub, len(tokens) + 2, "space")
    assert space.marker == "Ġ"
    assert [space.dimension_tokens[d] for d in space.token_map[:6]] == [
        "[CLS]",
        "[cls]",
        "Ġthe",
        "Ġthe",
        "ĠThe",
        "ĠThe",
    ]
    both = build_fold(stub, len(tokens) + 2, "case_space")
    assert len({int(both.token_map[i]) for i in (2, 3, 4, 5)}) == 1  # the four variants of "the" are one dimension
    assert both.token_map[0] != both.token_map[1]  # a special token is never folded
    assert both.token_map[6] != both.token_map[3]  # the bare marker keeps its own dimension
    assert both.token_map[7] != both.token_map[8]  # byte-level: non-ASCII characters are bytes, not letters
    assert both.dimension_tokens[-2:] == (f"[id:{len(tokens)}]", f"[id:{len(tokens) + 1}]")
    assert len(set(both.dimension_tokens)) == both.dimensions  # distinct strings (indexes rely on it)
    assert fold_key("##ing", "space", "##") == "ing" and fold_key("ÉTÉ", "case", "▁") == "été"


def test_the_fold_of_a_sparse_matrix_is_the_max_over_each_class():
    stub = WordPieceStub(["a", "A", "b", "B", "c"])
    fold = build_fold(stub, 5, "case")
    matrix = sp.csr_matrix(np.array([[0.5, 2.0, 0.0, 1.0, 0.0], [3.0, 0.0, 0.0, 0.0, 4.0]], dtype=np.float32))
    np.testing.assert_array_equal(fold.sparse(matrix).toarray(), [[2.0, 1.0, 0.0], [3.0, 0.0, 4.0]])
    np.testing.assert_array_equal(fold.dense(torch.from_numpy(matrix.toarray())).numpy(), fold.sparse(matrix).toarray())


def test_a_fold_record_that_does_not_fit_is_refused(tmp_path):
    stub = WordPieceStub(["a", "A", "b"])
    build_fold(stub, 3, "case").save(tmp_path)
    assert read_fold(tmp_path, 3).dimensions == 2
    with pytest.raises(InputError, match="the model's head has 4"):
        read_fold(tmp_path, 4)
    record = json.loads((tmp_path / FOLD_FILE).read_text())
    record["token_map"] = [0, 5, 1]
    (tmp_path / FOLD_FILE).write_text(json.dumps(record))
    with pytest.raises(InputError, match="outside the 2 dimensions"):
        read_fold(tmp_path, 3)


@pytest.mark.realdata
def test_folded_sizes_of_the_real_modernbert_tokenizer():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(shared_path("backbone-files", "ModernBERT-base"))
    sizes = {mode: build_fold(tokenizer, len(tokenizer), mode).dimensions for mode in ("case", "space", "case_space")}
    # SPARSEUP's card: case_space takes ModernBERT's 50k ids to about 34k dimensions
    assert 32_000 < sizes["case_space"] < 36_000
    assert sizes["case_space"] < min(sizes["case"], sizes["space"]) < len(tokenizer)


def test_a_folded_vectors_folder_round_trips_through_index_search_explain_and_export_token_strings(
    tiny_model_dirs, tmp_path
):
    """The fold's dimensions keep one token string each, through every reader of token strings."""
    from spladekit import build_index, encode_to_shards
    from spladekit.evaluation.explain import explain_pair
    from spladekit.export.search_engine import vocabulary_tokens
    from spladekit.vectors.artifact import Vectors

    encoder = tiny_encoder(tiny_model_dirs, "bert", "fused", vocab_fold="space", logit_shift=0.05)
    fold = encoder.fold
    assert fold.folded_tokens > 0  # the tiny WordPiece vocabulary has "##" pieces to fold
    model = encoder.save(tmp_path / "model")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    encode_to_shards(str(model), corpus, tmp_path / "vectors", device="cpu", show_progress=False)
    plan = json.loads((tmp_path / "vectors" / "manifest.json").read_text())["plan"]
    assert plan["head"]["vocab_fold"] == "space" and plan["vocab_size"] == fold.dimensions
    assert read_fold(tmp_path / "vectors").dimension_tokens == fold.dimension_tokens
    vectors = Vectors.load(tmp_path / "vectors")
    np.testing.assert_allclose(
        vectors.matrix.toarray(), encoder.encode_document(TEXTS, show_progress=False).toarray(), atol=1e-6
    )
    index = build_index(vectors.matrix, "exact")
    query = encoder.encode_query(["capital of france"], show_progress=False)
    hits = index.search(query, 3)
    scores = (query @ vectors.matrix.T).toarray()[0]
    assert [int(i) for i in hits.doc_indices[0]] == [int(i) for i in np.argsort(-scores, kind="stable")[:3]]
    explanation = explain_pair(SparseEncoder.from_pretrained(model), "capital of france", TEXTS[1])
    assert explanation.contributions
    for term in explanation.contributions:
        assert term.token == fold.dimension_tokens[term.id]
    assert vocabulary_tokens(model, fold.dimensions) == list(fold.dimension_tokens)
    with pytest.raises(SpladekitError, match="vocabulary fold has"):
        vocabulary_tokens(model, encoder.head.vocab_size)


def test_a_fold_that_folds_nothing_says_so(tiny_model_dirs, caplog):
    """The tiny models' vocabulary is lowercase: a case fold has nothing to fold, and says it (nothing is silent)."""
    with caplog.at_level("WARNING", logger="spladekit"):
        encoder = tiny_encoder(tiny_model_dirs, "bert", vocab_fold="case")
    assert encoder.fold.folded_tokens == 0 and encoder.vocab_size == encoder.head.vocab_size
    assert any(
        "vocab_fold=case" in record.message and "nothing was folded" in record.message for record in caplog.records
    )


def test_an_inference_free_model_with_a_fold_weights_the_folds_dimensions(tiny_model_dirs):
    """The query table has one weight per folded dimension; a query's tokens map onto those dimensions."""
    from spladekit.model.inference_free import InferenceFreeEncoder, idf_weights

    documents = tiny_encoder(tiny_model_dirs, "bert", "fused", vocab_fold="space")
    fold = documents.fold
    table = idf_weights(documents.tokenizer, TEXTS, documents.vocab_size, show_progress=False, token_map=fold.token_map)
    assert table.shape == (fold.dimensions,)
    model = InferenceFreeEncoder(documents, table, query_max_length=16)
    query = "capital of france"
    vector = model.encode_query([query], show_progress=False)
    ids = documents.tokenizer(query, add_special_tokens=False)["input_ids"]
    expected = {int(d): float(table[d]) for d in np.unique(fold.token_map[ids]) if float(table[d]) != 0}
    assert dict(zip(vector.indices.tolist(), vector.data.tolist())) == pytest.approx(expected)
    differentiable = model.query_forward([query])
    np.testing.assert_allclose(differentiable.detach().numpy(), vector.toarray(), rtol=1e-6)
    assert model.encode_document(TEXTS[:2], show_progress=False).shape[1] == fold.dimensions


def test_a_plain_saved_model_takes_head_options_and_a_model_with_options_keeps_its_own(tiny_model_dirs, tmp_path):
    plain = tiny_encoder(tiny_model_dirs, "bert", "fused")
    plain.save(tmp_path / "plain")
    shifted = SparseEncoder.from_pretrained(tmp_path / "plain", head=HeadOptions(logit_shift=0.5))
    assert shifted.head_options.logit_shift == 0.5  # e.g. an inflated backbone of a sweep, trained with options
    assert SparseEncoder.from_pretrained(tmp_path / "plain").head_options.plain
    shifted.save(tmp_path / "shifted")
    assert SparseEncoder.from_pretrained(tmp_path / "shifted").head_options.logit_shift == 0.5
    with pytest.raises(SpladekitError, match="trained with head options logit_shift=0.5"):
        SparseEncoder.from_pretrained(tmp_path / "shifted", head=HeadOptions(position_top_k=3))
