"""Real data (../shared): fine-tune splade-tiny-msmarco on SciFact triplets for a few steps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import shared_path
from spladekit import SparseEncoder
from spladekit.data.training import DataConfig, load_training_set
from spladekit.training import train
from spladekit.training.config import config_from_dict
from spladekit.training.monitors import read_metrics

pytestmark = pytest.mark.realdata


def test_scifact_id_triplets_resolve_to_the_text_triplets():
    folder = shared_path("data", "scifact")
    by_ids = load_training_set(
        DataConfig(
            format="id_triplets",
            path=str(folder / "triplets-train-ids.tsv"),
            header=True,
            columns=3,
            queries=str(folder / "queries.jsonl"),
            collection=str(folder / "corpus.jsonl"),
            limit=40,
        )
    )
    by_text = load_training_set(DataConfig(path=str(folder / "triplets-train.tsv"), limit=40))
    assert len(by_ids) == len(by_text) == 10  # 4 BM25 negatives per (claim, cited abstract)
    for index in range(20):  # two epochs: the same groups in the same order, so the same examples
        assert by_ids.example(index, negatives=4, seed=7) == by_text.example(index, negatives=4, seed=7)


def test_fine_tune_splade_tiny_on_scifact(tmp_path):
    model = shared_path("models", "splade-tiny-msmarco")
    triplets = shared_path("data", "scifact", "triplets-train.tsv")
    config = config_from_dict(
        {
            "backbone": {"id": str(model)},
            "data": {"path": str(triplets), "limit": 64, "query_max_length": 24, "doc_max_length": 48},
            "optimization": {"steps": 3, "batch_size": 4, "lr": 5e-5, "warmup_steps": 1},
            "regularizer": {"lambda_q": 1e-3, "lambda_d": 1e-3, "warmup_steps": 2},
            "logging": {"every": 1, "checkpoint_every": 2, "progress": False},
        }
    )
    output = train(config, tmp_path / "run").output
    records = read_metrics(output)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) and 0 < r["q_nnz"] < 30522 and 0 < r["d_nnz"] < 30522 for r in records)
    assert json.loads((output / "model" / "spladekit.json").read_text())["rescale"] is None
    assert sorted(p.name for p in (output / "plots").iterdir()) == [
        "bias.png",
        "head_norm.png",
        "lambda.png",
        "loss.png",
        "nnz.png",
        "norms.png",
    ]
    vectors = SparseEncoder.from_pretrained(output / "model").encode(["vitamin d and bone health"], show_progress=False)
    assert 0 < vectors.nnz < 200


@pytest.mark.slow
@pytest.mark.parametrize("k, collapses", [(16, True), (1, False)])
def test_over_rescaled_splade_tiny_stops_on_a_uniform_collapse_within_60_steps(tmp_path, caplog, k, collapses):
    """The recipe of configs/train-example.yaml (batch 8, 1 negative, lr 5e-5, λ 1e-3): at k = 16 tied the
    loss sits at ln 9 and the run stops at step 50 naming the uniform collapse; at k = 1 nothing is said."""
    from spladekit.training import TrainingStopped, load_config

    config = load_config(
        Path(__file__).resolve().parents[2] / "configs" / "train-example.yaml",
        [
            f"backbone.id={shared_path('models', 'splade-tiny-msmarco')}",
            f"data.path={shared_path('data', 'scifact', 'triplets-train.tsv')}",
            "optimization.steps=60",
            f"rescale.k={k}",
            "rescale.mode=tied",
            "logging.stop_on_collapse=true",
            "logging.progress=false",
            "logging.plots=false",
            "logging.checkpoint_every=20",
        ],
    )
    if collapses:
        with pytest.raises(
            TrainingStopped, match=r"stopped on collapse at step 50: uniform collapse: ranking loss 2\.19"
        ):
            train(config, tmp_path / "run")
        assert read_metrics(tmp_path / "run")[-1]["collapse"] == "uniform"
        assert any(
            "step 0: " not in r.message and "shrinks the input word embeddings" in r.message for r in caplog.records
        )
    else:
        train(config, tmp_path / "run")
        assert not [r.message for r in caplog.records if "COLLAPSE" in r.message or "step 0:" in r.message]
