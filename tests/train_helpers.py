"""Shared pieces of the training tests: a tiny BERT, synthetic topical triplets, a small config."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from collection_files import write_beir
from spladekit.training.config import config_from_dict
from tiny_models import WORDS, build_tiny_model

TOPICS = [WORDS[start : start + 6] for start in range(5, 89, 6)]  # 14 disjoint six-word topics


def write_triplets(path: Path, per_topic: int = 3, negatives: int = 1, seed: int = 0) -> Path:
    """query<TAB>positive<TAB>negative… lines: the positive shares the query's topic, negatives do not."""
    rng = random.Random(seed)
    lines = []
    for index, topic in enumerate(TOPICS):
        for _ in range(per_topic):
            query = " ".join(rng.sample(topic, 3))
            positive = " ".join(rng.sample(topic, 5) + rng.sample(WORDS, 2))
            others = [TOPICS[(index + rng.randrange(1, len(TOPICS))) % len(TOPICS)] for _ in range(negatives)]
            lines.append(
                "\t".join([query, positive] + [" ".join(rng.sample(o, 5) + rng.sample(WORDS, 2)) for o in others])
            )
    path.write_text("\n".join(lines) + "\n")
    return path


def _tiny_bert(tmp_path_factory) -> Path:
    return build_tiny_model("bert", tmp_path_factory.mktemp("train-models") / "bert")


def _triplets_file(tmp_path_factory) -> Path:
    return write_triplets(tmp_path_factory.mktemp("train-data") / "triplets.tsv")


# fixtures for the test modules to bind: ``tiny_bert = TINY_BERT`` (a tiny BERT folder), ``triplets_file = TRIPLETS``
TINY_BERT = pytest.fixture(scope="module", name="tiny_bert")(_tiny_bert)
TRIPLETS = pytest.fixture(scope="module", name="triplets_file")(_triplets_file)


def tiny_config(model_dir: Path, triplets: Path, /, **sections):
    """A fast config (short texts, batch 4, no progress bar); ``sections`` update its sections."""
    values = {
        "backbone": {"id": str(model_dir), "dropout": False},
        "data": {"path": str(triplets), "query_max_length": 12, "doc_max_length": 16},
        "optimization": {"steps": 6, "batch_size": 4, "lr": 1e-3, "warmup_steps": 1},
        "regularizer": {"lambda_q": 1e-3, "lambda_d": 1e-3, "warmup_steps": 3},
        "logging": {"every": 1, "checkpoint_every": 3, "progress": False, "plots": False},
    }
    for section, updates in sections.items():
        if isinstance(updates, dict):
            values.setdefault(section, {}).update(updates)
        else:
            values[section] = updates
    return config_from_dict(values)


def write_sweep(tmp_path: Path, **changes) -> Path:
    bert = build_tiny_model("bert", tmp_path / "bert")
    roberta = build_tiny_model("roberta", tmp_path / "roberta")
    values = {
        "name": "tiny",
        "recipe": {
            "data": {
                "path": str(write_triplets(tmp_path / "triplets.tsv")),
                "query_max_length": 12,
                "doc_max_length": 16,
            },
            "optimization": {"steps": 3, "batch_size": 4, "lr": 1e-3, "warmup_steps": 1},
            "regularizer": {"lambda_q": 1e-3, "lambda_d": 1e-3, "warmup_steps": 2},
            "logging": {"every": 1, "checkpoint_every": 2, "progress": False, "plots": False},
        },
        "backbones": [{"name": "bert", "id": str(bert)}, {"name": "roberta-x8", "id": str(roberta), "inflate": 8}],
        "k": [1, 8],
        "modes": ["tied"],
        "evaluation": {"data": [str(write_beir(tmp_path / "collection"))], "max_length": 32},
    }
    values.update(changes)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(values))
    return path
