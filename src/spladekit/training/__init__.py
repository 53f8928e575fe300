"""SPLADE training: configuration, losses, regularizers, the training loop, monitors, checkpoints, and mining
hard negatives for it (``mining``).
May import: ``common``, ``data``, ``model``, ``vectors``, ``index``, ``evaluation``."""

from spladekit.training.config import TrainConfig, load_config
from spladekit.training.loop import TrainingStopped, train

__all__ = ["TrainConfig", "TrainingStopped", "load_config", "train"]
