"""sentence-transformers and naver/splade interop: same vectors both ways, folder resolution, refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from spladekit.common.errors import InputError, SpladekitError
from spladekit.export import export_sentence_transformers
from spladekit.model.backbone import load_backbone
from spladekit.model.encoder import SparseEncoder
from spladekit.model.foreign import resolve_model_folder
from spladekit.model.head import rescale

st = pytest.importorskip("sentence_transformers.sparse_encoder")

MAX_LENGTH = 12  # shorter than LONG, so truncation has to agree too
TEXTS = [
    "what is the capital of france",
    "paris is the capital city of france on the river seine and the quick brown fox jumps over the lazy dog",
    "vitamin d bone pain",
    "a",
]


def st_vectors(folder) -> np.ndarray:
    model = st.SparseEncoder(str(folder), device="cpu")
    return model.encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).cpu().numpy()


def spladekit_vectors(folder, **kwargs) -> np.ndarray:
    return SparseEncoder.from_pretrained(folder, **kwargs).encode(TEXTS, show_progress=False).toarray()


def st_built_folder(model_dir, target, modules_kind="Transformer", pooling=("max", "relu")):
    """A SparseEncoder folder written by sentence-transformers itself (no spladekit files)."""
    transformer = st.modules.Transformer(str(model_dir), transformer_task="fill-mask", max_seq_length=MAX_LENGTH)
    splade = st.modules.SpladePooling(pooling_strategy=pooling[0], activation_function=pooling[1])
    st.SparseEncoder(modules=[transformer, splade], device="cpu").save(str(target))
    return target


@pytest.mark.parametrize("arch", ["bert", "roberta", "modernbert"])
def test_spladekit_to_sentence_transformers_same_vectors(tiny_model_dirs, tmp_path, arch):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs[arch], max_length=MAX_LENGTH)
    ours = encoder.encode(TEXTS, show_progress=False).toarray()
    out = export_sentence_transformers(encoder, tmp_path / "st")
    theirs = st_vectors(out)
    assert theirs.shape == ours.shape
    assert (ours > 0).sum() > 0
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    # and back: spladekit loads the exported folder with the same settings and vectors
    np.testing.assert_allclose(spladekit_vectors(out), ours, atol=1e-5)
    assert SparseEncoder.from_pretrained(out).max_length == MAX_LENGTH


def test_remote_code_model_exports_with_its_code(tiny_model_dirs, tmp_path):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["gte"], trust_remote_code=True, max_length=MAX_LENGTH)
    ours = encoder.encode(TEXTS, show_progress=False).toarray()
    out = export_sentence_transformers(encoder, tmp_path / "st", trust_remote_code=True)
    assert (out / "modeling_gte_standin.py").is_file()
    theirs = (
        st.SparseEncoder(str(out), device="cpu", trust_remote_code=True)
        .encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False)
        .cpu()
        .numpy()
    )
    np.testing.assert_allclose(theirs, ours, atol=1e-5)


def test_rescaled_untied_model_survives_export(tiny_model_dirs, tmp_path):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], max_length=MAX_LENGTH)
    rescale(encoder.model, 4.0, mode="untie")
    ours = encoder.encode(TEXTS, show_progress=False).toarray()
    out = export_sentence_transformers(encoder, tmp_path / "st")
    np.testing.assert_allclose(st_vectors(out), ours, atol=1e-5)
    reloaded = SparseEncoder.from_pretrained(out)
    assert reloaded.model.config.spladekit_rescale["k"] == 4.0


def test_foreign_sentence_transformers_folder_loads_in_spladekit(tiny_model_dirs, tmp_path):
    folder = st_built_folder(tiny_model_dirs["distilbert"], tmp_path / "foreign")
    resolved = resolve_model_folder(folder)
    assert resolved.kind == "sentence-transformers" and resolved.path == folder and resolved.max_length == MAX_LENGTH
    backbone = load_backbone(folder)
    assert backbone.settings == {"max_length": MAX_LENGTH}
    theirs = st_vectors(folder)
    np.testing.assert_allclose(spladekit_vectors(folder, max_length=resolved.max_length), theirs, atol=1e-5)


def test_legacy_mlmtransformer_subfolder_layout(tiny_model_dirs, tmp_path):
    """sentence-transformers < 5.4 layout: 0_MLMTransformer/ subfolder with max_seq_length in its config."""
    root = tmp_path / "legacy"
    shutil.copytree(tiny_model_dirs["bert"], root / "0_MLMTransformer")
    (root / "0_MLMTransformer" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20}))
    (root / "1_SpladePooling").mkdir()
    (root / "1_SpladePooling" / "config.json").write_text(
        json.dumps({"pooling_strategy": "max", "activation_function": "relu", "word_embedding_dimension": None})
    )
    (root / "modules.json").write_text(
        json.dumps(
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": "0_MLMTransformer",
                    "type": "sentence_transformers.sparse_encoder.models.MLMTransformer",
                },
                {
                    "idx": 1,
                    "name": "1",
                    "path": "1_SpladePooling",
                    "type": "sentence_transformers.sparse_encoder.models.SpladePooling",
                },
            ]
        )
    )
    resolved = resolve_model_folder(root)
    assert resolved.path == root / "0_MLMTransformer" and resolved.max_length == 20
    # the folder's own max_seq_length (20) is the loaded encoder's limit
    assert SparseEncoder.from_pretrained(root).max_length == 20
    np.testing.assert_allclose(
        spladekit_vectors(root), spladekit_vectors(tiny_model_dirs["bert"], max_length=20), atol=1e-6
    )


@pytest.mark.parametrize("pooling", [("sum", "relu"), ("max", "log1p_relu")])
def test_other_splade_pooling_is_refused_with_the_file(tiny_model_dirs, tmp_path, pooling):
    folder = st_built_folder(tiny_model_dirs["bert"], tmp_path / "other", pooling=pooling)
    with pytest.raises(InputError, match="SpladePooling") as error:
        resolve_model_folder(folder)
    assert error.value.path == str(folder / "1_SpladePooling" / "config.json")


def test_unsupported_module_list_is_refused(tmp_path):
    (tmp_path / "modules.json").write_text(
        json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.router.Router"}])
    )
    with pytest.raises(InputError, match="Router"):
        resolve_model_folder(tmp_path)


def test_broken_modules_json_names_file_and_line(tmp_path):
    (tmp_path / "modules.json").write_text('[\n  {"idx": 0,\n  oops}\n]')
    with pytest.raises(InputError) as error:
        resolve_model_folder(tmp_path)
    assert error.value.path == str(tmp_path / "modules.json") and error.value.line == 3


def test_naver_plain_checkpoint_loads_as_is(tiny_model_dirs):
    resolved = resolve_model_folder(tiny_model_dirs["bert"])
    assert resolved.kind == "transformers" and resolved.path == tiny_model_dirs["bert"] and resolved.settings == {}


def naver_experiment(model_dir, root, **overrides):
    shutil.copytree(model_dir, root / "model")
    config = {
        "config": {"max_length": 24, "matching_type": "splade", "lr": 2e-5},
        "init_dict": {"model_type_or_dir": "bert-base-uncased", "model_type_or_dir_q": None, "agg": "max"},
    }
    for section, values in overrides.items():
        config[section].update(values)
    (root / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    return root


def test_naver_experiment_folder_resolves_weights_and_max_length(tiny_model_dirs, tmp_path):
    root = naver_experiment(tiny_model_dirs["bert"], tmp_path / "naver")
    resolved = resolve_model_folder(root)
    assert resolved.kind == "naver-splade" and resolved.path == root / "model" and resolved.max_length == 24
    assert SparseEncoder.from_pretrained(root).max_length == 24  # config.max_length is the loaded limit
    np.testing.assert_allclose(
        spladekit_vectors(root), spladekit_vectors(tiny_model_dirs["bert"], max_length=24), atol=1e-6
    )


@pytest.mark.parametrize(
    "section,values,message",
    [
        ("init_dict", {"agg": "sum"}, "agg"),
        ("init_dict", {"model_type_or_dir_q": "other"}, "query encoders"),
    ],
)
def test_naver_unsupported_variants_are_refused(tiny_model_dirs, tmp_path, section, values, message):
    root = naver_experiment(tiny_model_dirs["bert"], tmp_path / "naver", **{section: values})
    with pytest.raises(InputError, match=message) as error:
        resolve_model_folder(root)
    assert error.value.path == str(root / "config.yaml")


def test_cli_export_sentence_transformers(tiny_model_dirs, tmp_path, cli):
    out = tmp_path / "st"
    result = cli(
        "export",
        "sentence-transformers",
        tiny_model_dirs["bert"],
        "--output",
        out,
        "--max-length",
        MAX_LENGTH,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["max_length"] == MAX_LENGTH
    expected = spladekit_vectors(tiny_model_dirs["bert"], max_length=MAX_LENGTH)
    np.testing.assert_allclose(st_vectors(out), expected, atol=1e-5)
    assert "sentence_transformers import SparseEncoder" in (out / "README.md").read_text()


def test_other_yaml_folders_are_left_alone(tmp_path):
    (tmp_path / "config.yaml").write_text("backbone:\n  id: x\n")  # e.g. a spladekit run folder
    assert resolve_model_folder(tmp_path).path == tmp_path


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_a_logit_shift_is_baked_into_the_bias_of_the_sentence_transformers_export(tiny_model_dirs, tmp_path, arch):
    from spladekit.model.head_options import HeadOptions

    encoder = SparseEncoder.from_pretrained(
        tiny_model_dirs[arch], max_length=MAX_LENGTH, head=HeadOptions(logit_shift=0.4)
    )
    bias = encoder.head.bias.detach().clone()
    ours = encoder.encode(TEXTS, show_progress=False).toarray()
    plain = SparseEncoder.from_pretrained(tiny_model_dirs[arch], max_length=MAX_LENGTH)
    assert np.abs(plain.encode(TEXTS, show_progress=False).toarray() - ours).max() > 1e-3  # the shift matters
    out = export_sentence_transformers(encoder, tmp_path / "st")
    np.testing.assert_allclose(st_vectors(out), ours, atol=1e-5)
    # spladekit reads the export back without shifting twice, and the exported model was left as it was
    np.testing.assert_allclose(spladekit_vectors(out), ours, atol=1e-5)
    assert torch.equal(encoder.head.bias.detach(), bias) and encoder.head_options.logit_shift == 0.4


@pytest.mark.parametrize(("option", "value"), [("position_top_k", 4), ("vocab_fold", "space"), ("lowercase", True)])
def test_what_splade_pooling_cannot_express_is_refused_naming_the_option(tiny_model_dirs, tmp_path, option, value):
    from spladekit.model.head_options import HeadOptions

    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], head=HeadOptions(**{option: value}))
    with pytest.raises(SpladekitError, match=f"head option {option}=") as error:
        export_sentence_transformers(encoder, tmp_path / "st")
    assert "\n" not in str(error.value) and not (tmp_path / "st").exists()
