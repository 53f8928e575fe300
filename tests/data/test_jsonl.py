"""data/jsonl.py and data/triplets.py: every bad line is reported as file:line."""

from __future__ import annotations

import json

import pytest

from spladekit.common.errors import InputError
from spladekit.data import read_corpus, read_texts, read_triplets
from spladekit.data.jsonl import read_document


def write(tmp_path, name, content: bytes | str):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def test_reads_ids_and_title_plus_text(tmp_path):
    path = write(tmp_path, "c.jsonl", '{"_id": "a", "title": "T", "text": "body"}\n\n{"_id": 7, "text": "x"}\n')
    corpus = read_corpus(path)
    assert corpus.ids == ["a", "7"] and corpus.texts == ["T body", "x"]


def test_read_document_finds_one_document_by_id(tmp_path):
    path = write(tmp_path, "c.jsonl", '{"_id": "a", "title": "T", "text": "body"}\n{"_id": 7, "text": "x"}\n{oops\n')
    assert read_document(path, "a") == "T body"
    assert read_document(path, "7") == "x"  # read up to its line only: the broken line 3 is not reached
    with pytest.raises(InputError, match="c.jsonl:3: not valid JSON"):
        read_document(path, "b")
    path.write_text('{"_id": "a", "text": "x"}\n')
    with pytest.raises(InputError, match="no document with id 'b'"):
        read_document(path, "b")


@pytest.mark.parametrize(
    "content, line, message",
    [
        ('{"_id": "a", "text": "ok"}\n{not json}\n', 2, "not valid JSON"),
        ('{"_id": "a", "text": "ok"}\n{"text": "no id"}\n', 2, "missing field '_id'"),
        ('{"_id": "a"}\n', 1, "missing field 'text'"),
        ('{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', 2, "duplicate id 'a' \\(first seen on line 1\\)"),
        ('["a", "b"]\n', 1, "expected a JSON object"),
        ('{"_id": "", "text": "x"}\n', 1, "non-empty string"),
        (b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n', 2, "not valid UTF-8"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, content, line, message):
    path = write(tmp_path, "c.jsonl", content)
    with pytest.raises(InputError, match=message) as error:
        read_corpus(path)
    assert str(error.value).startswith(f"{path}:{line}: ")


def test_empty_and_missing_corpus(tmp_path):
    with pytest.raises(InputError, match="empty corpus"):
        read_corpus(write(tmp_path, "e.jsonl", "\n\n"))
    with pytest.raises(InputError, match="no such file"):
        read_corpus(tmp_path / "missing.jsonl")


def test_read_texts_plain_lines(tmp_path):
    assert read_texts(write(tmp_path, "t.txt", "one\n\n two \n")) == ["one", "two"]


def test_triplets(tmp_path):
    path = write(tmp_path, "t.tsv", "q\tpos\tneg1\tneg2\nq2\tp2\tn2\n")
    triplets = read_triplets(path)
    assert triplets[0].negatives == ("neg1", "neg2") and triplets[1].query == "q2"
    assert len(read_triplets(path, limit=1)) == 1
    with pytest.raises(InputError, match="expected 3\\+ tab-separated fields") as error:
        read_triplets(write(tmp_path, "bad.tsv", "q\tpos\tneg\nq\tpos\n"))
    assert ":2: " in str(error.value)
    with pytest.raises(InputError, match="empty positive"):
        read_triplets(write(tmp_path, "empty.tsv", "q\t \tneg\n"))


@pytest.mark.parametrize(
    "bad_id",
    ["a b", "a\tb", "a\nb", "a\u00a0b", " a", "a\r"],
    ids=["space", "tab", "newline", "nbsp", "leading-space", "carriage-return"],
)
def test_ids_a_trec_line_cannot_carry_are_refused_with_file_and_line(tmp_path, bad_id):
    path = write(tmp_path, "c.jsonl", '{"_id": "ok", "text": "x"}\n' + json.dumps({"_id": bad_id, "text": "y"}) + "\n")
    with pytest.raises(InputError, match="contains whitespace, which a TREC run or qrels line cannot carry") as error:
        read_corpus(path)
    assert str(error.value).startswith(f"{path}:2: field '_id' ")
