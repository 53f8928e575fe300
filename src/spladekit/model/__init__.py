"""The model: loading a masked-LM backbone (``backbone``, ``foreign``), its MLM head (``head``: norms, tying,
rescaling), SPLADE pooling (``pooling``), the encoder (``encoder``: ``SparseEncoder``), inference-free models
(``inference_free``), the one loader for either kind (``loading``), head diagnosis and auto-k (``diagnosis``),
the resolved rescaling (``rescaling``: ``RescaleRecord``) and the model card (``card``).
May import: ``common``, ``data``."""
