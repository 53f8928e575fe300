"""Training data: triplet TSVs (texts and ids), hard-negative JSONL, HF files, teacher scores, sampling."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spladekit.common.errors import InputError
from spladekit.data import read_triplets
from spladekit.data.teacher import iter_ce_scores, iter_teacher_jsonl
from spladekit.data.training import DataConfig, load_training_set
from spladekit.data.training_store import merge_pairs


def write(path, text):
    path.write_text(text)
    return path


@pytest.fixture
def id_files(tmp_path):
    queries = write(
        tmp_path / "queries.jsonl", "\n".join(json.dumps({"_id": q, "text": f"query {q}"}) for q in "ab") + "\n"
    )
    collection = write(tmp_path / "collection.tsv", "".join(f"{d}\tdocument {d}\n" for d in ("1", "2", "3", "4")))
    return queries, collection


def test_wrong_number_of_fields_names_file_and_line(tmp_path):
    path = write(tmp_path / "t.tsv", "q\tp\tn\nq2\tonly-positive\n")
    with pytest.raises(InputError, match=rf"^{tmp_path}/t.tsv:2: expected 3\+ tab-separated fields .* got 2"):
        read_triplets(path)


def test_empty_positive_names_file_and_line(tmp_path):
    path = write(tmp_path / "t.tsv", "q\tp\tn\n\nq\t \tn\n")
    with pytest.raises(InputError, match=r"t.tsv:3: empty positive \(field 2\)"):
        read_triplets(path)


def test_diagnose_style_pairs_still_read(tmp_path):
    path = write(tmp_path / "pairs.tsv", "q\tp\n")
    assert read_triplets(path, min_negatives=0)[0].negatives == ()


def test_header_and_columns_for_id_triplets_with_extra_columns(tmp_path):
    path = write(tmp_path / "ids.tsv", "query-id\tpos-id\tneg-id\tneg-bm25-rank\na\t1\t2\t9\na\t1\t3\t4\n")
    triplets = read_triplets(path, header=True, columns=3)
    assert [(t.query, t.positive, t.negatives, t.line) for t in triplets] == [
        ("a", "1", ("2",), 2),
        ("a", "1", ("3",), 3),
    ]


def _merged_by_python(rows):
    """The merge rule written out in Python (the oracle for merge_pairs): groups by (query, positive) in order of
    first appearance, negatives in order of first appearance without repeats, groups without negatives dropped."""
    merged = {}
    for query, positive, negative in rows:
        negatives = merged.setdefault((query, positive), {})
        if negative >= 0:
            negatives[negative] = None
    return [(q, p, tuple(n)) for (q, p), n in merged.items() if n]


def _merged_by_numpy(rows):
    query, positive, negative = (np.array(column, dtype=np.int64) for column in zip(*rows))
    groups = merge_pairs(query, positive, negative)
    return [
        (int(q), int(p), tuple(int(n) for n in groups.negatives[groups.offsets[g] : groups.offsets[g + 1]]))
        for g, (q, p) in enumerate(zip(groups.query, groups.positive))
    ]


def test_rows_sharing_query_and_positive_become_one_group_with_several_negatives():
    rows = [(0, 1, 2), (1, 1, 4), (0, 1, 3), (0, 1, 2)]
    assert _merged_by_numpy(rows) == [(0, 1, (2, 3)), (1, 1, (4,))] == _merged_by_python(rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(-1, 6)), min_size=1, max_size=40))
def test_the_numpy_merge_is_the_python_merge(rows):
    """Random rows (negative -1: a row without negatives, which places its group) merge as the rule says."""
    assert _merged_by_numpy(rows) == _merged_by_python(rows)


def test_id_triplets_resolve_texts(tmp_path, id_files):
    queries, collection = id_files
    path = write(tmp_path / "ids.tsv", "a\t1\t2\na\t1\t3\nb\t4\t1\n")
    data = DataConfig(
        format="id_triplets", path=str(path), queries=str(queries), collection=str(collection), negatives=2
    )
    training = load_training_set(data)
    example = training.example(0, negatives=2, seed=0)
    assert len(training) == 2 and example.query.startswith("query ") and len(example.negatives) == 2
    assert all(text.startswith("document ") for text in (example.positive,) + example.negatives)


def test_unknown_id_names_file_and_line(tmp_path, id_files):
    queries, collection = id_files
    path = write(tmp_path / "ids.tsv", "a\t1\t2\nb\t1\t99\n")
    data = DataConfig(format="id_triplets", path=str(path), queries=str(queries), collection=str(collection))
    with pytest.raises(InputError, match=r"ids.tsv:2: unknown document id '99'"):
        load_training_set(data)


def test_teacher_scores_follow_the_sampled_negatives(tmp_path, id_files):
    queries, collection = id_files
    path = write(tmp_path / "ids.tsv", "a\t1\t2\t3\t4\n")
    teacher = write(
        tmp_path / "teacher.jsonl",
        "".join(json.dumps({"qid": "a", "pid": int(d), "score": float(d) * 10}) + "\n" for d in "1234"),
    )
    data = DataConfig(
        format="id_triplets",
        path=str(path),
        queries=str(queries),
        collection=str(collection),
        negatives=2,
        teacher=str(teacher),
    )
    training = load_training_set(data)
    for index in range(5):
        example = training.example(index, negatives=2, seed=3)
        docs = (example.positive,) + example.negatives
        assert example.teacher == tuple(float(doc.split()[1]) * 10 for doc in docs)


def test_missing_teacher_score_is_an_error(tmp_path, id_files):
    queries, collection = id_files
    path = write(tmp_path / "ids.tsv", "a\t1\t2\n")
    teacher = write(tmp_path / "teacher.jsonl", json.dumps({"qid": "a", "pid": "1", "score": 1.0}) + "\n")
    data = DataConfig(
        format="id_triplets", path=str(path), queries=str(queries), collection=str(collection), teacher=str(teacher)
    )
    with pytest.raises(InputError, match="no teacher score for qid 'a', pid '2'"):
        load_training_set(data)


def test_teacher_jsonl_errors_name_the_line(tmp_path):
    path = write(
        tmp_path / "t.jsonl",
        json.dumps({"qid": 1, "pid": 2, "score": 1}) + "\n" + json.dumps({"qid": 1, "pid": 3}) + "\n",
    )
    with pytest.raises(InputError, match=r"t.jsonl:2: expected an object"):
        list(iter_teacher_jsonl(path))


def test_ce_scores_json_gz(tmp_path):
    path = tmp_path / "scores.json.gz"
    with gzip.open(path, "wt") as stream:
        json.dump({"7": {"1": 2.5, "2": -1}}, stream)
    assert list(iter_ce_scores(path)) == [("7", "1", 2.5, None), ("7", "2", -1.0, None)]


def test_sentence_transformers_hard_negatives_layout(tmp_path, id_files):
    queries, collection = id_files
    lines = [
        {"qid": "a", "pos": [1], "neg": {"bm25": [2, 3, 1], "dense": [4]}},
        {"qid": "b", "pos": [2], "neg": {"bm25": []}},
    ]
    path = tmp_path / "hard.jsonl.gz"
    with gzip.open(path, "wt") as stream:
        stream.write("".join(json.dumps(line) + "\n" for line in lines))
    data = DataConfig(
        format="hard_negatives",
        path=str(path),
        queries=str(queries),
        collection=str(collection),
        negative_systems=["bm25"],
    )
    training = load_training_set(data)
    # the positive is never its own negative; a query without negatives is left out
    assert [(g.query, g.positive, g.negatives) for g in training.groups()] == [("a", "1", ("2", "3"))]


def test_hf_datasets_from_a_local_file(tmp_path):
    rows = [{"query": "q1", "positive": "p1", "negative": "n1"}, {"query": "q2", "positive": "p2", "negative": "n2"}]
    path = write(tmp_path / "train.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    training = load_training_set(DataConfig(format="hf", path=str(path)))
    assert [(g.query, g.positive, g.negatives) for g in training.groups()] == [
        ("q1", "p1", ("n1",)),
        ("q2", "p2", ("n2",)),
    ]


def test_sampling_is_a_pure_function_of_seed_and_step(tmp_path):
    path = write(tmp_path / "t.tsv", "".join(f"q{i}\tp{i}\tn{i}a\tn{i}b\tn{i}c\n" for i in range(5)))
    training = load_training_set(DataConfig(path=str(path), negatives=2))
    first = [training.batch(step, 4, 2, seed=1) for step in (1, 2, 3)]
    again = load_training_set(DataConfig(path=str(path), negatives=2))
    assert [again.batch(step, 4, 2, seed=1) for step in (3, 1, 2)] == [first[2], first[0], first[1]]
    assert training.batch(1, 4, 2, seed=2) != first[0]
    # an epoch visits every group once
    assert sorted(e.query for e in training.batch(1, 5, 1, seed=1)) == [f"q{i}" for i in range(5)]
    assert all(len(set(e.negatives)) == 2 and e.negatives[0][:2] == "n" + e.query[1] for e in first[0])


def test_collection_ids_with_whitespace_are_refused_with_file_and_line(tmp_path, id_files):
    queries, _ = id_files
    collection = write(tmp_path / "collection.tsv", "1\tdocument one\n2 b\tdocument two\n")
    triplets = write(tmp_path / "ids.tsv", "a\t1\t2\n")
    data = DataConfig(format="id_triplets", path=str(triplets), queries=str(queries), collection=str(collection))
    with pytest.raises(InputError, match=r"collection\.tsv:2: id '2 b' contains whitespace"):
        load_training_set(data)


def test_hard_negative_ids_of_the_wrong_type_name_the_line(tmp_path, id_files):
    queries, collection = id_files
    path = write(
        tmp_path / "hard.jsonl",
        json.dumps({"qid": "a", "pos": [1], "neg": {"bm25": [2]}})
        + "\n"
        + json.dumps({"qid": "b", "pos": [{"pid": 2}], "neg": {"bm25": [3]}})
        + "\n",
    )
    data = DataConfig(format="hard_negatives", path=str(path), queries=str(queries), collection=str(collection))
    with pytest.raises(
        InputError, match=r"hard\.jsonl:2: a pid must be a non-empty string or an integer, got a JSON object"
    ):
        load_training_set(data)
    path.write_text(json.dumps({"qid": "a", "pos": [1], "neg": {"bm25": 2}}) + "\n")
    with pytest.raises(InputError, match=r'hard\.jsonl:1: "neg" must map each system to a list of pids'):
        load_training_set(data)


def test_hf_folder_in_the_sentence_transformers_triplet_layout_is_streamed_up_to_the_limit(tmp_path):
    """A folder of parquet files with the columns of sentence-transformers/msmarco-* ``triplet-50`` configs
    (query, positive, negative_1…) read as the hub id is: ``load_dataset(…, streaming=True)``."""
    from datasets import Dataset

    (tmp_path / "st").mkdir()
    rows = {
        "query": ["q1", "q2", "q3"],
        "positive": ["p1", "p2", "p3"],
        "negative_1": ["a", "b", "c"],
        "negative_2": ["d", "e", "f"],
    }
    Dataset.from_dict(rows).to_parquet(str(tmp_path / "st" / "train-00000-of-00001.parquet"))
    training = load_training_set(DataConfig(format="hf", path=str(tmp_path / "st"), limit=2))
    assert [(g.query, g.positive, g.negatives) for g in training.groups()] == [
        ("q1", "p1", ("a", "d")),
        ("q2", "p2", ("b", "e")),
    ]


def test_ir_datasets_doc_pairs_are_streamed_and_read_only_up_to_the_limit(monkeypatch):
    """ir_datasets ``docpairs_iter`` (msmarco-passage/train/triples-small: 39.8M pairs) is consumed lazily: with
    data.limit = 3 no pair after the third is read; the documents are read from ``docs_iter`` into the store."""
    import types

    ir_datasets = pytest.importorskip("ir_datasets")
    read = []

    def pairs():
        for number in range(1, 10**9):
            read.append(number)
            yield types.SimpleNamespace(query_id=f"q{number % 2}", doc_id_a=f"p{number % 2}", doc_id_b=f"n{number}")

    documents = [types.SimpleNamespace(doc_id=d, text=f"text of {d}") for d in ("p0", "p1", "n1", "n2", "n3", "n4")]
    dataset = types.SimpleNamespace(
        has_docpairs=lambda: True,
        docpairs_iter=pairs,
        docs_iter=lambda: iter(documents),
        queries_iter=lambda: iter([types.SimpleNamespace(query_id=q, text=f"query {q}") for q in ("q0", "q1")]),
    )
    monkeypatch.setattr(ir_datasets, "load", lambda dataset_id: dataset)
    training = load_training_set(DataConfig(format="ir_datasets", path="msmarco-passage/train/triples-small", limit=3))
    assert read == [1, 2, 3]
    assert [(g.query, g.positive, g.negatives) for g in training.groups()] == [
        ("q1", "p1", ("n1", "n3")),
        ("q0", "p0", ("n2",)),
    ]
    example = training.example(1, negatives=1, seed=0)
    assert example.query.startswith("query q") and example.positive.startswith("text of p")
