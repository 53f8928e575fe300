"""vectors.py: a vectors folder round-trips, and every damaged file in it is one error naming the file."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.common.errors import InputError
from spladekit.vectors.artifact import Vectors


@pytest.fixture
def folder(tmp_path):
    matrix = sp.random(4, 30, density=0.2, format="csr", dtype=np.float32, random_state=0)
    return Vectors(matrix, ["d1", "d2", "d3", "d4"], {"model": "m", "max_length": 64}).save(tmp_path / "vectors")


def test_round_trip(folder):
    loaded = Vectors.load(folder)
    assert loaded.ids == ["d1", "d2", "d3", "d4"] and loaded.matrix.dtype == np.float32 and loaded.vocab_size == 30
    assert loaded.meta == {"model": "m", "max_length": 64}


def _cut(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _pickled(path):  # an object array: loading it would need pickle, which is never allowed
    np.savez(
        path,
        format=np.array("csr"),
        shape=np.array([4, 30]),
        data=np.array([object()] * 4, dtype=object),
        indices=np.array([0, 1, 2, 3]),
        indptr=np.array([0, 1, 2, 3, 4]),
    )


def _out_of_range(path):
    np.savez(
        path,
        format=np.array("csr"),
        shape=np.array([4, 30]),
        data=np.ones(4, np.float32),
        indices=np.array([0, 1, 2, 99]),
        indptr=np.array([0, 1, 2, 3, 4]),
    )


DAMAGES = {
    "empty npz": ("vectors.npz", lambda path: path.write_bytes(b""), "corrupt or unreadable sparse matrix"),
    "truncated npz": ("vectors.npz", _cut, "corrupt or unreadable sparse matrix"),
    "garbage npz": (
        "vectors.npz",
        lambda path: path.write_bytes(b"garbage" * 50),
        "corrupt or unreadable sparse matrix",
    ),
    "pickled npz": ("vectors.npz", _pickled, "corrupt or unreadable sparse matrix"),
    "index out of range": ("vectors.npz", _out_of_range, "corrupt or unreadable sparse matrix"),
    "ids not a list": ("ids.json", lambda path: path.write_text('{"d1": 0}'), "expected a JSON list"),
    "ids not strings": (
        "ids.json",
        lambda path: path.write_text('["d1", 2, "d3", "d4"]'),
        "id #2 must be a string, got 2",
    ),
    "id with a space": (
        "ids.json",
        lambda path: path.write_text('["d1", "d 2", "d3", "d4"]'),
        "id #2 'd 2' contains whitespace",
    ),
    "id with a newline": (
        "ids.json",
        lambda path: path.write_text(json.dumps(["d1", "d2", "d3", "d\n4"])),
        "id #4 'd\\n4' contains whitespace",
    ),
    "empty id": ("ids.json", lambda path: path.write_text('["d1", "", "d3", "d4"]'), "id #2 is empty"),
    "ids not JSON": ("ids.json", lambda path: path.write_text('["d1", '), "not valid JSON"),
    "meta of the wrong type": (
        "meta.json",
        lambda path: path.write_text('{"max_length": "64"}'),
        "'max_length' must be an integer, got '64'",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_files_are_an_error_naming_the_file(folder, damage):
    name, spoil, message = DAMAGES[damage]
    spoil(folder / name)
    with pytest.raises(InputError, match=re.escape(message)) as error:
        Vectors.load(folder)
    assert re.match(rf"{re.escape(str(folder / name))}(:1)?: ", str(error.value))  # JSON syntax: with its line


def test_count_mismatch_names_both_files(folder):
    (folder / "ids.json").write_text('["d1", "d2"]')
    with pytest.raises(InputError, match=re.escape(f"{folder}: 4 vectors in vectors.npz but 2 ids in ids.json")):
        Vectors.load(folder)


@pytest.mark.parametrize("damage", ["empty npz", "truncated npz", "ids not strings"])
def test_cli_index_of_damaged_vectors_is_one_error_line_and_writes_nothing(folder, tmp_path, damage, cli):
    name, spoil, message = DAMAGES[damage]
    spoil(folder / name)
    result = cli("index", folder, "--output", tmp_path / "index")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "Aborted" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {folder / name}: {message}")
    assert not (tmp_path / "index").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["vectors"]  # no staging leftovers either
