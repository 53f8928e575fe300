"""Find the masked-LM folder inside model folders written by other SPLADE tools.

Every spladekit command that takes a model also accepts:

* a dense **sentence-transformers** folder (``Transformer`` + ``Pooling`` …): its transformer is used as a
  backbone (the SPLADE head starts from whatever MLM weights it holds);
* a **sentence-transformers** ``SparseEncoder`` folder (``modules.json``): the folder of its
  ``Transformer`` / ``MLMTransformer`` module (the root, or a subfolder such as ``0_MLMTransformer``),
  with ``max_length`` from the module's ``max_seq_length`` or its tokenizer's ``model_max_length``.
  Only the SPLADE pipeline spladekit computes is accepted: MLM transformer → ``SpladePooling`` with
  ``pooling_strategy="max"`` and ``activation_function="relu"``; anything else (sum pooling,
  ``log1p_relu``, inference-free ``Router`` models, extra modules) is refused with the reason, since
  loading it would silently give different vectors.
* a **naver/splade** checkpoint: a plain ``BertForMaskedLM``-style folder (loads as is), or a training
  experiment folder holding the hydra ``config.yaml`` (also under ``.hydra/``; recognised by its
  ``init_dict`` / ``config`` sections) with the weights in ``model/``; ``config.max_length`` is read, and
  only max aggregation with a single shared encoder is accepted.

:func:`resolve_model_folder` returns the folder to hand to ``AutoModelForMaskedLM`` and these settings;
a path it does not recognise comes back unchanged (plain HF folders, spladekit folders).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from spladekit.data.lines import read_json
from spladekit.errors import InputError

ST_MODULES_FILE = "modules.json"
ST_TRANSFORMER_CONFIGS = ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json")
NAVER_CONFIGS = ("config.yaml", ".hydra/config.yaml")
NAVER_WEIGHTS_SUBFOLDER = "model"
# Tokenizers without a limit store a huge sentinel as model_max_length; it is not a setting.
MAX_SENSIBLE_LENGTH = 1_000_000


@dataclass(frozen=True)
class ResolvedModel:
    """Where the HF masked-LM folder is, what kind of folder it came from, and settings read there."""

    path: Path
    kind: str  # "transformers" | "sentence-transformers" | "naver-splade"
    settings: dict = field(default_factory=dict)

    @property
    def max_length(self) -> int | None:
        return self.settings.get("max_length")


def resolve_model_folder(path: str | Path) -> ResolvedModel:
    """The masked-LM folder (and settings such as ``max_length``) behind a local model folder."""
    path = Path(path)
    if (path / ST_MODULES_FILE).is_file():
        return _resolve_sentence_transformers(path)
    naver_config = next((path / name for name in NAVER_CONFIGS if (path / name).is_file()), None)
    if naver_config is not None and not (path / "config.json").is_file():
        return _resolve_naver(path, naver_config)
    return ResolvedModel(path=path, kind="transformers")


# ----------------------------------------------------------------------------- sentence-transformers


def _module_kind(module: dict) -> str:
    return str(module.get("type", "")).rsplit(".", 1)[-1]


def _resolve_sentence_transformers(root: Path) -> ResolvedModel:
    modules_file = root / ST_MODULES_FILE
    modules = read_json(modules_file, list)
    if not isinstance(modules, list) or not all(isinstance(module, dict) for module in modules):
        raise InputError("expected a JSON list of module objects", modules_file)
    kinds = [_module_kind(module) for module in modules]
    sparse = {"SpladePooling", "Router", "SparseStaticEmbedding", "MLMTransformer"} & set(kinds)
    if not sparse and kinds[:1] == ["Transformer"]:
        # A dense sentence-transformers model (e.g. all-MiniLM-L6-v2): its transformer is a backbone
        # like any other; the MLM head is whatever its checkpoint holds (reported as fresh weights).
        return ResolvedModel(path=root / modules[0].get("path", ""), kind="transformers")
    if kinds[:1] not in (["Transformer"], ["MLMTransformer"]) or kinds[1:] != ["SpladePooling"]:
        raise InputError(
            f"modules {kinds}: spladekit loads only [MLMTransformer or Transformer, SpladePooling] "
            "SPLADE models (no Router/inference-free, SparseStaticEmbedding or extra modules)",
            modules_file,
        )
    _check_pooling(root / modules[1].get("path", "") / "config.json")
    folder = root / modules[0].get("path", "")
    return ResolvedModel(path=folder, kind="sentence-transformers", settings=_st_settings(folder))


def _check_pooling(config_file: Path) -> None:
    config = read_json(config_file, dict) if config_file.is_file() else {}
    strategy = config.get("pooling_strategy", "max")
    activation = config.get("activation_function", "relu")
    if (strategy, activation) != ("max", "relu"):
        raise InputError(
            f"SpladePooling(pooling_strategy={strategy!r}, activation_function={activation!r}): spladekit "
            "computes max pooling of log1p(relu(logits)) only; these vectors would differ",
            config_file,
        )


def _st_settings(folder: Path) -> dict:
    for name in ST_TRANSFORMER_CONFIGS:  # sentence-transformers < 5.4 stored max_seq_length here
        config_file = folder / name
        if config_file.is_file():
            length = read_json(config_file, dict).get("max_seq_length")
            if length:
                return {"max_length": int(length)}
    tokenizer_config = folder / "tokenizer_config.json"
    if tokenizer_config.is_file():
        length = read_json(tokenizer_config, dict).get("model_max_length")
        if isinstance(length, (int, float)) and 0 < length < MAX_SENSIBLE_LENGTH:
            return {"max_length": int(length)}
    return {}


# ----------------------------------------------------------------------------- naver/splade
def _resolve_naver(root: Path, config_file: Path) -> ResolvedModel:
    try:
        experiment = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise InputError(f"invalid YAML: {error}", config_file, None if mark is None else mark.line + 1) from None
    if not isinstance(experiment, dict) or not ({"init_dict", "config"} & experiment.keys()):
        return ResolvedModel(path=root, kind="transformers")  # not a naver/splade experiment: leave it alone
    init = experiment.get("init_dict") or {}
    config = experiment.get("config") or {}
    if init.get("agg", "max") != "max":
        raise InputError(f"init_dict.agg={init['agg']!r}: spladekit computes max pooling only", config_file)
    if init.get("model_type_or_dir_q"):
        raise InputError("init_dict.model_type_or_dir_q is set: separate query encoders are not supported", config_file)
    if config.get("matching_type", "splade") != "splade":
        raise InputError(f"config.matching_type={config['matching_type']!r}: only 'splade' is supported", config_file)
    settings = {"max_length": int(config["max_length"])} if config.get("max_length") else {}
    return ResolvedModel(path=root / NAVER_WEIGHTS_SUBFOLDER, kind="naver-splade", settings=settings)
