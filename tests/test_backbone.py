"""backbone.py: loading, locating the vocabulary projection generically, tying, fresh weights, bad paths."""

from __future__ import annotations

import pytest
import torch
import transformers as T

from spladekit.backbone import is_tied, load_backbone, projection_bypassed, projection_path, vocab_projection
from spladekit.errors import SpladekitError
from tiny_models import ARCHITECTURES, PROJECTION_PATHS, VOCAB, tiny_tokenizer


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_projection_found_generically_and_tied(arch, tiny_model_dirs):
    backbone = load_backbone(tiny_model_dirs[arch], trust_remote_code=arch == "gte")
    assert projection_path(backbone.model) == PROJECTION_PATHS[arch]
    projection = vocab_projection(backbone.model)
    assert projection.weight.shape[0] == len(VOCAB)
    assert projection.weight.shape[1] == (16 if arch == "albert" else 32)  # ALBERT: factorized V x E
    assert is_tied(backbone.model)
    assert backbone.fresh_keys == []


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_bypass_returns_projection_inputs(arch, tiny_model_dirs):
    """Applying the projection to what the bypass returns must give the model's own logits."""
    backbone = load_backbone(tiny_model_dirs[arch], trust_remote_code=arch == "gte")
    batch = backbone.tokenizer(["the capital of france", "a cat"], padding=True, return_tensors="pt")
    inputs = {k: v for k, v in batch.items() if k != "token_type_ids" or arch in ("bert", "albert")}
    with torch.no_grad():
        logits = backbone.model(**inputs).logits
        with projection_bypassed(backbone.model) as projection:
            hidden = backbone.model(**inputs).logits
        assert torch.allclose(projection(hidden), logits, atol=1e-5)
    assert projection_path(backbone.model) == PROJECTION_PATHS[arch]  # restored


def test_remote_code_needs_explicit_trust(tiny_model_dirs):
    with pytest.raises(SpladekitError, match="--trust-remote-code"):
        load_backbone(tiny_model_dirs["gte"])


def test_encoder_without_mlm_head_reports_fresh_weights(tmp_path):
    config = T.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=64)
    T.BertModel(config).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    backbone = load_backbone(tmp_path)
    assert "cls.predictions.transform.dense.weight" in backbone.fresh_keys
    assert not any(key.startswith("bert.encoder") for key in backbone.fresh_keys)
    assert is_tied(backbone.model)


def test_unknown_path_and_folder_without_weights(tmp_path):
    with pytest.raises(SpladekitError, match="no such model folder"):
        load_backbone(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SpladekitError, match="no model weights"):
        load_backbone(tmp_path)
