"""data/training_store.py and the store cache of data/training.py: built once, memory-mapped, keyed by the inputs,
shared by concurrent processes, rebuilt when damaged; strict errors while building."""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import numpy as np
import pytest

from spladekit.common.atomic import open_output
from spladekit.common.errors import InputError
from spladekit.common.sources import cache_root
from spladekit.data.training import DataConfig, _source, build_training_store, load_training_set, store_key
from spladekit.data.training_store import build_store


def write(path, text):
    path.write_text(text)
    return path


@pytest.fixture
def id_data(tmp_path):
    queries = write(tmp_path / "queries.tsv", "a\tquery a\nb\tquery b\n")
    collection = write(tmp_path / "collection.tsv", "".join(f"{d}\tdocument {d}\n" for d in "12345"))
    triplets = write(tmp_path / "ids.tsv", "a\t1\t2\na\t1\t3\nb\t4\t5\nb\t4\t2\n")
    teacher = write(
        tmp_path / "teacher.jsonl",
        "".join(json.dumps({"qid": q, "pid": d, "score": float(d)}) + "\n" for q in "ab" for d in "12345"),
    )
    return DataConfig(
        format="id_triplets",
        path=str(triplets),
        queries=str(queries),
        collection=str(collection),
        teacher=str(teacher),
        negatives=2,
    )


def test_a_second_load_opens_the_same_memory_mapped_store(id_data):
    first = load_training_set(id_data)
    folder = first.store.folder
    assert folder.parent == cache_root() / "training" and (folder / "manifest.json").is_file()
    built = (folder / "manifest.json").stat().st_mtime_ns
    again = load_training_set(id_data)
    assert again.store.folder == folder and (folder / "manifest.json").stat().st_mtime_ns == built
    assert all(isinstance(array, np.memmap) for array in vars(again.store.groups).values())
    assert [again.example(i, 2, seed=5) for i in range(6)] == [first.example(i, 2, seed=5) for i in range(6)]
    example = again.example(0, 2, seed=5)
    assert example.teacher == tuple(float(text.split()[1]) for text in (example.positive, *example.negatives))


def test_the_key_follows_the_inputs_not_the_sampling_settings(id_data, tmp_path):
    key = store_key(id_data)
    assert store_key(DataConfig(**{**vars(id_data), "negatives": 7, "doc_max_length": 64})) == key
    assert store_key(DataConfig(**{**vars(id_data), "limit": 2})) != key
    before = [(g.query, g.positive, g.negatives) for g in load_training_set(id_data).groups()]
    path = tmp_path / "ids.tsv"
    path.write_text(path.read_text() + "a\t1\t4\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a later mtime even on a coarse clock
    assert store_key(id_data) != key
    after = [(g.query, g.positive, g.negatives) for g in load_training_set(id_data).groups()]
    assert before[0] == ("a", "1", ("2", "3")) and after[0] == ("a", "1", ("2", "3", "4"))


def test_a_process_waits_for_the_one_building_the_store(id_data, caplog):
    """While another process holds the store's lock (here a thread, building slowly), a loader waits and then
    opens what the other one built; it builds nothing itself."""
    folder = cache_root() / "training" / store_key(id_data)
    locked = threading.Event()

    def slow_builder():
        with open_output(folder, folder=True) as output:
            locked.set()
            time.sleep(1.5)
            build_store(_source(id_data), output.staging)

    builder = threading.Thread(target=slow_builder)
    builder.start()
    locked.wait()
    with caplog.at_level(logging.INFO, logger="spladekit"):
        store = build_training_store(id_data)
    builder.join()
    assert store.folder == folder and store.manifest["groups"] == 2
    assert "is writing the training data" in caplog.text and "stored in" not in caplog.text


def test_a_damaged_entry_is_rebuilt(id_data, caplog):
    folder = load_training_set(id_data).store.folder
    (folder / "negatives.npy").unlink()
    with caplog.at_level(logging.WARNING):
        rebuilt = load_training_set(id_data)
    assert "rebuilding a damaged training-data cache entry" in caplog.text
    assert [g.negatives for g in rebuilt.groups()] == [("2", "3"), ("5", "2")]


def test_document_rows_are_the_distinct_documents_in_order_of_first_appearance(id_data):
    training = load_training_set(id_data)
    expected = list(dict.fromkeys(d for g in training.groups() for d in (g.positive, *g.negatives)))
    assert list(training.document_texts(training.document_rows())) == [f"document {d}" for d in expected]


@pytest.mark.parametrize(
    ("file", "text", "error"),
    [
        (
            "collection.tsv",
            "1\tone\n2\ttwo\n1\tagain\n",
            r"collection\.tsv:3: duplicate id '1' \(first seen on line 1\)",
        ),
        ("queries.tsv", "a\tquery a\n", r"ids\.tsv:3: unknown query id 'b' \(not in .*queries\.tsv\)"),
        (
            "teacher.jsonl",
            json.dumps({"qid": "a", "pid": "1", "score": 1}) + "\n" + json.dumps({"qid": "a", "pid": "1", "score": 2}),
            r"teacher\.jsonl:2: duplicate teacher score for qid 'a', pid '1'",
        ),
    ],
)
def test_errors_while_building_name_the_file_and_line_and_leave_nothing(
    id_data, tmp_path, monkeypatch, file, text, error
):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    write(tmp_path / file, text)
    with pytest.raises(InputError, match=error):
        load_training_set(id_data)
    assert not (tmp_path / "cache").exists()


def test_the_text_tables_open_as_hugging_face_datasets(id_data):
    datasets = pytest.importorskip("datasets")
    folder = load_training_set(id_data).store.folder
    documents = datasets.Dataset.from_file(str(folder / "documents.arrow"))
    assert documents.column_names == ["id", "text"] and documents[4] == {"id": "5", "text": "document 5"}


def test_text_triplets_store_each_distinct_text_once(tmp_path):
    path = write(tmp_path / "t.tsv", "q1\tp\tn1\nq1\tp\tn2\nq2\tn1\tp\n")
    store = load_training_set(DataConfig(path=str(path))).store
    assert store.manifest["queries"] == 2 and store.manifest["documents"] == 3  # p, n1, n2
    assert store.documents.ids is store.documents.texts  # a text is its own id: not stored twice
