"""spladekit: any masked-language-model backbone → SPLADE learned sparse retriever.

The public API, by stage (each name is imported on first use, PEP 562 ``__getattr__``, so ``import spladekit``
and ``spladekit --help`` stay fast and load neither torch nor transformers):

* model: :func:`load_model` (either kind of saved model, or a backbone), :class:`SparseEncoder`,
  :class:`InferenceFreeEncoder`;
* the head: :func:`diagnose` → :class:`HeadReport`; :func:`resolve_rescale` → :class:`RescaleRecord`
  → :func:`apply_rescale`;
* training: :class:`TrainConfig`, :func:`load_config`, :func:`train` → :class:`TrainedRun`;
* vectors and search: :class:`Vectors`, :func:`build_index`, :func:`load_index`, :class:`Run`;
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
    "TrainConfig": "spladekit.train.config",
    "load_config": "spladekit.train.config",
    "train": "spladekit.train.loop",
    "TrainedRun": "spladekit.train.loop",
    "Vectors": "spladekit.vectors.artifact",
    "build_index": "spladekit.index",
    "load_index": "spladekit.index",
    "Run": "spladekit.evaluation.run",
    "load_collection": "spladekit.data.collections",
    "evaluate": "spladekit.evaluation.evaluate",
    "evaluate_data": "spladekit.evaluation.evaluate",
    "EvaluationResult": "spladekit.evaluation.result",
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
    "Vectors",
    "__version__",
    "apply_rescale",
    "build_index",
    "diagnose",
    "evaluate",
    "evaluate_data",
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
    from spladekit.index import build_index, load_index
    from spladekit.model.diagnosis import HeadReport, diagnose
    from spladekit.model.encoder import SparseEncoder
    from spladekit.model.inference_free import InferenceFreeEncoder
    from spladekit.model.loading import load_model
    from spladekit.model.rescaling import RescaleRecord, apply_rescale, resolve_rescale
    from spladekit.train.config import TrainConfig, load_config
    from spladekit.train.loop import TrainedRun, train
    from spladekit.vectors.artifact import Vectors


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'spladekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
