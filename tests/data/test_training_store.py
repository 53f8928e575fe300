"""data/training_store.py and the store cache of data/training.py: built once, memory-mapped, keyed by the inputs,
shared by concurrent processes, rebuilt when damaged; strict errors while building."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time

import numpy as np
import pytest

from spladekit.common.atomic import open_output
from spladekit.common.errors import InputError
from spladekit.common.sources import cache_root
from spladekit.data import training_store
from spladekit.data.training import DataConfig, _source, build_training_store, load_training_set, store_key
from spladekit.data.training_store import TextTable, build_store


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


# ------------------------------------------------------------------------------------------------- damage
def flip(name: str, find: bytes | None = None, mask: int = 0x01):
    """Damage: XOR one byte of ``name`` with ``mask``: the last byte of ``find``, else the low byte of the last
    8-byte element (an .npy's last row number or score: the file stays a valid array)."""

    def damage(folder):
        data = bytearray((folder / name).read_bytes())
        at = data.index(find) + len(find) - 1 if find is not None else len(data) - 8
        data[at] ^= mask
        (folder / name).write_bytes(bytes(data))

    return damage


def truncate(name: str, size: int | None = 0):
    def damage(folder):
        path = folder / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2 if size is None else size])

    return damage


def delete(name: str):
    return lambda folder: (folder / name).unlink()


def out_of_range_negative(folder):
    """A valid .npy whose last negative is row 99 of a 5-row collection."""
    negatives = np.load(folder / "negatives.npy")
    negatives[-1] = 99
    np.save(folder / "negatives.npy", negatives)


def flip_keeping_the_mtime(folder):
    """A flipped byte with the file's modification time put back (as ``touch -r`` or ``rsync -t`` do)."""
    path = folder / "negatives.npy"
    stat = path.stat()
    flip("negatives.npy")(folder)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


DAMAGES = {
    "flipped-byte-query-npy": flip("query.npy"),
    "flipped-byte-negatives-npy": flip("negatives.npy"),
    "flipped-byte-offsets-npy": flip("offsets.npy"),
    "flipped-byte-teacher-npy": flip("teacher_negatives.npy"),
    "flipped-byte-queries-arrow": flip("queries.arrow", b"query b", 0x80),
    "flipped-byte-documents-arrow": flip("documents.arrow", b"document 5", 0x80),
    "flipped-byte-manifest-count": flip("manifest.json", b'"groups": 2'),
    "flipped-byte-manifest-source": flip("manifest.json", b"ids.tsv"),
    "flipped-byte-mtime-kept": flip_keeping_the_mtime,
    "empty-offsets-npy": truncate("offsets.npy"),
    "half-negatives-npy": truncate("negatives.npy", None),
    "deleted-documents-arrow": delete("documents.arrow"),
    "deleted-manifest": delete("manifest.json"),
    "out-of-range-row-npy": out_of_range_negative,
}


def snapshot(training) -> tuple:
    """Everything training reads of a store: the groups by id, sampled examples (texts, teacher scores), pairs."""
    return (
        [(g.query, g.positive, g.negatives) for g in training.groups()],
        [training.example(i, 2, seed=3) for i in range(8)],
        training.pairs(10),
    )


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


@pytest.mark.parametrize("checked_before", [False, True], ids=["fresh", "checked-before"])
@pytest.mark.parametrize("damage", list(DAMAGES.values()), ids=list(DAMAGES))
def test_a_damaged_store_is_rebuilt_with_one_warning_never_used(id_data, caplog, monkeypatch, damage, checked_before):
    """Fresh: damaged right after the build. Checked before: damaged after an open recorded the files as checked
    (``verified.json``), so that the shortcut is what is tested."""
    training = load_training_set(id_data)
    expected, folder = snapshot(training), training.store.folder
    del training  # its memory maps: the damage below may truncate what they map
    if checked_before:
        time.sleep(0.1)
        monkeypatch.setattr(training_store, "_RACY_NS", 5 * 10**7)  # the 0.1 s above: the stamps are settled
        load_training_set(id_data)
        assert (folder / training_store.VERIFIED).is_file()
    damage(folder)
    with caplog.at_level(logging.WARNING):
        rebuilt = load_training_set(id_data)
        assert snapshot(rebuilt) == expected
    warnings = warnings_of(caplog)
    assert len(warnings) == 1 and str(folder) in warnings[0], warnings
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert snapshot(load_training_set(id_data)) == expected  # the rebuilt entry is sound
    assert warnings_of(caplog) == []


def test_checksums_are_computed_once_per_version_of_a_file(id_data, monkeypatch, caplog):
    """Every process of every run opens the store: a file is hashed again only when it changed (size, times or
    inode) since an open hashed it, or when the record of those checks is lost. A file changed less than two
    seconds ago is hashed at every open (a coarse file-system clock could give a changed file the same stamp)."""
    folder = load_training_set(id_data).store.folder
    hashed, real = [], training_store.sha256_file
    monkeypatch.setattr(training_store, "sha256_file", lambda path: hashed.append(path.name) or real(path))
    every_file = sorted(training_store.store_files(teacher=True))
    with caplog.at_level(logging.WARNING):
        load_training_set(id_data)
        assert sorted(hashed) == every_file  # just built: too recent to be trusted
        monkeypatch.setattr(training_store, "_RACY_NS", 0)  # as if two seconds had passed
        hashed.clear()
        load_training_set(id_data)
        assert sorted(hashed) == every_file and (folder / training_store.VERIFIED).is_file()
        hashed.clear()
        load_training_set(id_data)
        assert hashed == []
        stat = (folder / "offsets.npy").stat()
        os.utime(folder / "offsets.npy", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        load_training_set(id_data)
        assert hashed == ["offsets.npy"]
        hashed.clear()
        (folder / training_store.VERIFIED).write_text("{not json")
        load_training_set(id_data)
        assert sorted(hashed) == every_file
    assert warnings_of(caplog) == []


def reseal(change):
    """Damage that the checksums cannot see: ``change`` the folder, then record the changed files' sizes and
    checksums in the manifest (a store written wrong, not damaged later): the structure checks must find it."""

    def damage(folder):
        change(folder)
        training_store.write_manifest(folder, json.loads((folder / "manifest.json").read_text()))

    return damage


def rewrite(name: str, edit):
    def change(folder):
        values = np.load(folder / f"{name}.npy")
        np.save(folder / f"{name}.npy", edit(values))

    return change


def recount(key: str, value: int):
    def change(folder):
        manifest = json.loads((folder / "manifest.json").read_text())
        (folder / "manifest.json").write_text(json.dumps(manifest | {key: value}))

    return change


STRUCTURE = {
    "negative-row-out-of-range": (rewrite("negatives", lambda v: np.where(v == v[-1], 99, v)), "negatives.npy"),
    "query-row-negative": (rewrite("query", lambda v: v - 1), "query.npy"),
    "offsets-not-increasing": (rewrite("offsets", lambda v: np.array([0, 5, 4])), "offsets.npy"),
    "offsets-end-short": (rewrite("offsets", lambda v: np.array([0, 1, 3])), "offsets.npy"),
    "teacher-misaligned": (rewrite("teacher_negatives", lambda v: v[:-1]), "teacher_negatives.npy"),
    "float-row-numbers": (rewrite("positive", lambda v: v.astype(np.float64)), "positive.npy"),
    "two-dimensional": (rewrite("query", lambda v: v.reshape(-1, 1)), "query.npy"),
    "table-rows-differ": (recount("documents", 4), "documents"),
    "group-count-differs": (recount("groups", 3), "query.npy"),
}


@pytest.mark.parametrize(("change", "named"), list(STRUCTURE.values()), ids=list(STRUCTURE))
def test_a_store_written_wrong_is_found_by_its_structure(id_data, caplog, change, named):
    training = load_training_set(id_data)
    expected, folder = snapshot(training), training.store.folder
    del training
    reseal(change)(folder)
    with caplog.at_level(logging.WARNING):
        assert snapshot(load_training_set(id_data)) == expected
    warnings = warnings_of(caplog)
    assert len(warnings) == 1 and str(folder) in warnings[0] and named in warnings[0], warnings


def test_a_text_damaged_after_the_checks_is_one_error_line_naming_the_file(id_data, tmp_path):
    """The checks run at open; a table changed under a running process fails as an error naming it, not as a
    UnicodeDecodeError traceback."""
    folder = load_training_set(id_data).store.folder
    damaged = tmp_path / "documents.arrow"
    damaged.write_bytes((folder / "documents.arrow").read_bytes())
    flip("documents.arrow", b"document 5", 0x80)(tmp_path)
    table = TextTable(damaged)
    assert table.text(0) == "document 1"
    with pytest.raises(InputError, match=rf"^{re.escape(str(damaged))}: row 4: damaged text .*remove .* to rebuild"):
        table.text(4)
