"""spladekit: any masked-language-model backbone → SPLADE learned sparse retriever.

The public names below are imported on first use (PEP 562 ``__getattr__``), so ``import spladekit``
and ``spladekit --help`` stay fast and do not load torch or transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from spladekit.errors import InputError, SpladekitError

__version__ = "0.1.0"

# public name → module that defines it
_LAZY = {
    "Backbone": "spladekit.backbone",
    "load_backbone": "spladekit.backbone",
    "SparseEncoder": "spladekit.encoder",
    "HeadReport": "spladekit.diagnosis",
    "diagnose": "spladekit.diagnosis",
    "rescale": "spladekit.head",
    "RescaleRecord": "spladekit.rescaling",
    "resolve_rescale": "spladekit.rescaling",
    "Vectors": "spladekit.vectors",
    "Run": "spladekit.run",
    "EvaluationResult": "spladekit.evaluation_result",
}

__all__ = [
    "Backbone", "EvaluationResult", "HeadReport", "InputError", "RescaleRecord", "Run", "SparseEncoder",
    "SpladekitError", "Vectors", "__version__", "diagnose", "load_backbone", "rescale", "resolve_rescale",
]

if TYPE_CHECKING:
    from spladekit.backbone import Backbone, load_backbone
    from spladekit.diagnosis import HeadReport, diagnose
    from spladekit.encoder import SparseEncoder
    from spladekit.evaluation_result import EvaluationResult
    from spladekit.head import rescale
    from spladekit.rescaling import RescaleRecord, resolve_rescale
    from spladekit.run import Run
    from spladekit.vectors import Vectors


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'spladekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value
