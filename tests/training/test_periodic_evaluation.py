"""training/periodic_evaluation.py: the evaluation data read once per run, evaluated when due."""

from __future__ import annotations

from collection_files import write_beir
from spladekit.data import collections
from spladekit.training import train
from spladekit.training.monitors import read_metrics
from train_helpers import TINY_BERT, TRIPLETS, tiny_config

tiny_bert_fixture, triplets_fixture = TINY_BERT, TRIPLETS


def test_the_evaluation_collection_is_read_once_for_every_evaluation_of_a_run(
    tiny_bert, triplets_file, tmp_path, monkeypatch
):
    reads = []
    real = collections.load_beir_folder
    monkeypatch.setattr(collections, "load_beir_folder", lambda *a, **k: reads.append(a) or real(*a, **k))
    evaluation = {"data": str(write_beir(tmp_path / "collection")), "every": 2}
    output = train(tiny_config(tiny_bert, triplets_file, evaluation=evaluation), tmp_path / "run").output
    assert [record["step"] for record in read_metrics(output, "evaluation.jsonl")] == [2, 4, 6]
    assert len(reads) == 1
