"""Recall-targeted tuning of a backend on the model's own vectors and queries (``spladekit tune-index``).

Users of Seismic, BMP or PISA otherwise grid-search by hand (Seismic publishes its best configurations per recall
for MS MARCO only). For every build configuration of the grid the index is built once; every search configuration
is then timed over all the queries on one thread (µs per query: the best of ``repeats`` passes' wall-clock time /
queries, after one untimed warm-up pass over a few queries) and scored by recall@k against the exact top-k
(``|found ∩ exact| / |exact|``, averaged over the queries that have an exact hit). The report keeps every point, the
recall–latency frontier (the points no other point beats on both) and, per recall target, the fastest configuration
that reaches it; exact search is timed the same way, as the latency any configuration has to beat.

Timings are of this machine under its load at the time: compare points of one run, not runs of two machines.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.common.errors import SpladekitError
from spladekit.index import ExactSearcher, backend_class, check_backend
from spladekit.index.base import Searcher
from spladekit.index.pisa import ALGORITHMS

TARGETS = (0.90, 0.95, 0.99)
WARM_UP_QUERIES = 8
# name -> the documented parameters worth sweeping, with values around each backend's defaults
GRIDS: dict[str, dict[str, Iterable[Any]]] = {
    "seismic": {
        "n_postings": (1000, 2000, 3500),
        "summary_energy": (0.2, 0.4),
        "query_cut": (3, 5, 8, 12, 20),
        "heap_factor": (0.5, 0.7, 0.8, 0.9, 1.0),
    },
    "bmp": {"bsize": (16, 32, 64), "alpha": (0.5, 0.7, 0.8, 0.9, 1.0), "beta": (0.5, 0.75, 1.0)},
    "pisa": {"block_size": (32, 64, 128), "algorithm": ALGORITHMS},
}
THREAD_PARAMS = ("num_threads", "threads")  # pinned to 1: µs per query on one thread


@dataclass(frozen=True)
class Point:
    build: dict[str, Any]
    search: dict[str, Any]
    recall: float
    us_per_query: float


@dataclass
class Tuning:
    backend: str
    k: int
    queries: int
    docs: int
    points: list[Point] = field(default_factory=list)
    targets: tuple[float, ...] = TARGETS
    exact_us_per_query: float | None = None

    def frontier(self) -> list[Point]:
        """The points no other point beats on both recall and latency, fastest first."""
        best: list[Point] = []
        for point in sorted(self.points, key=lambda p: (p.us_per_query, -p.recall)):
            if not best or point.recall > best[-1].recall:
                best.append(point)
        return best

    def chosen(self) -> dict[str, Point | None]:
        """Per target (``"0.95"``): the fastest point whose recall reaches it (None: no point does)."""
        return {
            f"{target:g}": min(
                (point for point in self.points if point.recall >= target),
                key=lambda p: p.us_per_query,
                default=None,
            )
            for target in self.targets
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "k": self.k,
            "queries": self.queries,
            "docs": self.docs,
            "exact_us_per_query": self.exact_us_per_query,
            "points": [asdict(point) for point in self.points],
            "frontier": [asdict(point) for point in self.frontier()],
            "chosen": {target: None if point is None else asdict(point) for target, point in self.chosen().items()},
        }


def check_grid(backend: str, grid: Mapping[str, Iterable[Any]] | None) -> tuple[dict[str, list], dict[str, list]]:
    """The (build, search) grids, each value typed and checked by the backend's declarations; unset: ``GRIDS``.
    What the backend runs on is checked too (:func:`spladekit.index.check_backend`): tuning and the CLI call this
    before reading the vectors or timing the exact search."""
    check_backend(backend)
    searcher = backend_class(backend)
    if grid is None and backend not in GRIDS:
        raise SpladekitError(f"no default grid for {backend}; give one (--grid NAME=V1,V2…) or use {', '.join(GRIDS)}")
    chosen: Mapping[str, Iterable[Any]] = GRIDS[backend] if grid is None else grid
    declared = {param.name: param for param in searcher.declared_params}
    build: dict[str, list] = {}
    search: dict[str, list] = {}
    for name, values in chosen.items():
        if name in THREAD_PARAMS:
            raise SpladekitError(f"{name} is pinned to 1 while tuning (latency on one thread)")
        values = list(values)
        if not values:
            raise SpladekitError(f"grid {name}: no values")
        checked = [searcher.check_params({name: value})[name] for value in values]
        (search if declared[name].role == "search" else build)[name] = checked
    return build, search


def _combinations(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean over queries with an exact hit of ``|found ∩ exact| / |exact|`` (rows of document rows, -1 = none)."""
    recalls = [
        len(np.intersect1d(mine[mine >= 0], theirs[theirs >= 0])) / np.count_nonzero(theirs >= 0)
        for mine, theirs in zip(found, exact)
        if (theirs >= 0).any()
    ]
    return float(np.mean(recalls)) if recalls else 1.0


def _single_thread(searcher: type[Searcher]) -> dict[str, int]:
    return {param.name: 1 for param in searcher.declared_params if param.name in THREAD_PARAMS}


def timed_search(index: Searcher, queries: sp.csr_matrix, k: int, repeats: int, **params: Any) -> tuple[Any, float]:
    """(the result, µs per query: the best of ``repeats`` timed passes after a warm-up on a few queries)."""
    index.search(queries[:WARM_UP_QUERIES], k=k, **params)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        found = index.search(queries, k=k, **params)
        best = min(best, time.perf_counter() - started)
    return found, round(1e6 * best / max(1, queries.shape[0]), 2)


def tune(
    documents: sp.csr_matrix,
    queries: sp.csr_matrix,
    backend: str,
    grid: Mapping[str, Iterable[Any]] | None = None,
    k: int = 10,
    targets: tuple[float, ...] = TARGETS,
    repeats: int = 3,
    show_progress: bool = True,
) -> Tuning:
    """Every configuration of ``grid`` (default: :data:`GRIDS`) on ``documents`` and ``queries``; see the module."""
    searcher_class = backend_class(backend)
    build_grid, search_grid = check_grid(backend, grid)
    if not all(0 < target <= 1 for target in targets):
        raise SpladekitError(f"recall targets must be in (0, 1], got {', '.join(map(str, targets))}")
    if isinstance(k, bool) or k < 1:
        raise SpladekitError(f"k must be an integer >= 1, got {k!r}")
    if isinstance(repeats, bool) or repeats < 1:
        raise SpladekitError(f"repeats must be an integer >= 1, got {repeats!r}")
    # recall is averaged over the queries with an exact hit, and is 1.0 over none: every target would be "reached"
    if queries.shape[0] == 0:
        raise SpladekitError("no query vectors: recall@k needs queries (encode some with --side query)")
    if documents.shape[0] == 0:
        raise SpladekitError("no document vectors: nothing to search")
    single = _single_thread(searcher_class)
    found, exact_us = timed_search(ExactSearcher.build(documents), queries, k, repeats, num_threads=1)
    exact = found.doc_indices
    if not (exact >= 0).any():
        raise SpladekitError(
            f"none of the {queries.shape[0]:,} queries shares a term with the documents: recall@k against exact "
            "search measures nothing (are the queries encoded with the documents' model?)"
        )
    tuning = Tuning(
        backend, k, queries.shape[0], documents.shape[0], targets=tuple(targets), exact_us_per_query=exact_us
    )
    builds, searches = _combinations(build_grid), _combinations(search_grid)
    bar = tqdm(total=len(builds) * len(searches), desc=f"tuning {backend}", unit="config", disable=not show_progress)
    for build in builds:
        with searcher_class.build(documents, **build) as index:  # built with every core: only searches are timed
            for search in searches:
                found, us = timed_search(index, queries, k, repeats, **search, **single)
                tuning.points.append(Point(build, search, recall_at_k(found.doc_indices, exact), us))
                bar.update()
    bar.close()
    return tuning


def plot_frontier(tuning: Tuning, path: Any) -> None:
    """Recall@k against µs per query: every point, the frontier as a line, each target's choice marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    axes.scatter([p.us_per_query for p in tuning.points], [p.recall for p in tuning.points], s=10, alpha=0.4)
    frontier = tuning.frontier()
    axes.plot([p.us_per_query for p in frontier], [p.recall for p in frontier], "-o", markersize=3, label="frontier")
    if tuning.exact_us_per_query:
        axes.axvline(tuning.exact_us_per_query, color="black", linewidth=0.8, linestyle="--", label="exact")
    for target, point in tuning.chosen().items():
        axes.axhline(float(target), color="grey", linewidth=0.5, linestyle=":")
        if point is not None:
            axes.annotate(f"{target}", (point.us_per_query, point.recall), textcoords="offset points", xytext=(4, -10))
    axes.set_xscale("log")
    axes.set_xlabel("µs per query (one thread)")
    axes.set_ylabel(f"recall@{tuning.k} of exact")
    axes.set_title(f"{tuning.backend}: {tuning.docs:,} documents, {tuning.queries:,} queries")
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def tune_folders(
    vectors: str | Path,
    query_vectors: str | Path,
    output: str | Path,
    backend: str = "seismic",
    grid: Mapping[str, Iterable[Any]] | None = None,
    k: int = 10,
    targets: tuple[float, ...] = TARGETS,
    index_target: float = 0.95,
    repeats: int = 3,
    write_index: bool = True,
    overwrite: bool = False,
) -> tuple[Tuning, dict]:
    """What ``spladekit tune-index`` does: :func:`tune` on the document and query vectors folders, then into the
    folder ``output`` (written atomically) ``tuning.json``, ``frontier.png`` and, with ``write_index``, ``index/``
    built with the fastest configuration reaching ``index_target`` (when one does). Returns the tuning and the
    report written as ``tuning.json``."""
    from spladekit.common.atomic import atomic_file, open_output
    from spladekit.vectors.artifact import Vectors

    check_grid(backend, grid)  # before reading anything
    if not all(0 < value <= 1 for value in (*targets, index_target)):
        raise SpladekitError("recall targets (--recall-target, --index-recall-target) must be in (0, 1]")
    if write_index and index_target not in targets:
        raise SpladekitError(
            f"--index-recall-target {index_target:g} is not one of the targets {', '.join(map(str, targets))}"
        )
    with open_output(output, folder=True, overwrite=overwrite) as opened:
        staged = opened.staging
        documents, queries = Vectors.load(vectors), Vectors.load(query_vectors)
        if documents.vocab_size != queries.vocab_size:
            raise SpladekitError(
                f"{query_vectors}: {queries.vocab_size} dimensions, the documents {documents.vocab_size} "
                "(encode both with one model)"
            )
        tuning = tune(documents.matrix, queries.matrix, backend, grid, k=k, targets=targets, repeats=repeats)
        report = {"vectors": str(vectors), "query_vectors": str(query_vectors), **tuning.to_dict()}
        plot_frontier(tuning, staged / "frontier.png")
        chosen = tuning.chosen().get(f"{index_target:g}")
        report["index"] = None
        if write_index and chosen is not None:
            with backend_class(backend).build(documents.matrix, **chosen.build, **chosen.search) as searcher:
                searcher.doc_ids = documents.ids
                searcher.save(
                    staged / "index",
                    meta={
                        "vectors": str(vectors),
                        "model": documents.meta.get("model"),
                        "tuning": report["chosen"],
                        "tuned_for_recall": index_target,
                    },
                )
            report["index"] = str(Path(output) / "index")
        with atomic_file(staged / "tuning.json") as stream:
            stream.write(json.dumps(report, indent=2, default=str) + "\n")
    return tuning, report
