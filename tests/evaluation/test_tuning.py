"""tune-index: recall against exact, the frontier, the fastest configuration per target, and the index built with
it (its search parameters the index's defaults)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spladekit.common.errors import SpladekitError
from spladekit.evaluation.tuning import Point, Tuning, check_grid, recall_at_k, tune
from spladekit.index import load_index
from spladekit.vectors.artifact import Vectors
from synthetic_sparse import zipf_matrix


@pytest.fixture(scope="module")
def collection():
    return zipf_matrix(2000, 800, 40, seed=5), zipf_matrix(40, 800, 10, seed=6)


def test_recall_counts_the_exact_hits_found_over_queries_with_hits():
    found = np.array([[1, 2, 3], [4, -1, -1], [7, 8, 9]])
    exact = np.array([[3, 2, 9], [4, 5, -1], [-1, -1, -1]])  # the third query has no exact hit: not counted
    assert recall_at_k(found, exact) == pytest.approx((2 / 3 + 1 / 2) / 2)


def test_frontier_and_the_fastest_point_per_target():
    tuning = Tuning("seismic", 10, 5, 100, targets=(0.9, 0.95, 0.999))
    for recall, us in ((0.80, 10), (0.92, 20), (0.91, 30), (0.97, 25), (0.99, 50), (0.95, 60)):
        tuning.points.append(Point({}, {"us": us}, recall, us))
    assert [(p.recall, p.us_per_query) for p in tuning.frontier()] == [(0.80, 10), (0.92, 20), (0.97, 25), (0.99, 50)]
    chosen = tuning.chosen()
    assert chosen["0.9"].us_per_query == 20 and chosen["0.95"].us_per_query == 25 and chosen["0.999"] is None


def test_rank_safe_pisa_recalls_everything_and_pruned_seismic_does_not(collection):
    documents, queries = collection
    pisa = tune(documents, queries, "pisa", {"algorithm": ["maxscore", "ranked_or"]}, show_progress=False)
    assert len(pisa.points) == 2 and all(point.recall == 1.0 for point in pisa.points)
    seismic = tune(documents, queries, "seismic", {"query_cut": [1, 10], "heap_factor": [0.5]}, show_progress=False)
    recalls = {point.search["query_cut"]: point.recall for point in seismic.points}
    assert recalls[1] < 0.9 < recalls[10] and all(point.us_per_query > 0 for point in seismic.points)
    assert seismic.exact_us_per_query > 0 and seismic.to_dict()["exact_us_per_query"] == seismic.exact_us_per_query
    with pytest.raises(SpladekitError, match="repeats must be an integer >= 1"):
        tune(documents, queries, "pisa", {"algorithm": ["maxscore"]}, repeats=0)


def test_no_query_or_no_document_is_refused_before_any_index_is_built(collection, monkeypatch):
    """Without a query (or with queries sharing no term with the documents) every configuration's recall was 1.0000:
    every target "reached", and an index built with the fastest configuration."""
    import scipy.sparse as sp

    from spladekit.index import PisaSearcher

    def no_build(*args, **kwargs):
        raise AssertionError("built an index before the refusal")

    monkeypatch.setattr(PisaSearcher, "build", no_build)
    documents, queries = collection
    grid = {"algorithm": ["maxscore"]}
    none = sp.csr_matrix((0, 800), dtype=np.float32)
    with pytest.raises(SpladekitError, match=r"^no query vectors: recall@k needs queries"):
        tune(documents, none, "pisa", grid, show_progress=False)
    with pytest.raises(SpladekitError, match=r"^no document vectors: nothing to search"):
        tune(none, queries, "pisa", grid, show_progress=False)
    without = sp.csr_matrix(documents.multiply((np.arange(800) != 799)[None, :]), dtype=np.float32)
    without.eliminate_zeros()  # no document holds term 799, the only term of these queries
    strangers = sp.csr_matrix(([1.0, 1.0], ([0, 1], [799, 799])), shape=(2, 800), dtype=np.float32)
    for unanswerable in (strangers, sp.csr_matrix((3, 800), dtype=np.float32)):
        with pytest.raises(SpladekitError, match=r"^none of the \d queries shares a term with the documents"):
            tune(without, unanswerable, "pisa", grid, show_progress=False)


def test_grids_are_checked_by_the_backends_declarations():
    build, search = check_grid("bmp", {"bsize": ["16", 32], "alpha": ["0.5"]})
    assert build == {"bsize": [16, 32]} and search == {"alpha": [0.5]}
    for grid, message in (
        ({"bsize": ["0"]}, "bmp parameter bsize=0: must be an integer >= 1 and <= 256"),
        ({"cut": ["1"]}, "bmp does not take cut"),
        ({"bsize": []}, "grid bsize: no values"),
    ):
        with pytest.raises(SpladekitError, match=message):
            check_grid("bmp", grid)
    with pytest.raises(SpladekitError, match="num_threads is pinned to 1"):
        check_grid("seismic", {"num_threads": ["4"]})
    with pytest.raises(SpladekitError, match="no default grid for exact"):
        check_grid("exact", None)


def test_cli_writes_the_report_the_plot_and_the_index_of_the_choice(collection, tmp_path, cli):
    documents, queries = collection
    Vectors(documents, [f"d{i}" for i in range(2000)]).save(tmp_path / "vectors")
    Vectors(queries, [f"q{i}" for i in range(40)]).save(tmp_path / "queries")
    arguments = ["tune-index", tmp_path / "vectors", "--query-vectors", tmp_path / "queries", "--backend", "seismic"]
    arguments += [
        "--grid",
        "query_cut=1,4,10",
        "--grid",
        "heap_factor=0.6,1.0",
        "--recall-target",
        "0.5",
        "--recall-target",
        "0.9",
    ]
    done = cli(*arguments, "--index-recall-target", "0.9", "--output", tmp_path / "tuned", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "tuned" / "tuning.json").read_text())
    assert json.loads(done.stdout)["chosen"] == report["chosen"] and len(report["points"]) == 6
    assert (tmp_path / "tuned" / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    chosen = report["chosen"]["0.9"]
    index = load_index(tmp_path / "tuned" / "index")
    assert {name: index.params[name] for name in chosen["search"]} == chosen["search"]
    assert (
        index.doc_ids[:2] == ["d0", "d1"]
        and index.params
        and "tuning" in json.loads((tmp_path / "tuned" / "index" / "manifest.json").read_text())["meta"]
    )
    again = cli(*arguments, "--index-recall-target", "0.9", "--output", tmp_path / "tuned")
    assert again.returncode == 2 and "already exists" in again.stderr
