"""Backend parameters are declared once (``Param``): bad values are refused with one clear line before any
work, command-line strings are typed by the declarations, and the CLI help lists every declared parameter."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.cli.retrieval import params_help
from spladekit.common.errors import SpladekitError
from spladekit.index import BACKENDS, ExactSearcher, SeismicSearcher, build_index
from spladekit.vectors.artifact import Vectors
from synthetic_sparse import zipf_matrix

BAD_BUILD = [
    ("exact", "query_batch", "-5"),
    ("exact", "query_batch", "0"),
    ("exact", "query_batch", "abc"),
    ("exact", "query_batch", "2.5"),
    ("exact", "query_batch", -5),
    ("exact", "bogus", "1"),
    ("seismic", "n_postings", "-1"),
    ("seismic", "n_postings", 0),
    ("seismic", "centroid_fraction", "0"),
    ("seismic", "centroid_fraction", "1.5"),
    ("seismic", "summary_energy", "nan"),
    ("seismic", "max_fraction", "0"),
    ("seismic", "min_cluster_size", "0"),
    ("seismic", "doc_cut", "x"),
    ("seismic", "num_threads", "-1"),
    ("seismic", "query_cut", "0"),
    ("seismic", "heap_factor", "-0.5"),
    ("seismic", "heap_factor", "inf"),
    ("seismic", "heap_factor", math.nan),
    ("seismic", "bogus", 1),
    ("bmp", "bsize", "0"),
    ("bmp", "bsize", "257"),
    ("bmp", "bsize", "abc"),
    ("bmp", "compress_range", "maybe"),
    ("bmp", "alpha", "0"),
    ("bmp", "alpha", "1.5"),
    ("bmp", "alpha", "nan"),
    ("bmp", "beta", "0"),
    ("bmp", "beta", "-inf"),
    ("bmp", "beta", "1e999"),
    ("bmp", "bogus", "1"),
    ("pisa", "scale", "0"),
    ("pisa", "scale", "nan"),
    ("pisa", "scale", "1e9"),
    ("pisa", "block_size", "0"),
    ("pisa", "encoding", "zip"),
    ("pisa", "encoding", ""),
    ("pisa", "algorithm", "ranked_and"),
    ("pisa", "threads", "-1"),
    ("pisa", "bogus", "1"),
    ("qdrant", "batch_size", "0"),
    ("qdrant", "collection", ""),
    ("qdrant", "recreate", "2"),
    ("qdrant", "bogus", "1"),
    ("milvus", "batch_size", "0"),
    ("milvus", "collection", ""),
    ("milvus", "recreate", "2"),
    ("milvus", "uri", "./x.db"),
    ("milvus", "uri", "localhost:19530"),
    ("milvus", "bogus", "1"),
]


@pytest.mark.parametrize("backend, name, value", BAD_BUILD, ids=lambda x: str(x))
def test_bad_build_parameter_is_one_clear_line_before_any_work(backend, name, value):
    """``documents=None``: any work on them would fail otherwise, so the message proves the check came first."""
    for build in (
        lambda: build_index(None, backend, **{name: value}),
        lambda: BACKENDS[backend].build(None, **{name: value}),
    ):
        with pytest.raises(SpladekitError) as caught:
            build()
        message = str(caught.value)
        assert "\n" not in message and message.startswith(backend) and name in message
        if name in {param.name for param in BACKENDS[backend].declared_params}:
            assert f"{name}={value}: must be " in message
        else:
            assert "it takes: " in message


def test_unknown_parameter_lists_the_valid_ones():
    with pytest.raises(SpladekitError, match="bmp does not take bogus; it takes: bsize, compress_range, alpha, beta$"):
        build_index(None, "bmp", bogus=1)
    with pytest.raises(SpladekitError, match="exact does not take heap_factor at search time; it takes: num_threads$"):
        ExactSearcher.check_params({"heap_factor": "0.5"}, "search")


@pytest.mark.parametrize("backend", BACKENDS)
def test_declared_defaults_pass_their_own_checks(backend):
    searcher = BACKENDS[backend]
    assert searcher.check_params(searcher.defaults()) == searcher.defaults()
    for param in searcher.declared_params:
        assert param.role in ("build", "search") and param.help and param.name in param.describe()


def test_command_line_strings_are_typed_by_the_declarations():
    typed = BACKENDS["bmp"].check_params({"bsize": " 64", "compress_range": "True", "alpha": "0.5", "beta": "1"})
    assert typed == {"bsize": 64, "compress_range": True, "alpha": 0.5, "beta": 1.0}
    assert type(typed["beta"]) is float
    assert BACKENDS["qdrant"].check_params({"url": None, "recreate": "no"}) == {"url": None, "recreate": False}
    assert build_index(zipf_matrix(10, 20, 4, seed=1), "exact", query_batch="3").params == {
        "query_batch": 3,
        "num_threads": 0,
    }


def test_search_parameters_are_checked_and_build_ones_refused_at_search_time():
    documents = zipf_matrix(200, 300, 20, seed=2)
    searcher = build_index(documents, "bmp")
    queries = zipf_matrix(3, 300, 5, seed=3)
    with pytest.raises(SpladekitError, match=r"bmp parameter beta=0: must be a finite number > 0 and <= 1"):
        searcher.search(queries, k=5, beta="0")
    with pytest.raises(SpladekitError, match="bmp does not take bsize at search time; it takes: alpha, beta"):
        searcher.search(queries, k=5, bsize=8)
    with pytest.raises(SpladekitError, match="exact does not take alpha at search time"):
        build_index(documents, "exact").search_batches(queries, k=5, show_progress=False, alpha=0.5)


def test_an_explicit_zero_search_parameter_is_used_not_replaced_by_the_index_default():
    """heap_factor=0 (no block skipped) must not fall back to the index's aggressive 3.0 as a falsy value."""
    documents, queries = zipf_matrix(1500, 1000, 40, seed=4), zipf_matrix(40, 1000, 12, seed=5)
    exact = ExactSearcher.build(documents).search(queries, k=10).doc_indices
    searcher = SeismicSearcher.build(documents, heap_factor=3.0)

    def recall(params):
        found = searcher.search(queries, k=10, **params).doc_indices
        return np.mean([len(set(f) & set(e[e >= 0])) / (e >= 0).sum() for f, e in zip(found, exact)])

    assert recall({}) < 0.95 < recall({"heap_factor": 0.0})


def test_cli_index_refuses_a_bad_parameter_with_one_line_and_writes_nothing(tmp_path, cli):
    Vectors(zipf_matrix(20, 50, 5, seed=6), [f"d{i}" for i in range(20)]).save(tmp_path / "vectors")
    result = cli("index", tmp_path / "vectors", "--output", tmp_path / "index", "--param", "query_batch=-5")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: exact parameter query_batch=-5: must be an integer >= 1"]
    assert not (tmp_path / "index").exists() and result.stdout == ""
    # checked before the vectors are read: a missing vectors folder is not what gets reported
    result = cli(
        "index", tmp_path / "missing", "--output", tmp_path / "index", "--backend", "bmp", "--param", "bsize=0"
    )
    assert result.returncode == 2 and "bsize=0" in result.stderr and not (tmp_path / "index").exists()


def test_cli_search_and_evaluate_check_parameters_before_loading_queries_or_models(tmp_path, cli):
    searcher = ExactSearcher.build(sp.csr_matrix(np.eye(4, dtype=np.float32)))
    searcher.doc_ids = ["a", "b", "c", "d"]
    searcher.save(tmp_path / "index")
    result = cli(
        "search",
        tmp_path / "index",
        "--query-vectors",
        tmp_path / "missing",
        "--output",
        tmp_path / "run.trec",
        "--param",
        "heap_factor=0.5",
    )
    assert result.returncode == 2 and "exact does not take heap_factor at search time" in result.stderr
    assert not (tmp_path / "run.trec").exists()
    result = cli(
        "evaluate",
        tmp_path / "no-model",
        "--data",
        tmp_path / "no-data",
        "--backend",
        "seismic",
        "--param",
        "n_postings=-1",
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: seismic parameter n_postings=-1: must be an integer >= 1"]


def test_help_lists_every_declared_parameter(cli):
    help_text = cli("index", "--help").stdout
    for searcher in BACKENDS.values():
        assert searcher.name in help_text
        for param in searcher.declared_params:
            assert param.name in help_text
            assert param.describe() in params_help("build")
            assert (param.describe() in params_help("search")) == (param.role == "search")


def test_a_string_parameter_with_choices_takes_only_those():
    from spladekit.index.params import Param

    param = Param("algorithm", str, "a", "how", choices=("a", "b"))
    assert param.convert("b") == "b" and "'a' or 'b'; default \"a\"" in param.describe()
    with pytest.raises(ValueError):
        param.convert("c")
    with pytest.raises(TypeError):
        Param("algorithm", str, "z", "how", choices=("a", "b"))  # the default must be a choice
