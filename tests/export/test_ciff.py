"""CIFF export: written by spladekit, read back with ciff-toolkit's reader; the postings equal the quantized
vectors exactly (term strings → vocabulary ids, docids → rows), whatever the bucketing of the terms."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from spladekit.common.errors import SpladekitError
from spladekit.common.sparse import impact_scale, quantize
from spladekit.export import ciff
from spladekit.export.ciff import export_ciff, pieces, postings_field, term_buckets, term_order
from spladekit.vectors.artifact import Vectors

ciff_pb2 = pytest.importorskip("ciff_toolkit.ciff_pb2")
from ciff_toolkit.read import CiffReader  # noqa: E402

TOKENS = ["[PAD]", "zebra", "apple", "##ing", "Apple", "über", "ü", "a", "naïve", "10", "9", "🙂"]


def random_vectors(rows: int, seed: int) -> sp.csr_matrix:
    matrix = sp.random(rows, len(TOKENS), density=0.4, format="csr", random_state=seed, dtype=np.float32)
    matrix.data = matrix.data * 3
    matrix.data[::7] = 0.004  # rounds to 0 at scale 100: dropped
    matrix = matrix.tolil()
    matrix[3] = 0  # a document without terms
    matrix[5, :] = 0.001  # a document whose every weight rounds to 0
    matrix = matrix.tocsr()
    matrix.eliminate_zeros()
    return matrix


def save(folder, matrix: sp.csr_matrix, model: str | None = None) -> str:
    ids = [f"doc-{row}" for row in range(matrix.shape[0])]
    Vectors(matrix, ids, {"model": model} if model else {}).save(folder)
    return str(folder)


def read_back(path) -> tuple[object, list, list]:
    with CiffReader(path) as reader:
        header = reader.read_header()
        lists = list(reader.read_postings_lists())
        documents = list(reader.read_documents())
    return header, lists, documents


def as_matrix(lists, documents, tokens: list[str]) -> np.ndarray:
    """The impacts of a CIFF file as a rows × vocabulary matrix (docid gaps summed back)."""
    dense = np.zeros((len(documents), len(tokens)), dtype=np.int64)
    for postings in lists:
        docids = np.cumsum([posting.docid for posting in postings.postings])
        dense[docids, tokens.index(postings.term)] = [posting.tf for posting in postings.postings]
    return dense


@pytest.mark.parametrize("bucket_postings, piece_weights", [(1, 3), (5, 40), (10**9, 2**22)])
@pytest.mark.parametrize("name", ["out.ciff", "out.ciff.gz"])
def test_round_trip_postings_equal_the_quantized_vectors(tmp_path, monkeypatch, bucket_postings, piece_weights, name):
    monkeypatch.setattr(ciff, "PIECE_WEIGHTS", piece_weights)  # rows quantized and inverted a few at a time
    matrix = random_vectors(40, seed=3)
    folder = save(tmp_path / "vectors", matrix)
    payload = export_ciff(
        folder, tmp_path / name, tokens=TOKENS, scale=100, bucket_postings=bucket_postings, show_progress=False
    )
    header, lists, documents = read_back(tmp_path / name)
    expected = quantize(matrix, 100).toarray().astype(np.int64)

    assert (as_matrix(lists, documents, TOKENS) == expected).all()
    terms = [postings.term for postings in lists]
    assert terms == sorted(terms) and len(set(terms)) == len(terms)  # unique, code point order
    assert set(terms) == {TOKENS[v] for v in np.flatnonzero((expected > 0).any(axis=0))}  # only non-empty lists
    for postings in lists:
        tfs = [posting.tf for posting in postings.postings]
        assert postings.df == len(tfs) and postings.cf == sum(tfs) and min(tfs) >= 1
        assert all(posting.docid > 0 for posting in postings.postings[1:])  # strictly increasing docids
    assert [(d.docid, d.collection_docid) for d in documents] == [(row, f"doc-{row}") for row in range(40)]
    assert [d.doclength for d in documents] == expected.sum(axis=1).tolist()
    assert documents[3].doclength == 0 and documents[5].doclength == 0
    assert (header.num_docs, header.total_docs) == (40, 40)
    assert header.num_postings_lists == header.total_postings_lists == len(lists)
    assert header.total_terms_in_collection == expected.sum()
    assert header.average_doclength == pytest.approx(expected.sum() / 40)
    assert "round(weight x 100)" in header.description
    assert payload["postings"] == (expected > 0).sum()
    assert payload["dropped_weights"] == matrix.nnz - (expected > 0).sum() > 0


def test_hand_computed_impacts(tmp_path):
    matrix = sp.csr_matrix(np.array([[0.004, 0.016, 1.0, 0.0], [0.0, 2.5, 0.0, 0.0123]], dtype=np.float32))
    folder = save(tmp_path / "vectors", matrix)
    export_ciff(folder, tmp_path / "out.ciff", tokens=["d", "c", "b", "a"], scale=100, show_progress=False)
    _, lists, documents = read_back(tmp_path / "out.ciff")
    got = {postings.term: [(p.docid, p.tf) for p in postings.postings] for postings in lists}
    # "d" (0.004 → 0) is dropped; "c" docids 0 and 1 → gaps 0, 1
    assert got == {"a": [(1, 1)], "b": [(0, 100)], "c": [(0, 2), (1, 250)]}
    assert [d.doclength for d in documents] == [102, 251]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**31 - 1),
            st.sampled_from([1, 127, 128, 16383, 16384, 2**21, 2**28, 2**31 - 1]) | st.integers(1, 2**31 - 1),
        ),
        min_size=1,
        max_size=30,
        unique_by=lambda pair: pair[0],
    )
)
def test_postings_field_is_protobufs_own_serialization(pairs):
    pairs = sorted(pairs)
    docids = np.array([docid for docid, _ in pairs], dtype=np.int64)
    tfs = np.array([tf for _, tf in pairs], dtype=np.int64)
    gaps = np.diff(docids, prepend=0)
    message = ciff_pb2.PostingsList(postings=[ciff_pb2.Posting(docid=int(g), tf=int(t)) for g, t in zip(gaps, tfs)])
    assert postings_field(docids, tfs) == message.SerializeToString()


def test_term_buckets_cover_every_term_once_within_the_limit():
    df = np.array([3, 0, 9, 1, 1, 2, 0, 4])
    buckets = term_buckets(df, 4)
    assert [index for start, end in buckets for index in range(start, end)] == list(range(len(df)))
    assert all(df[start:end].sum() <= 4 or end - start == 1 for start, end in buckets)
    assert buckets == [(0, 2), (2, 3), (3, 7), (7, 8)]


@pytest.mark.parametrize("limit", [1, 4, 10, 10**6])
def test_pieces_cover_every_row_once_within_the_limit(limit):
    matrix = random_vectors(40, seed=5)
    blocks = [
        Vectors(matrix[:25], [f"d{row}" for row in range(25)]),
        Vectors(matrix[25:], [f"d{row}" for row in range(25, 40)]),
    ]
    runs = list(pieces(blocks, limit))
    assert [doc_id for run in runs for doc_id in run.ids] == [f"d{row}" for row in range(40)]
    assert (sp.vstack([run.matrix for run in runs]) != matrix).nnz == 0
    assert all(run.matrix.nnz <= limit or len(run) == 1 for run in runs)


def test_term_order_is_code_point_order_and_refuses_duplicates_and_empty_terms():
    assert [TOKENS[v] for v in term_order(TOKENS)] == sorted(TOKENS)
    with pytest.raises(SpladekitError, match="'a' twice"):
        term_order(["a", "b", "a"])
    with pytest.raises(SpladekitError, match="empty token string"):
        term_order(["a", ""])


@pytest.mark.parametrize(
    "value, message",
    [(np.nan, "finite, non-negative"), (-0.5, "finite, non-negative"), (np.inf, "finite, non-negative")],
)
def test_bad_weights_are_refused_and_nothing_is_written(tmp_path, value, message):
    matrix = random_vectors(10, seed=1).tolil()
    matrix[2, 4] = value
    folder = save(tmp_path / "vectors", matrix.tocsr())
    with pytest.raises(SpladekitError, match=message):
        export_ciff(folder, tmp_path / "out.ciff", tokens=TOKENS, show_progress=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["vectors"]  # no output, staging or scratch


@pytest.mark.parametrize("scale", [1e10, 1e40])  # 1e40: the float32 product itself overflows
def test_a_scale_giving_impacts_beyond_int32_is_refused_naming_the_document(tmp_path, scale):
    matrix = random_vectors(10, seed=2)
    # 1e10: the heaviest weight's document; 1e40: every product overflows float32, and the first document is named
    heaviest = int(np.searchsorted(matrix.indptr, np.argmax(matrix.data), side="right")) - 1 if scale < 1e38 else 0
    folder = save(tmp_path / "vectors", matrix)
    with pytest.raises(SpladekitError) as error:
        export_ciff(folder, tmp_path / "out.ciff", tokens=TOKENS, scale=scale, show_progress=False)
    assert str(error.value).startswith(f"CIFF: document 'doc-{heaviest}' has an impact ")
    assert "over 2,147,483,647, the largest CIFF can hold; lower --quantization-scale" in str(error.value)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["vectors"]


def test_a_doclength_beyond_int32_is_refused_naming_the_document_and_a_scale_that_fits(tmp_path):
    """Two impacts of 1.5e9 are each a valid int32 tf; their sum, the document's doclength, is not."""
    matrix = sp.csr_matrix(np.array([[0.5] + [0.0] * 11, [1.5, 1.5] + [0.0] * 10], dtype=np.float32))
    folder = save(tmp_path / "vectors", matrix)
    with pytest.raises(SpladekitError) as error:
        export_ciff(folder, tmp_path / "out.ciff", tokens=TOKENS, scale=1e9, show_progress=False)
    assert str(error.value) == (
        "CIFF: document 'doc-1' has a length of 3,000,000,000 at scale 1e+09 (its doclength, the sum of its impacts), "
        "over 2,147,483,647, the most CIFF can hold; lower --quantization-scale to 7.15e+08 or less"
    )
    export_ciff(folder, tmp_path / "out.ciff", tokens=TOKENS, scale=7.15e8, show_progress=False)
    _, _, documents = read_back(tmp_path / "out.ciff")
    assert [document.doclength for document in documents] == pytest.approx([357_500_000, 2_145_000_000], rel=1e-7)


def test_cli_uses_the_models_token_strings(cli, tmp_path, tiny_model_dirs):
    from transformers import AutoTokenizer

    model = tiny_model_dirs["bert"]
    tokenizer = AutoTokenizer.from_pretrained(model)
    matrix = sp.random(6, len(tokenizer), density=0.02, format="csr", random_state=0, dtype=np.float32)
    folder = save(tmp_path / "vectors", matrix, model=str(model))
    result = cli("export", "ciff", folder, "--output", tmp_path / "out.ciff", "--json")
    assert result.returncode == 0, result.stderr
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    header, lists, documents = read_back(tmp_path / "out.ciff")
    scale = json.loads(result.stdout)["quantization_scale"]
    assert scale == impact_scale(float(matrix.data.max())) and f"round(weight x {scale:g})" in header.description
    assert (as_matrix(lists, documents, tokens) == quantize(matrix, scale).toarray()).all()  # the derived default
    assert str(model) in header.description
    again = cli("export", "ciff", folder, "--output", tmp_path / "out.ciff", "--quantization-scale", "10")
    assert again.returncode == 2 and "already exists" in again.stderr
    again = cli(
        "export",
        "ciff",
        folder,
        "--output",
        tmp_path / "out.ciff",
        "--quantization-scale",
        "10",
        "--overwrite",
    )
    assert again.returncode == 0, again.stderr
    _, lists, documents = read_back(tmp_path / "out.ciff")
    assert (as_matrix(lists, documents, tokens) == quantize(matrix, 10).toarray()).all()


@pytest.mark.parametrize("scale", ["0", "-1", "nan"])
def test_cli_bad_scale_is_one_error_line(cli, tmp_path, scale):
    folder = save(tmp_path / "vectors", random_vectors(8, seed=0))
    result = cli("export", "ciff", folder, "--output", tmp_path / "out.ciff", "--quantization-scale", scale)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error:") and len(result.stderr.strip().splitlines()) == 1
    assert "quantization scale" in result.stderr and not (tmp_path / "out.ciff").exists()


def test_cli_missing_folder_and_a_model_without_tokenizer(cli, tmp_path):
    result = cli("export", "ciff", tmp_path / "nope", "--output", tmp_path / "out.ciff")
    assert result.returncode == 2 and "no such vectors folder" in result.stderr
    folder = save(tmp_path / "vectors", random_vectors(8, seed=0))
    (tmp_path / "model").mkdir()
    result = cli("export", "ciff", folder, "--output", tmp_path / "out.ciff", "--model", tmp_path / "model")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "out.ciff").exists()
    result = cli("export", "ciff", folder, "--output", tmp_path / "out.ciff")
    assert result.returncode == 2 and "names no model" in result.stderr


def test_missing_ciff_toolkit_names_the_install_command(cli, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ciff_toolkit", None)  # import fails as if it were not installed
    folder = save(tmp_path / "vectors", random_vectors(8, seed=0))
    result = cli("export", "ciff", folder, "--output", tmp_path / "out.ciff")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "pip install --no-deps ciff-toolkit==0.2.2" in result.stderr and not (tmp_path / "out.ciff").exists()
