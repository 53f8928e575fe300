"""Evaluation: ranked lists (``run``: ``Run``, TREC I/O), the result artifact (``result``: ``EvaluationResult``),
collection → vectors → index → run → ir_measures (``evaluate``), the dry-run cost estimate (``cost``), BM25
(``bm25``) and its baseline rows (``baselines``), and per-term explanations of scores (``explain``).
May import: ``common``, ``data``, ``model``, ``vectors``, ``index``."""
