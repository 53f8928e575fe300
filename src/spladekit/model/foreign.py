"""Find the masked-LM folder inside model folders written by other SPLADE tools.

Every spladekit command that takes a model also accepts:

* a dense **sentence-transformers** folder (``Transformer`` + ``Pooling`` …): its transformer is used as a
  backbone (the SPLADE head starts from whatever MLM weights it holds);
* a **sentence-transformers** ``SparseEncoder`` folder (``modules.json``): the folder of its
  ``Transformer`` / ``MLMTransformer`` module (the root, or a subfolder such as ``0_MLMTransformer``),
  with ``max_length`` from the module's ``max_seq_length`` or its tokenizer's ``model_max_length``.
  Only the SPLADE pipeline spladekit computes is accepted: MLM transformer → ``SpladePooling`` with
  ``pooling_strategy="max"`` and ``activation_function="relu"``; anything else (sum pooling,
  ``log1p_relu``, extra modules) is refused with the reason, since loading it would silently give
  different vectors.
* a **sentence-transformers inference-free** ``Router`` folder (``Router.for_query_document``): the
  ``document`` route must be that same SPLADE pipeline, the ``query`` route one ``SparseStaticEmbedding``
  with safetensors weights. The document route's MLM folder is returned as above, and the settings add
  ``query_weights`` (its ``model.safetensors``), ``query_folder``, ``query_max_length`` (its tokenizer's
  ``model_max_length``, where ``SparseStaticEmbedding`` truncates) and ``query_frozen``;
  :class:`spladekit.model.inference_free.InferenceFreeEncoder` loads both sides.
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

from spladekit.common.errors import InputError
from spladekit.common.lines import read_json

ST_MODULES_FILE = "modules.json"
ST_ROUTER_CONFIGS = ("router_config.json", "config.json")  # config.json: sentence-transformers < 5 (Asym)
ST_MLM_MODULES = ("Transformer", "MLMTransformer")
ST_STATIC_MODULES = ("SparseStaticEmbedding", "IDF")  # IDF: its name in sentence-transformers 5.0
ST_TRANSFORMER_CONFIGS = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
)
NAVER_CONFIGS = ("config.yaml", ".hydra/config.yaml")
NAVER_WEIGHTS_SUBFOLDER = "model"
# Tokenizers without a limit store a huge sentinel as model_max_length; it is not a setting.
MAX_SENSIBLE_LENGTH = 1_000_000


@dataclass(frozen=True)
class ResolvedModel:
    """Where the HF masked-LM folder is, what kind of folder it came from, and settings read there."""

    path: Path
    kind: str  # "transformers" | "sentence-transformers" | "sentence-transformers-router" | "naver-splade"
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
    if kinds in (["Router"], ["Asym"]):
        return _resolve_router(root / modules[0].get("path", ""), modules_file)
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


def _resolve_router(folder: Path, modules_file: Path) -> ResolvedModel:
    """An inference-free ``Router``: query = [SparseStaticEmbedding], document = [MLM transformer, SpladePooling]."""
    config_file = next((folder / name for name in ST_ROUTER_CONFIGS if (folder / name).is_file()), None)
    if config_file is None:
        raise InputError(f"a Router module without {ST_ROUTER_CONFIGS[0]} in {folder}", modules_file)
    config = read_json(config_file, dict)
    types, structure = config.get("types"), config.get("structure")
    if not isinstance(types, dict) or not isinstance(structure, dict):
        raise InputError("expected 'types' and 'structure' objects (a sentence-transformers Router)", config_file)
    routes = {
        name: [(module_id, str(types.get(module_id, "")).rsplit(".", 1)[-1]) for module_id in ids]
        for name, ids in structure.items()
        if isinstance(ids, list)
    }
    mappings = (config.get("parameters") or {}).get("route_mappings") or {}
    shapes = {name: [kind for _, kind in modules] for name, modules in routes.items()}
    if (
        set(routes) != {"query", "document"}
        or mappings
        or len(shapes["query"]) != 1
        or shapes["query"][0] not in ST_STATIC_MODULES
        or len(shapes["document"]) != 2
        or shapes["document"][0] not in ST_MLM_MODULES
        or shapes["document"][1] != "SpladePooling"
    ):
        raise InputError(
            f"Router routes {shapes}{f' with route_mappings {mappings}' if mappings else ''}: spladekit loads "
            "only inference-free SPLADE routers (query: [SparseStaticEmbedding], document: [MLMTransformer or "
            "Transformer, SpladePooling], no route_mappings)",
            config_file,
        )
    ((query_id, _),) = routes["query"]
    (transformer_id, _), (pooling_id, _) = routes["document"]
    _check_pooling(folder / pooling_id / "config.json")
    query_folder = folder / query_id
    weights = query_folder / "model.safetensors"
    if not weights.is_file():
        raise InputError(
            "the SparseStaticEmbedding has no model.safetensors (spladekit reads query weights "
            "from safetensors only: never pickles, never idf.json paths)",
            query_folder,
        )
    static_config = query_folder / "config.json"
    frozen = read_json(static_config, dict).get("frozen", False) if static_config.is_file() else False
    document = folder / transformer_id
    settings = _st_settings(document) | {
        "query_weights": str(weights),
        "query_folder": str(query_folder),
        "query_frozen": bool(frozen),
    }
    query_length = _st_settings(query_folder).get("max_length")
    if query_length:
        settings["query_max_length"] = query_length
    return ResolvedModel(path=document, kind="sentence-transformers-router", settings=settings)


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
