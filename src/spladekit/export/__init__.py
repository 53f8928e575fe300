"""Export to other tools: a sentence-transformers ``SparseEncoder`` folder, a Qdrant collection with sparse
vectors, and bulk NDJSON + mapping + query DSL for OpenSearch / Elasticsearch. One concept per module."""

from spladekit.common.sparse import quantize
from spladekit.export.feature_names import escape_feature, unescape_feature
from spladekit.export.qdrant_collection import export_qdrant
from spladekit.export.search_engine import ENGINES, export_search_engine
from spladekit.export.sentence_transformers_folder import export_sentence_transformers

__all__ = [
    "ENGINES",
    "escape_feature",
    "export_qdrant",
    "export_search_engine",
    "export_sentence_transformers",
    "quantize",
    "unescape_feature",
]
