"""spladekit mine: candidates by rank range, exclusion of judged documents, seeded draws, both output layouts
(read back by the training loader), a SPLADE model's own negatives, and bad input refused before any output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from collection_files import write_beir
from spladekit.common.errors import InputError, SpladekitError
from spladekit.data.training import DataConfig, load_training_set
from spladekit.training.mining import (
    CORPUS_FILE,
    HARD_NEGATIVES_FILE,
    QUERIES_FILE,
    MiningSettings,
    find_or_mine,
    mine_training_data,
    parse_rank_range,
)

# BM25 ranks the documents for q1 by how many of its terms they hold (same lengths; n5 is longer than n4):
DOCS = {
    "p1": ("", "alpha beta gamma delta"),  # the positive of q1 (rank 1)
    "n2": ("", "alpha beta gamma zeta"),  # rank 2 (judged not relevant for q1)
    "n3": ("", "alpha beta eta theta"),  # rank 3
    "n4": ("", "alpha iota kappa xi"),  # rank 4
    "n5": ("Title\twith tab", "alpha lambda mu\nnu"),  # rank 5 (a tab and a line break in the text)
    "x1": ("", "omicron pi rho sigma"),  # no term of q1: never a candidate
    "p2": ("", "tau upsilon phi chi"),  # the positive of q2 (rank 1)
    "x2": ("", "tau psi omega epsilon"),  # rank 2 for q2
}
QUERIES = {"q1": "alpha beta gamma delta", "q2": "tau upsilon", "q3": "a query without any relevant document"}
TRAIN = {"q1": {"p1": 1, "n2": 0}, "q2": {"p2": 2}, "q3": {"x1": 0}}


@pytest.fixture
def collection(tmp_path) -> Path:
    folder = write_beir(tmp_path / "beir", DOCS, QUERIES, TRAIN, split="train")
    write_beir(folder, DOCS, QUERIES, {"q1": {"p1": 1}}, split="test")
    return folder


def triplet_lines(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()]


def negatives_of(path: Path, query: str) -> list[str]:
    texts = {f"{title} {text}".strip(): doc for doc, (title, text) in DOCS.items()}
    texts |= {key.replace("\t", " ").replace("\n", " "): doc for key, doc in texts.items()}
    return [texts[fields[2]] for fields in triplet_lines(path) if fields[0] == query]


def test_rank_range_is_one_based_and_inclusive_and_positives_are_never_negatives(collection, tmp_path):
    out = tmp_path / "t.tsv"
    summary = mine_training_data(
        collection, out, settings=MiningSettings(negatives=10, rank_range=(2, 4)), show_progress=False
    )
    assert sorted(negatives_of(out, QUERIES["q1"])) == ["n2", "n3", "n4"]
    assert negatives_of(out, QUERIES["q2"]) == ["x2"]
    assert summary["queries"] == 2 and summary["lines"] == 4
    assert summary["queries_without_positive"] == 1  # q3: judged, but nothing relevant
    # rank 1 is each query's positive: excluded, no candidate left, and an empty output is an error
    with pytest.raises(SpladekitError, match="no query has a candidate negative in ranks 1:1"):
        mine_training_data(
            collection, tmp_path / "top.tsv", settings=MiningSettings(rank_range=(1, 1)), show_progress=False
        )
    assert not (tmp_path / "top.tsv").exists()


def test_zero_score_hits_are_not_candidates_and_short_pairs_are_counted(collection, tmp_path):
    out = tmp_path / "t.tsv"
    summary = mine_training_data(
        collection, out, settings=MiningSettings(negatives=10, rank_range=(1, 8)), show_progress=False
    )
    assert sorted(negatives_of(out, QUERIES["q1"])) == ["n2", "n3", "n4", "n5"]  # x1 shares no term
    assert negatives_of(out, QUERIES["q2"]) == ["x2"]
    assert summary["short"] == 2 and summary["lines"] == 5


def test_exclude_judged_also_removes_documents_judged_not_relevant(collection, tmp_path):
    out = tmp_path / "t.tsv"
    mine_training_data(
        collection,
        out,
        settings=MiningSettings(negatives=10, rank_range=(1, 8), exclude_judged=True),
        show_progress=False,
    )
    assert sorted(negatives_of(out, QUERIES["q1"])) == ["n3", "n4", "n5"]


def test_texts_with_tabs_and_line_breaks_stay_one_tsv_field(collection, tmp_path):
    out = tmp_path / "t.tsv"
    mine_training_data(collection, out, settings=MiningSettings(negatives=10, rank_range=(1, 8)), show_progress=False)
    assert all(len(fields) == 3 for fields in triplet_lines(out))
    assert "Title with tab alpha lambda mu nu" in out.read_text()
    training = load_training_set(DataConfig(path=str(out)))
    assert {(group.query, group.positive) for group in training.groups()} == {
        (QUERIES["q1"], "alpha beta gamma delta"),
        (QUERIES["q2"], "tau upsilon phi chi"),
    }


def test_draws_depend_on_the_seed_only(collection, tmp_path):
    def mined(seed: int, name: str) -> list[str]:
        mine_training_data(
            collection,
            tmp_path / name,
            settings=MiningSettings(negatives=2, rank_range=(1, 8), seed=seed),
            show_progress=False,
        )
        return negatives_of(tmp_path / name, QUERIES["q1"])

    first = mined(1, "a.tsv")
    assert len(first) == 2 and len(set(first)) == 2  # without replacement
    assert mined(1, "b.tsv") == first
    assert (tmp_path / "a.tsv").read_bytes() == (tmp_path / "b.tsv").read_bytes()
    assert any(mined(seed, f"s{seed}.tsv") != first for seed in range(2, 8))  # 6 draws of 2 of 4: not all equal


def test_hard_negatives_layout_is_what_train_reads(collection, tmp_path):
    out = tmp_path / "hn"
    summary = mine_training_data(
        collection,
        out,
        layout="hard_negatives",
        settings=MiningSettings(negatives=3, rank_range=(1, 8)),
        show_progress=False,
    )
    records = [json.loads(line) for line in (out / HARD_NEGATIVES_FILE).read_text().splitlines()]
    assert [record["qid"] for record in records] == ["q1", "q2"]
    first = records[0]
    assert first["pos"] == ["p1"] and list(first["neg"]) == ["bm25"]
    ranks = {"n2": 2, "n3": 3, "n4": 4, "n5": 5}
    assert len(first["neg"]["bm25"]) == 3 and first["neg"]["bm25"] == sorted(first["neg"]["bm25"], key=ranks.get)
    named = {doc for record in records for doc in record["pos"] + record["neg"]["bm25"]}
    assert {json.loads(line)["_id"] for line in (out / CORPUS_FILE).read_text().splitlines()} == named
    assert json.loads((out / "mining.json").read_text())["lines"] == 2
    data = DataConfig(
        format="hard_negatives",
        path=str(out / HARD_NEGATIVES_FILE),
        queries=str(out / QUERIES_FILE),
        collection=str(out / CORPUS_FILE),
    )
    training = load_training_set(data)
    assert {(group.query, group.positive, group.negatives) for group in training.groups()} == {
        ("q1", "p1", tuple(first["neg"]["bm25"])),
        ("q2", "p2", ("x2",)),
    }
    documents = training.store.documents
    texts = {documents.id(row): documents.text(row) for row in range(len(documents))}
    assert texts["n5"] == "Title\twith tab alpha lambda mu\nnu"  # JSONL keeps texts as they are
    assert summary["train_settings"][0] == "data.format=hard_negatives"


def test_a_model_mines_its_own_ranking(collection, tmp_path, tiny_model_dirs, monkeypatch):
    from spladekit.model.encoder import SparseEncoder

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    model = tiny_model_dirs["bert"]
    out = tmp_path / "hn"
    mine_training_data(
        collection,
        out,
        layout="hard_negatives",
        settings=MiningSettings(negatives=8, rank_range=(1, 3), model=str(model)),
        show_progress=False,
    )
    records = {
        json.loads(line)["qid"]: json.loads(line) for line in (out / HARD_NEGATIVES_FILE).read_text().splitlines()
    }
    encoder = SparseEncoder.from_pretrained(model)
    ids = list(DOCS)
    documents = encoder.encode([f"{t} {x}".strip() for t, x in DOCS.values()], show_progress=False)
    for qid, record in records.items():
        scores = (encoder.encode([QUERIES[qid]], show_progress=False) @ documents.T).toarray()[0]
        top3 = [ids[i] for i in np.argsort(-scores, kind="stable")[:3] if scores[i] > 0]
        assert record["neg"][model.name] == [doc for doc in top3 if doc not in record["pos"]]


def test_find_or_mine_prefers_the_folder_triplets_and_mines_otherwise(collection, tmp_path):
    mined = find_or_mine(collection, tmp_path / "out")
    assert mined == tmp_path / "out" / "triplets-train.tsv" and mined.is_file()
    shutil.copy(mined, collection / "triplets-train.tsv")
    assert find_or_mine(collection, tmp_path / "other") == collection / "triplets-train.tsv"
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("text, expected", [("1:30", (1, 30)), ("10:100", (10, 100))])
def test_parse_rank_range(text, expected):
    assert parse_rank_range(text) == expected


@pytest.mark.parametrize("text", ["30", "a:b", "1-30", ""])
def test_parse_rank_range_refuses(text):
    with pytest.raises(SpladekitError, match="rank range"):
        parse_rank_range(text)


@pytest.mark.parametrize(
    "settings, message",
    [
        (MiningSettings(rank_range=(0, 10)), "1 <= A <= B"),
        (MiningSettings(rank_range=(5, 4)), "1 <= A <= B"),
        (MiningSettings(negatives=0), "negatives"),
        (MiningSettings(b=2.0), "0 <= b <= 1"),
    ],
)
def test_bad_settings_are_refused_before_anything(settings, message, collection, tmp_path):
    with pytest.raises(SpladekitError, match=message):
        mine_training_data(collection, tmp_path / "t.tsv", settings=settings, show_progress=False)
    assert list(tmp_path.iterdir()) == [collection]


def test_bad_collections_are_refused_and_nothing_is_written(collection, tmp_path):
    test_only = write_beir(tmp_path / "test-only", DOCS, QUERIES, {"q1": {"p1": 1}}, split="test")
    with pytest.raises(InputError, match="no split 'train'; available: test"):
        mine_training_data(test_only, tmp_path / "t.tsv", show_progress=False)
    (collection / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tp1\t1\nq2\tghost\t1\n")
    with pytest.raises(InputError, match=r"train\.tsv:3: judgment of query 'q2' names document 'ghost'"):
        mine_training_data(collection, tmp_path / "t.tsv", show_progress=False)
    (collection / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq9\tp1\t1\n")
    with pytest.raises(InputError, match=r"train\.tsv:2: judged query 'q9' is not in the queries"):
        mine_training_data(collection, tmp_path / "t.tsv", show_progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["beir", "test-only"]


def test_an_ir_datasets_id_without_the_split_is_refused(tmp_path):
    pytest.importorskip("ir_datasets")
    with pytest.raises(SpladekitError, match="has no 'train' split"):
        mine_training_data("beir/arguana", tmp_path / "t.tsv", show_progress=False)
    with pytest.raises(SpladekitError, match="is not a folder, a suite or an ir_datasets id"):
        mine_training_data("no-such/dataset", tmp_path / "t.tsv", show_progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_mine(cli, collection, tmp_path):
    out = tmp_path / "t.tsv"
    done = cli("mine", collection, "--output", out, "--negatives", "2", "--rank-range", "1:8", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert "--set data.path=" in done.stdout and len(triplet_lines(out)) == 3  # 2 for q1, 1 (x2) for q2
    again = cli("mine", collection, "--output", out, "--negatives", "2")
    assert again.returncode == 2 and "already exists" in again.stderr
    done = cli("mine", collection, "--output", tmp_path / "hn", "--layout", "hard_negatives", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format"] == "hard_negatives"
    bad = cli("mine", collection, "--output", tmp_path / "x", "--layout", "pairs")
    assert bad.returncode == 2 and "unknown format 'pairs'" in bad.stderr
