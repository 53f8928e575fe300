"""backbone.py: loading, locating the vocabulary projection generically, tying, fresh weights, bad paths and
damaged model folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers as T

from spladekit.common.errors import InputError, SpladekitError
from spladekit.model.backbone import MLMHead, load_backbone, projection_bypassed
from tiny_models import ARCHITECTURES, PROJECTION_PATHS, VOCAB, tiny_tokenizer


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_projection_found_generically_and_tied(arch, tiny_model_dirs):
    backbone = load_backbone(tiny_model_dirs[arch], trust_remote_code=arch == "gte")
    assert MLMHead.of(backbone.model).path == PROJECTION_PATHS[arch]
    projection = MLMHead.of(backbone.model).projection
    assert projection.weight.shape[0] == len(VOCAB)
    assert projection.weight.shape[1] == (16 if arch == "albert" else 32)  # ALBERT: factorized V x E
    assert MLMHead.of(backbone.model).tied
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
    assert MLMHead.of(backbone.model).path == PROJECTION_PATHS[arch]  # restored


def test_remote_code_needs_explicit_trust(tiny_model_dirs):
    with pytest.raises(SpladekitError, match="--trust-remote-code"):
        load_backbone(tiny_model_dirs["gte"])


def test_encoder_without_mlm_head_reports_fresh_weights(tmp_path):
    config = T.BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    T.BertModel(config).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    backbone = load_backbone(tmp_path)
    assert "cls.predictions.transform.dense.weight" in backbone.fresh_keys
    assert not any(key.startswith("bert.encoder") for key in backbone.fresh_keys)
    assert MLMHead.of(backbone.model).tied


def test_unknown_path_and_folder_without_weights(tmp_path):
    with pytest.raises(SpladekitError, match="no such model folder"):
        load_backbone(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SpladekitError, match="no model weights"):
        load_backbone(tmp_path)


# ----------------------------------------------------------------------------------------- damaged folders
def copy_of(tiny_model_dirs, tmp_path, arch="bert"):
    return Path(shutil.copytree(tiny_model_dirs[arch], tmp_path / arch))


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_damaged_safetensors_are_an_error_naming_the_file(tiny_model_dirs, tmp_path, damage):
    folder = copy_of(tiny_model_dirs, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"\x00garbage" * 64}[damage])
    with pytest.raises(InputError, match="corrupt or unreadable safetensors weights") as error:
        load_backbone(folder)
    assert str(error.value).startswith(f"{weights}: ")


@pytest.mark.parametrize(
    "field, value", [("hidden_size", "abc"), ("hidden_size", [32]), ("num_hidden_layers", None), ("vocab_size", 1.5)]
)
def test_config_value_of_the_wrong_type_is_an_error_naming_config_json(tiny_model_dirs, tmp_path, field, value):
    folder = copy_of(tiny_model_dirs, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {field: value}))
    with pytest.raises(InputError, match=f"invalid model config .*{field}") as error:
        load_backbone(folder)
    assert str(error.value).startswith(f"{folder / 'config.json'}: ")


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("config.json", "[1, 2]", "config.json: expected a JSON object, got list"),
        ("tokenizer.json", "{oops", "tokenizer.json:1: not valid JSON"),
        ("model.safetensors.index.json", '{"weight_map": {"w": "model-00002.safetensors"}}', "names the shard"),
        ("model.safetensors.index.json", '{"weight_map": ["model.safetensors"]}', "'weight_map' must be a JSON object"),
    ],
)
def test_other_damaged_model_files_are_named(tiny_model_dirs, tmp_path, name, content, message):
    folder = copy_of(tiny_model_dirs, tmp_path)
    (folder / name).write_text(content)
    with pytest.raises(InputError, match=message):
        load_backbone(folder)


def test_what_transformers_still_refuses_is_one_error_naming_the_folder(tiny_model_dirs, tmp_path):
    folder = copy_of(tiny_model_dirs, tmp_path)
    (folder / "tokenizer.json").write_text('{"valid": "json, but not a tokenizer"}')
    with pytest.raises(SpladekitError, match=f"{folder}: cannot load model"):
        load_backbone(folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not a torch file")
    with pytest.raises(SpladekitError, match="weights_only=True\\) refused it"):
        load_backbone(folder)


@pytest.mark.parametrize("command, options", [(["diagnose"], []), (["export", "sentence-transformers"], ["--output"])])
def test_cli_on_a_truncated_model_prints_one_error_line(tiny_model_dirs, tmp_path, command, options, cli):
    folder = copy_of(tiny_model_dirs, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # a copy cut short
    args = [*command, folder, *options] + ([tmp_path / "out"] if options == ["--output"] else [])
    result = cli(*map(str, args))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {weights}: corrupt or unreadable safetensors weights (")
    assert "file not fully covered" in lines[0]
    assert not (tmp_path / "out").exists()
