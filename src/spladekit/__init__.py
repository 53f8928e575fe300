"""spladekit: any masked-language-model backbone → SPLADE learned sparse retriever.

The public API, by stage (each name is imported on first use, PEP 562 ``__getattr__``, so ``import spladekit``
and ``spladekit --help`` stay fast and load neither torch nor transformers):

* model: :func:`load_model` (either kind of saved model, or a backbone), :class:`SparseEncoder`,
  :class:`InferenceFreeEncoder`;
* the head: :func:`diagnose` → :class:`HeadReport`; :func:`resolve_rescale` → :class:`RescaleRecord`
  → :func:`apply_rescale`;
* training (the package ``spladekit.training``): :class:`TrainConfig`, :func:`load_config`, :func:`train` →
  :class:`TrainedRun`; :class:`TrainingStopped` (a run stopped by a monitor or a signal);
* vectors and search: :class:`Vectors`, :func:`encode_to_shards` (a corpus → a sharded, resumable vectors folder),
  :func:`build_index`, :func:`load_index`, :class:`Run`;
* export: :func:`export_onnx`, :func:`export_sentence_transformers`, :func:`export_qdrant`,
  :func:`export_search_engine` (OpenSearch / Elasticsearch), :func:`export_ciff`.

No public name is also the name of a subpackage (``spladekit.train`` is the function; the package is
``spladekit.training``): importing a subpackage binds its name on this module, which would hide a function of the
same name (``tests/test_api.py``).
* evaluation: :func:`load_collection`, :func:`evaluate` (one collection), :func:`evaluate_data` (a suite
  name, folder, HF or ir_datasets id) → :class:`EvaluationResult`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.version import __version__

# public name → module that defines it
_LAZY = {
    "load_model": "spladekit.model.loading",
    "SparseEncoder": "spladekit.model.encoder",
    "InferenceFreeEncoder": "spladekit.model.inference_free",
    "HeadReport": "spladekit.model.diagnosis",
    "diagnose": "spladekit.model.diagnosis",
    "RescaleRecord": "spladekit.model.rescaling",
    "resolve_rescale": "spladekit.model.rescaling",
    "apply_rescale": "spladekit.model.rescaling",
    "TrainConfig": "spladekit.training.config",
    "TrainingStopped": "spladekit.training.loop",
    "load_config": "spladekit.training.config",
    "train": "spladekit.training.loop",
    "TrainedRun": "spladekit.training.loop",
    "Vectors": "spladekit.vectors.artifact",
    "encode_to_shards": "spladekit.vectors.encoding",
    "build_index": "spladekit.index",
    "load_index": "spladekit.index",
    "Run": "spladekit.evaluation.run",
    "load_collection": "spladekit.data.collections",
    "evaluate": "spladekit.evaluation.evaluate",
    "evaluate_data": "spladekit.evaluation.evaluate",
    "EvaluationResult": "spladekit.evaluation.result",
    "export_onnx": "spladekit.model.onnx",
    "export_sentence_transformers": "spladekit.export.sentence_transformers_folder",
    "export_qdrant": "spladekit.export.qdrant_collection",
    "export_search_engine": "spladekit.export.search_engine",
    "export_ciff": "spladekit.export.ciff",
}

__all__ = [
    "EvaluationResult",
    "HeadReport",
    "InferenceFreeEncoder",
    "InputError",
    "RescaleRecord",
    "Run",
    "SparseEncoder",
    "SpladekitError",
    "TrainConfig",
    "TrainedRun",
    "TrainingStopped",
    "Vectors",
    "__version__",
    "apply_rescale",
    "build_index",
    "diagnose",
    "encode_to_shards",
    "evaluate",
    "evaluate_data",
    "export_ciff",
    "export_onnx",
    "export_qdrant",
    "export_search_engine",
    "export_sentence_transformers",
    "load_collection",
    "load_config",
    "load_index",
    "load_model",
    "resolve_rescale",
    "train",
]

if TYPE_CHECKING:
    from spladekit.data.collections import load_collection
    from spladekit.evaluation.evaluate import evaluate, evaluate_data
    from spladekit.evaluation.result import EvaluationResult
    from spladekit.evaluation.run import Run
    from spladekit.export.ciff import export_ciff
    from spladekit.export.qdrant_collection import export_qdrant
    from spladekit.export.search_engine import export_search_engine
    from spladekit.export.sentence_transformers_folder import export_sentence_transformers
    from spladekit.index import build_index, load_index
    from spladekit.model.diagnosis import HeadReport, diagnose
    from spladekit.model.encoder import SparseEncoder
    from spladekit.model.inference_free import InferenceFreeEncoder
    from spladekit.model.loading import load_model
    from spladekit.model.onnx import export_onnx
    from spladekit.model.rescaling import RescaleRecord, apply_rescale, resolve_rescale
    from spladekit.training.config import TrainConfig, load_config
    from spladekit.training.loop import TrainedRun, TrainingStopped, train
    from spladekit.vectors.artifact import Vectors
    from spladekit.vectors.encoding import encode_to_shards


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'spladekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
