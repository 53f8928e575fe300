"""spladekit: any masked-language-model backbone → SPLADE learned sparse retriever."""

from spladekit.backbone import Backbone, load_backbone
from spladekit.encoder import SparseEncoder
from spladekit.errors import InputError, SpladekitError
from spladekit.head import HeadReport, diagnose, rescale

__version__ = "0.1.0"

__all__ = [
    "Backbone",
    "HeadReport",
    "InputError",
    "SparseEncoder",
    "SpladekitError",
    "__version__",
    "diagnose",
    "load_backbone",
    "rescale",
]
