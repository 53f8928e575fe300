"""encoder.py: SPLADE vectors — padding and batch-size invariance, vocabulary-sized output, term ids."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spladekit import SparseEncoder
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
