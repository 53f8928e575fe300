"""Evaluation while training: the collections of ``evaluation.data`` read once, at set-up (so a bad path or split
fails before step 1, and no evaluation reads them again), then evaluated every ``evaluation.every`` steps and after
the last step, each result appended to ``evaluation.jsonl``.

The collections stay in memory for the run: ``evaluation.data`` is a validation collection or suite, not the
corpus a model is built for (``spladekit encode`` streams that one)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spladekit.data.collections import Collection
from spladekit.evaluation.evaluate import evaluate_loaded, resolve_collections
from spladekit.evaluation.result import EvaluationResult
from spladekit.model.loading import RetrievalModel
from spladekit.training.config import TrainConfig
from spladekit.training.monitors import EVALUATION_FILE, MetricsLog

logger = logging.getLogger("spladekit")


@dataclass
class PeriodicEvaluation:
    """``evaluation.data`` as loaded, the options of :func:`spladekit.evaluation.evaluate.evaluate` it runs with, and
    the log its results go to."""

    data: str
    collections: list[Collection]
    every: int | None
    options: dict[str, Any]
    log: MetricsLog

    @classmethod
    def load(cls, config: TrainConfig, output: Path, resume_step: int) -> PeriodicEvaluation:
        """Read the collections now; documents are capped at ``evaluation.max_length`` (default: the training
        documents' ``data.doc_max_length``), and every evaluation re-encodes (``cache=False``: each is a new model)."""
        setting = config.evaluation
        assert setting.data is not None  # built only when evaluation.data is set
        return cls(
            str(setting.data),
            list(resolve_collections(setting.data, setting.split)),
            setting.every,
            {
                "batch_size": setting.batch_size,
                "max_length": setting.max_length or config.data.doc_max_length,
                "max_active_dims": setting.max_active_dims,
                "cache": False,
                "show_progress": False,
            },
            MetricsLog(output, resume_step, EVALUATION_FILE),
        )

    def due(self, step: int, steps: int) -> bool:
        """After the last step, and every ``evaluation.every`` steps."""
        return step == steps or bool(self.every and step % self.every == 0)

    def run(self, encoder: RetrievalModel, step: int) -> EvaluationResult:
        """Evaluate the model as it is now, log the result and return it."""
        result = evaluate_loaded(encoder, self.data, self.collections, **self.options)
        self.log.write({"step": step, **result.to_dict()})
        logger.info(
            "step %d: evaluation on %s: %s",
            step,
            self.data,
            ", ".join(f"{measure} {value:.4f}" for measure, value in result.metrics.items()),
        )
        return result
