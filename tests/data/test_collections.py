"""Collections: BEIR folders, HF parquet folders, ir_datasets ids, TREC files, suites, reconciliation."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest

from collection_files import DOCS, QRELS, QUERIES, write_beir, write_hf_parquet
from spladekit.common.errors import InputError, SpladekitError
from spladekit.data import SUITES, load_collection, load_suite, read_qrels, reconcile
from spladekit.data import collections as collections_module
from spladekit.data.collections import Collection
from spladekit.data.jsonl import Corpus
from spladekit.evaluation.run import Run


def test_beir_folder(tmp_path):
    collection = load_collection(write_beir(tmp_path / "mini"), "test")
    assert collection.name == "mini" and collection.corpus.ids == list(DOCS)
    assert collection.corpus.texts[0] == "Paris paris is the capital city of france"  # title + text
    assert collection.queries.ids == list(QUERIES) and collection.qrels == QRELS


def test_missing_split_lists_the_available_ones(tmp_path):
    folder = write_beir(tmp_path / "mini", split="train")
    write_beir(folder, split="dev")
    with pytest.raises(InputError, match=r"mini: no split 'test'; available: dev, train"):
        load_collection(folder, "test")


def test_split_specific_queries_file_wins(tmp_path):
    folder = write_beir(tmp_path / "mini", split="dl19")
    (folder / "queries-dl19.jsonl").write_text('{"_id": "q9", "text": "only this one"}\n')
    assert load_collection(folder, "dl19").queries.ids == ["q9"]


def test_not_a_collection(tmp_path):
    with pytest.raises(InputError, match="not a collection folder"):
        load_collection(tmp_path, "test")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match="expected a collection folder, got a file"):
        load_collection(tmp_path / "file.txt")


def test_qrels_errors_name_file_and_line(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\n")
    with pytest.raises(InputError, match=r"qrels\.tsv:3: expected 3 tab-separated fields"):
        read_qrels(path)
    path.write_text("q1 0 d1 1\nq1 0 d2 high\n")
    with pytest.raises(InputError, match=r"qrels\.tsv:2: relevance must be an integer, got 'high'"):
        read_qrels(path)
    path.write_text("q1 0 d1 1\nq1 0 d1 2\n")
    with pytest.raises(InputError, match=r"qrels\.tsv:2: duplicate judgment"):
        read_qrels(path)


def test_trec_qrels_and_run_round_trip(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 2\nq1 0 d2 0\n\nq2 Q0 d3 1\n")
    assert read_qrels(path) == {"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}
    run = Run({"q1": {"d2": 1.5, "d1": 3.25}, "q2": {"d3": 0.5}})
    run.write(tmp_path / "run.trec")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert lines[0] == "q1 Q0 d1 1 3.250000 spladekit" and lines[1].startswith("q1 Q0 d2 2 ")
    back = Run.read(tmp_path / "run.trec")
    assert back.scores == run.scores and back.ranking("q1") == ["d1", "d2"]  # read back in rank order
    (tmp_path / "bad.trec").write_text("q1 Q0 d1 1 2.0 tag\nq1 Q0 d2 2 notanumber tag\n")
    with pytest.raises(InputError, match=r"bad\.trec:2: score must be a number"):
        Run.read(tmp_path / "bad.trec")


def test_hf_parquet_folder_like_a_downloaded_nanobeir_repo(tmp_path):
    folder = write_hf_parquet(tmp_path / "NanoMini", {"query-id": ["q1", "q2"], "corpus-id": ["d1", "d3"]})
    collection = load_collection(folder)
    assert collection.name == "NanoMini" and collection.corpus.ids == list(DOCS)
    assert collection.qrels == {"q1": {"d1": 1}, "q2": {"d3": 1}}  # no score column: relevance 1


@pytest.mark.parametrize("scores", [[1.0, 2.0, 0.0], ["1", "2", "0"]], ids=["float", "string"])
def test_hf_integral_grades_are_read(tmp_path, scores):
    folder = write_hf_parquet(
        tmp_path / "hf", {"query-id": ["q1", "q3", "q1"], "corpus-id": ["d1", "d5", "d2"], "score": scores}
    )
    assert load_collection(folder).qrels == {"q1": {"d1": 1, "d2": 0}, "q3": {"d5": 2}}


def test_hf_fractional_grade_and_duplicate_judgment_are_refused(tmp_path):
    fractional = write_hf_parquet(
        tmp_path / "fractional", {"query-id": ["q1", "q2"], "corpus-id": ["d1", "d3"], "score": [1.0, 0.5]}
    )
    with pytest.raises(InputError, match=r"fractional \[qrels\]:2: relevance must be an integer, got 0\.5"):
        load_collection(fractional)
    duplicate = write_hf_parquet(
        tmp_path / "duplicate", {"query-id": ["q1", "q2", "q1"], "corpus-id": ["d1", "d3", "d1"], "score": [1, 1, 0]}
    )
    with pytest.raises(InputError, match=r"duplicate \[qrels\]:3: duplicate judgment for query 'q1', document 'd1'"):
        load_collection(duplicate)


def fake_ir_dataset(monkeypatch, relevances=(1,), doc_ids=("d1", "d2")):
    """Register an in-memory stand-in as ir_datasets ``fake/set`` and ``fake/set/test``; its qrels judge
    d2, d1… for q1 with ``relevances``. Returns the list of ids that ``ir_datasets.load`` is called with."""
    import ir_datasets

    Doc = lambda i, title, text: SimpleNamespace(  # noqa: E731
        doc_id=i,
        title=title,
        text=text,
        default_text=lambda: f"{title} {text}".strip(),
    )
    judgments = [
        SimpleNamespace(query_id="q1", doc_id=doc, relevance=relevance, iteration="0")
        for doc, relevance in zip(("d2", "d1"), relevances)
    ]
    dataset = SimpleNamespace(
        has_docs=lambda: True,
        has_queries=lambda: True,
        has_qrels=lambda: True,
        docs_count=lambda: 2,
        docs_iter=lambda: iter([Doc(doc_ids[0], "T", "one"), Doc(doc_ids[1], "", "two")]),
        queries_iter=lambda: iter([SimpleNamespace(query_id="q1", text="first")]),
        qrels_iter=lambda: iter(judgments),
    )
    loaded = []
    monkeypatch.setattr(ir_datasets, "load", lambda name: loaded.append(name) or dataset)
    monkeypatch.setitem(ir_datasets.registry._registered, "fake/set", dataset)
    monkeypatch.setitem(ir_datasets.registry._registered, "fake/set/test", dataset)
    return loaded


def test_ir_datasets_id(monkeypatch):
    """The ir_datasets adapter on an in-memory stand-in (the real download needs the network)."""
    loaded = fake_ir_dataset(monkeypatch)
    collection = load_collection("fake/set", "test")
    assert loaded == ["fake/set/test"]  # <id>/<split> preferred when it exists
    assert collection.corpus.texts == ["T one", "two"] and collection.qrels == {"q1": {"d2": 1}}
    with pytest.raises(SpladekitError, match="not a folder, a suite or an ir_datasets id"):
        load_collection("no/such/dataset")


def test_ir_datasets_grades_must_be_integral(monkeypatch):
    fake_ir_dataset(monkeypatch, relevances=(2.0, 0))
    assert load_collection("fake/set", "test").qrels == {"q1": {"d2": 2, "d1": 0}}
    fake_ir_dataset(monkeypatch, relevances=(1, 0.5))
    with pytest.raises(InputError, match=r"fake/set/test:2: relevance must be an integer, got 0\.5"):
        load_collection("fake/set", "test")


# ----------------------------------------------------------------------------------------- ids
WHITESPACE = "contains whitespace, which a TREC run or qrels line cannot carry"


@pytest.mark.parametrize("bad_id", ["q 1", "q\t1", "q\n1"], ids=["space", "tab", "newline"])
def test_beir_query_ids_with_whitespace_are_refused_at_read_time(tmp_path, bad_id):
    folder = write_beir(tmp_path / "mini", queries={"q1": "first", bad_id: "second"})
    with pytest.raises(InputError, match=WHITESPACE) as error:
        load_collection(folder)
    assert str(error.value).startswith(f"{folder / 'queries.jsonl'}:2: field '_id' ")


def test_qrels_ids_with_whitespace_or_empty_are_refused(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td 2\t1\n")
    with pytest.raises(InputError, match=rf"qrels\.tsv:3: doc id 'd 2' {WHITESPACE}"):
        read_qrels(path)
    path.write_text("query-id\tcorpus-id\tscore\n\td1\t1\n")
    with pytest.raises(InputError, match=r"qrels\.tsv:2: query id must be a non-empty string"):
        read_qrels(path)


def test_hf_and_ir_datasets_ids_with_whitespace_are_refused(tmp_path, monkeypatch):
    docs = dict(DOCS)
    docs["d 9"] = ("", "a document whose id has a space")
    folder = write_hf_parquet(tmp_path / "NanoMini", {"query-id": ["q1"], "corpus-id": ["d1"]}, docs=docs)
    with pytest.raises(InputError, match=rf"NanoMini \[corpus\]:9: field '_id' 'd 9' {WHITESPACE}"):
        load_collection(folder)
    folder = write_hf_parquet(tmp_path / "NanoQrels", {"query-id": ["q1", "q\t2"], "corpus-id": ["d1", "d3"]})
    with pytest.raises(InputError, match=rf"NanoQrels \[qrels\]:2: 'query-id' 'q\\t2' {WHITESPACE}"):
        load_collection(folder)
    fake_ir_dataset(monkeypatch, doc_ids=("d1", "d\n2"))
    with pytest.raises(InputError, match=rf"fake/set/test:2: field '_id' 'd\\n2' {WHITESPACE}"):
        load_collection("fake/set", "test")


def test_run_write_refuses_ids_a_trec_line_cannot_carry(tmp_path):
    for scores, what in [
        ({"q 1": {"d1": 1.0}}, "query id 'q 1'"),
        ({"q1": {"d\n1": 1.0}}, "document id 'd\\n1'"),
        ({"q1": {"": 1.0}}, "document id is empty"),
    ]:
        with pytest.raises(SpladekitError, match=re.escape(what)):
            Run(scores).write(tmp_path / "run.trec")
        assert not (tmp_path / "run.trec").exists()
    with pytest.raises(SpladekitError, match="run tag 'my tag'"):
        Run({"q1": {"d1": 1.0}}).write(tmp_path / "run.trec", tag="my tag")


def test_suites_definitions():
    assert SUITES["msmarco-dev"].measures == ("RR@10", "R@1000")
    assert SUITES["dl19"].measures == ("nDCG@10", "R(rel=2)@1000")
    assert len(SUITES["beir13"].members) == 13 and len(SUITES["nanobeir"].members) == 13
    assert ("webis-touche2020", "beir/webis-touche2020/v2") in SUITES["beir13"].members
    assert ("NanoSciFact", "zeta-alpha-ai/NanoSciFact") in SUITES["nanobeir"].members


def test_suite_from_local_root(tmp_path):
    write_beir(tmp_path / "dl19")
    [collection] = list(load_suite("dl19", root=tmp_path))
    assert collection.name == "dl19" and collection.measures == ("nDCG@10", "R(rel=2)@1000")
    with pytest.raises(InputError, match="suite 'beir13' needs a folder 'arguana' here"):
        next(load_suite("beir13", root=tmp_path))


def test_reconcile_drops_and_counts(tmp_path, caplog):
    qrels = {"q1": {"d1": 1, "ghost": 1}, "q2": {"d3": 1}, "q404": {"d1": 1}, "q3": {"ghost2": 1}}
    collection = load_collection(write_beir(tmp_path / "mini", qrels=qrels))
    with caplog.at_level(logging.WARNING, logger="spladekit"):
        clean = reconcile(collection)
    assert clean.dropped == {"qrels_unknown_queries": 1, "qrels_unknown_docs": 2, "queries_unjudged": 3}
    assert clean.queries.ids == ["q1", "q2"] and clean.qrels == {"q1": {"d1": 1}, "q2": {"d3": 1}}
    assert "1 queries that are not in the queries file" in caplog.text
    assert "2 judgments name documents that are not in the corpus" in caplog.text
    with pytest.raises(SpladekitError, match="no query has a judgment"):
        reconcile(load_collection(write_beir(tmp_path / "none", qrels={"q404": {"d1": 1}})))


SELF_HIT_FREE = Collection("stand-in", Corpus([], []), Corpus([], []), {})


def test_hf_id_dispatch(monkeypatch):
    seen = []
    monkeypatch.setattr(
        collections_module, "load_hf_dataset", lambda source, name=None: seen.append(source) or SELF_HIT_FREE
    )
    assert load_collection("zeta-alpha-ai/NanoSciFact").drop_self_hits is False
    assert seen == ["zeta-alpha-ai/NanoSciFact"]
    assert load_collection("zeta-alpha-ai/NanoArguAna").drop_self_hits is True
