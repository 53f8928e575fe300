"""data/stream.py: lazy corpora equal the eager readers, duplicate ids found without a set of all ids."""

from __future__ import annotations

import hashlib

import pytest

import spladekit.data.stream as stream
from collection_files import write_beir, write_hf_parquet
from spladekit.common.errors import InputError
from spladekit.data import load_collection, read_corpus
from spladekit.data.stream import corpus_fingerprint, iter_corpus, scan_corpus


def test_jsonl_and_beir_folder_stream_what_the_eager_readers_read(tmp_path):
    folder = write_beir(tmp_path / "beir")
    eager = read_corpus(folder / "corpus.jsonl")
    for spec in (folder / "corpus.jsonl", folder, str(folder)):
        assert list(iter_corpus(spec)) == list(zip(eager.ids, eager.texts))
    scan = scan_corpus(folder)
    assert scan.documents == len(eager) and scan.where == str(folder / "corpus.jsonl")


def test_hugging_face_parquet_folder_streams_its_corpus_config(tmp_path):
    folder = write_hf_parquet(tmp_path / "nano", {"query-id": ["q1"], "corpus-id": ["d1"]})
    eager = load_collection(folder).corpus
    assert list(iter_corpus(folder)) == list(zip(eager.ids, eager.texts))
    assert scan_corpus(folder).where == f"{folder} [corpus]"


def test_fingerprint_is_the_evaluation_cache_formula(tmp_path):
    """sha256 over id, 0x00, text, 0x01 per document: the cache keys written before streaming still match."""
    documents = [("d1", "paris"), ("d2", "a vaccine")]
    digest = hashlib.sha256()
    for doc_id, text in documents:
        digest.update(doc_id.encode() + b"\x00" + text.encode() + b"\x01")
    assert corpus_fingerprint(documents) == digest.hexdigest()
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "d1", "text": "paris"}\n{"_id": "d2", "text": "a vaccine"}\n')
    assert scan_corpus(path).fingerprint == digest.hexdigest()


def test_duplicate_ids_name_both_lines(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"}\n\n{"_id": "a", "text": "z"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:4: duplicate id 'a' \(first seen on line 1\)"):
        scan_corpus(path)


def test_a_64_bit_hash_collision_is_not_a_duplicate(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "_id_hash", lambda doc_id: 7)  # every id collides
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"}\n')
    assert scan_corpus(path).documents == 2
    path.write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"}\n{"_id": "b", "text": "z"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:3: duplicate id 'b' \(first seen on line 2\)"):
        scan_corpus(path)


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"_id": "a"}\n', "c.jsonl:1: missing field 'text'"),
        ('{"_id": "a b", "text": "x"}\n', "c.jsonl:1: field '_id'"),
        ("", "c.jsonl: empty corpus"),
    ],
)
def test_record_rules_are_those_of_the_eager_reader(tmp_path, content, message):
    path = tmp_path / "c.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as streamed:
        scan_corpus(path)
    with pytest.raises(InputError) as eager:
        read_corpus(path)
    assert str(streamed.value) == str(eager.value)


def test_a_missing_corpus_or_a_folder_without_one_is_named(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        scan_corpus(tmp_path / "nope.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a corpus"):
        scan_corpus(tmp_path / "empty")
