"""PISA (``pyterrier-pisa``'s native ``_pisathon`` module): dynamic pruning (block-max WAND, MaxScore…) over
quantized impacts, rank-safe.

Quantization (``scale``, recorded in the manifest): a document weight d_v becomes the integer impact
``d̂_v = round(d_v · scale)`` and a query weight ``q̂_v = round(q_v · scale)`` (``vectors_ops.quantize``;
weights that round to 0 are dropped). PISA's ``quantized`` scorer ranks by ``Σ_v q̂_v · d̂_v`` (a query term
of weight q̂ is passed as q̂ repetitions, which PISA counts into its query weight); the scores returned are
``Σ_v q̂_v · d̂_v / scale²`` ≈ ``q · d``, each weight off by at most ``0.5 / scale``. The default scale is
derived from the documents (:func:`spladekit.common.sparse.impact_scale`), not the customary 100
(docs/results/impact-scale). PISA adds in float32, so a score is that exact integer below 2²⁴ and past it rounded
to float32 (a relative 2⁻²⁴, far below the quantization's own error).

Rank safety and ties: every ``algorithm`` offered returns the exact top-k of the quantized scores except
at a tie: PISA's top-k heap orders by score alone, so of several documents tied at the k-th score it keeps
an arbitrary subset (not the lowest rows, on most queries of a heavily tied test collection). We therefore
ask for k + 1 hits and, while the (k + 1)-th ties with the k-th, ask that query again with twice as many;
then the top-k ordered by (score descending, row ascending) equals brute force over the quantized vectors
(``tests/index/test_pisa.py``).

Terms and documents: term v is the PISA term ``str(v)`` zero-padded to the width of the vocabulary (so
PISA's sorted lexicon is in vocabulary order) and document row r is PISA document r (name ``str(r)``).

Building streams the row blocks: each block is quantized and inverted with scipy and its postings written
to a staging folder; the blocks are then merged, a chunk of terms at a time, into PISA's uncompressed
collection (``inv.docs`` / ``inv.freqs`` / ``inv.sizes``, terms with postings only), from which PISA's
``prepare_index`` writes the block-max bounds and the compressed index. Python holds one block, or one
chunk of 2²⁴ postings, at a time (no whole-corpus matrix); the staging files take about 16 bytes per
posting at their peak. The index folder keeps what searching reads: ``fwd.termlex``, ``fwd.doclex``, the
block-max file ``quantized.q0.bmw.BLOCK_SIZE`` and the compressed index ``quantized.q0.bmw.BLOCK_SIZE.ENCODING``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.common.errors import SpladekitError
from spladekit.common.scratch import Scratch, scratch_folder
from spladekit.common.sparse import UINT32_MAX, ImpactRange, best_first, check_rounded_away, quantize, quantize_impacts
from spladekit.index.base import (
    IMPACT_SCALE_HELP,
    FolderSearcher,
    SearchResult,
    check_documents,
    resolve_impact_scale,
)
from spladekit.index.params import Param

logger = logging.getLogger("spladekit")

TERMLEX, DOCLEX = "fwd.termlex", "fwd.doclex"
IMPACTS = ImpactRange("a pisa index", "--param scale", UINT32_MAX, UINT32_MAX)  # uint32 both
BUILD_ROWS = 1 << 16  # documents per slice when building from one matrix
QUERY_IMPACT_MAX = 1 << 16  # pyterrier-pisa passes a query weight q as q repetitions of the term
ENCODINGS = (
    "block_simdbp",
    "block_optpfor",
    "block_varintg8iu",
    "block_streamvbyte",
    "block_maskedvbyte",
    "block_interpolative",
    "block_qmx",
    "block_varintgb",
    "block_simple8b",
    "block_simple16",
    "ef",
    "single",
    "pefuniform",
    "pefopt",
)
# Disjunctive and rank-safe only: PISA's ranked_and variants keep documents holding every query term, and
# ranked_or_taat_lazy drops the query weights.
ALGORITHMS = ("maxscore", "block_max_maxscore", "block_max_wand", "wand", "ranked_or")
PARAMS = (
    Param("scale", float, None, IMPACT_SCALE_HELP, minimum=0, exclusive_minimum=True, maximum=1e8),
    Param("block_size", int, 64, "postings per block of the block-max score bounds", minimum=1, maximum=2**20),
    Param("encoding", str, "block_simdbp", "posting list compression", choices=ENCODINGS),
    Param(
        "algorithm",
        str,
        "maxscore",
        "query processing, all rank-safe (ranked_or: no pruning); MaxScore is "
        "the fastest on SPLADE queries (docs/benchmarks.md)",
        role="search",
        choices=ALGORITHMS,
    ),
    Param("threads", int, 1, "threads searching a query batch (0: all cores)", role="search", minimum=0),
)


@functools.cache
def _pisathon() -> ModuleType:
    """pyterrier-pisa's native module, loaded on its own: importing the ``pyterrier_pisa`` package first
    imports PyTerrier, ir_datasets and pandas (1.4 s here) for a DataFrame layer we do not use."""
    if "pyterrier_pisa._pisathon" in sys.modules:
        return sys.modules["pyterrier_pisa._pisathon"]
    package = importlib.util.find_spec("pyterrier_pisa")
    if package is None or not package.submodule_search_locations:
        raise SpladekitError("the pisa backend needs pyterrier-pisa: pip install 'spladekit[index]'")
    folder = Path(next(iter(package.submodule_search_locations)))
    found = [
        folder / f"_pisathon{suffix}"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (folder / f"_pisathon{suffix}").is_file()
    ]
    if not found:
        raise SpladekitError(f"pyterrier-pisa in {folder} has no native _pisathon module; reinstall it")
    loader = importlib.machinery.ExtensionFileLoader("pyterrier_pisa._pisathon", str(found[0]))
    spec = importlib.util.spec_from_file_location("pyterrier_pisa._pisathon", found[0], loader=loader)
    assert spec is not None  # for mypy: a loader was given
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@contextlib.contextmanager
def _native_output_to_log() -> Iterator[None]:
    """PISA's C++ code prints ``[info]`` lines and progress bars straight to file descriptors 1 and 2: send
    both to a temporary file for the duration, then to the debug log, so that stdout stays clean for
    ``--json`` and stderr for spladekit's own messages."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(1), os.dup(2)
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            libc.fflush(None)  # C stdio buffers of a redirected stdout must land in the sink, not after it
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            for line in sink.read().decode("utf-8", "replace").replace("\r", "\n").splitlines():
                if line.strip():
                    logger.debug("pisa: %s", line.strip())


def term_names(vocab_size: int) -> list[str]:
    """PISA term of each vocabulary id: the id zero-padded to one width, so sorted names are in id order."""
    width = len(str(max(vocab_size - 1, 0)))
    return [str(v).zfill(width) for v in range(vocab_size)]


def _write_sequences(handle: BinaryIO, lengths: np.ndarray, values: np.ndarray) -> None:
    """Append PISA binary sequences (each: its length, then its values; all uint32) of consecutive
    ``lengths`` cut from ``values``."""
    out = np.empty(len(lengths) + len(values), dtype=np.uint32)
    heads = np.concatenate([[0], np.cumsum(lengths[:-1])]).astype(np.int64) + np.arange(len(lengths))
    out[heads] = lengths
    body = np.ones(len(out), dtype=bool)
    body[heads] = False
    out[body] = values
    handle.write(out.tobytes())


class _Postings:
    """Inverted row blocks, kept on disk in a staging folder, merged into PISA's uncompressed collection.

    Block b is stored column-major (its CSC arrays: ``block.b.docs`` global document ids, ``block.b.freqs``
    impacts, ``block.b.ptr.npy`` the term offsets); ``merge`` writes ``inv.docs`` / ``inv.freqs`` term by
    term with each term's postings in block order (so document ids ascend), a chunk of terms at a time.
    PISA's own ``merge_inv`` is not used: it refuses a term without postings, and which terms have
    postings is only known after the last block."""

    CHUNK = 1 << 24  # postings merged at a time (about 16 bytes each in memory)

    def __init__(self, folder: Path, vocab_size: int) -> None:
        self.folder = folder
        self.frequency = np.zeros(vocab_size, dtype=np.int64)  # documents per term
        self.blocks = 0
        self.n_docs = 0
        self.sizes = (folder / "inv.sizes").open("wb")
        self.sizes.write(np.zeros(1, dtype=np.uint32).tobytes())  # the document count, written at the end

    def add(self, impacts: sp.csr_matrix) -> None:
        postings = impacts.tocsc()
        postings.sort_indices()
        base = self.folder / f"block.{self.blocks}"
        (postings.indices.astype(np.uint32) + np.uint32(self.n_docs)).tofile(f"{base}.docs")
        postings.data.astype(np.uint32).tofile(f"{base}.freqs")
        np.save(f"{base}.ptr.npy", postings.indptr.astype(np.int64), allow_pickle=False)
        lengths = np.asarray(impacts.sum(axis=1, dtype=np.int64)).ravel()  # within uint32: quantize_impacts
        self.sizes.write(lengths.astype(np.uint32).tobytes())
        self.frequency += np.diff(postings.indptr)
        self.blocks += 1
        self.n_docs += impacts.shape[0]

    def merge(self) -> None:
        """``inv.docs`` (after the one-value sequence [n_docs]), ``inv.freqs`` and ``inv.sizes``, terms with
        postings only; the block files are removed."""
        self.sizes.seek(0)
        self.sizes.write(np.array([self.n_docs], dtype=np.uint32).tobytes())
        self.sizes.close()
        ends = np.cumsum(self.frequency)
        with (self.folder / "inv.docs").open("wb") as docs, (self.folder / "inv.freqs").open("wb") as freqs:
            docs.write(np.array([1, self.n_docs], dtype=np.uint32).tobytes())
            first = 0
            while first < len(ends):
                done = ends[first - 1] if first else 0
                last = max(first + 1, int(np.searchsorted(ends, done + self.CHUNK, side="right")))
                self._merge_terms(first, last, docs, freqs)
                first = last
        for block in range(self.blocks):
            for suffix in ("docs", "freqs", "ptr.npy"):
                (self.folder / f"block.{block}.{suffix}").unlink()

    def _merge_terms(self, first: int, last: int, docs: BinaryIO, freqs: BinaryIO) -> None:
        """Terms ``first`` … ``last - 1``: the posting of block b for term t goes after those of the earlier
        blocks for t, at ``start[t] + earlier[t] + (its rank within block b's list of t)``."""
        frequency = self.frequency[first:last]
        start = np.concatenate([[0], np.cumsum(frequency)[:-1]])
        earlier = np.zeros(last - first, dtype=np.int64)
        merged_docs = np.empty(int(frequency.sum()), dtype=np.uint32)
        merged_freqs = np.empty_like(merged_docs)
        for block in range(self.blocks):
            base = self.folder / f"block.{block}"
            offsets = np.load(f"{base}.ptr.npy", mmap_mode="r", allow_pickle=False)[first : last + 1]
            counts = np.diff(offsets)
            low, high = int(offsets[0]), int(offsets[-1])
            if high > low:
                target = np.repeat(start + earlier - (offsets[:-1] - low), counts) + np.arange(high - low)
                merged_docs[target] = np.fromfile(f"{base}.docs", dtype=np.uint32, count=high - low, offset=4 * low)
                merged_freqs[target] = np.fromfile(f"{base}.freqs", dtype=np.uint32, count=high - low, offset=4 * low)
            earlier += counts
        kept = frequency[frequency > 0]
        _write_sequences(docs, kept, merged_docs)
        _write_sequences(freqs, kept, merged_freqs)


def _row_slices(matrix: sp.csr_matrix, rows: int) -> Iterator[sp.csr_matrix]:
    matrix = sp.csr_matrix(matrix)
    for start in range(0, matrix.shape[0], rows):
        yield matrix[start : start + rows]


class PisaSearcher(FolderSearcher):
    name = "pisa"
    summary = "PISA: MaxScore / block-max WAND over quantized impacts, rank-safe"
    declared_params = PARAMS

    @classmethod
    def check_prerequisites(cls, params: dict) -> None:
        """pyterrier-pisa's native module (:func:`_pisathon`)."""
        _pisathon()

    def __init__(
        self,
        folder: Path,
        vocab_size: int,
        n_docs: int,
        params: dict,
        staging: Scratch | None = None,
    ) -> None:
        super().__init__(folder, vocab_size, n_docs, params, staging)
        self.names = term_names(vocab_size)
        self.context = _pisathon().RetrievalContext()
        with _native_output_to_log():
            _pisathon().prepare_index(
                self.context,
                str(folder),
                params["encoding"],
                "quantized",
                "",
                block_size=params["block_size"],
                quantize=0,
                stop_fname="",
            )

    @classmethod
    def index_files(cls, params: dict) -> tuple[str, str]:
        """The block-max file and the compressed index, named by PISA from the parameters."""
        bounds = f"quantized.q0.bmw.{params['block_size']}"
        return bounds, f"{bounds}.{params['encoding']}"

    @classmethod
    def build(cls, documents: sp.csr_matrix, **params: Any) -> PisaSearcher:
        """:meth:`build_from_blocks` over row slices of the matrix, so that the checked, quantized and
        inverted copies are of one slice at a time."""
        params = resolve_impact_scale(cls.check_params(params), [documents])  # the slices pass once
        return cls.build_from_blocks(_row_slices(documents, BUILD_ROWS), **params)

    @classmethod
    def build_from_blocks(
        cls, blocks: Iterable[sp.csr_matrix], show_progress: bool = False, **params: Any
    ) -> PisaSearcher:
        """Index consecutive row blocks (rows numbered across blocks) without stacking them."""
        cls.check_prerequisites(params)  # before any work (deriving the scale reads the documents)
        params = resolve_impact_scale(cls.defaults() | cls.check_params(params), blocks)
        staging = scratch_folder("pisa")  # the inverted blocks, then the index: removed with the searcher
        try:
            return cls._index(blocks, staging, params, show_progress)
        except BaseException:
            staging.cleanup()
            raise

    @classmethod
    def _index(
        cls, blocks: Iterable[sp.csr_matrix], staging: Scratch, params: dict, show_progress: bool
    ) -> PisaSearcher:
        """The searcher of the blocks' index, built in ``staging`` (which it then holds)."""
        folder = staging.path
        postings: _Postings | None = None
        weights = dropped = 0
        for block in tqdm(blocks, desc="pisa invert", unit="block", disable=not show_progress, leave=False):
            block = check_documents(block)
            if postings is None:
                postings = _Postings(folder, block.shape[1])
            elif block.shape[1] != len(postings.frequency):
                raise SpladekitError(
                    f"document blocks differ in vocabulary: {block.shape[1]} columns after {len(postings.frequency)}"
                )
            impacts = quantize_impacts(block, params["scale"], IMPACTS, first_row=postings.n_docs)
            weights, dropped = weights + block.nnz, dropped + block.nnz - impacts.nnz
            postings.add(impacts)
        check_rounded_away(weights, dropped, params["scale"], "pisa index")
        if postings is None or not postings.frequency.any():
            raise SpladekitError(
                "cannot build a PISA index: no document has a weight x scale of 0.5 or more "
                f"(scale={params['scale']:g}; every document vector is empty or too light)"
            )
        postings.merge()
        vocab_size, n_docs = len(postings.frequency), postings.n_docs
        names = term_names(vocab_size)
        (folder / "fwd.terms").write_text("".join(f"{names[v]}\n" for v in np.flatnonzero(postings.frequency)))
        with (folder / "fwd.documents").open("w") as handle:
            for start in range(0, n_docs, 1 << 16):
                handle.write("".join(f"{row}\n" for row in range(start, min(start + (1 << 16), n_docs))))
        with _native_output_to_log():
            _pisathon().build_binlex(str(folder / "fwd.terms"), str(folder / TERMLEX))
            _pisathon().build_binlex(str(folder / "fwd.documents"), str(folder / DOCLEX))
        searcher = cls(folder, vocab_size, n_docs, params, staging)  # writes the block-max data and compresses
        for name in ("inv.docs", "inv.freqs", "inv.sizes", "fwd.terms", "fwd.documents"):
            (folder / name).unlink()
        return searcher

    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """``params``: algorithm, threads (default: the index's). Scores: ``Σ q̂_v d̂_v / scale²``."""
        settings = self.search_settings(params)
        k = self.result_size(k)
        impacts = quantize(self.check_queries(queries), self.params["scale"])
        if impacts.nnz and impacts.data.max() > QUERY_IMPACT_MAX:
            raise SpladekitError(
                f"a query weight x scale is over {QUERY_IMPACT_MAX:,} (PISA takes it as that many "
                f"repetitions of the term): weight {impacts.data.max() / self.params['scale']:g}, "
                f"scale {self.params['scale']:g}"
            )
        threads = settings["threads"] or os.cpu_count() or 1
        hits: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0, np.int64), np.empty(0))] * impacts.shape[0]
        pending, wanted = np.arange(impacts.shape[0]), min(k + 1, self.n_docs)
        while len(pending):
            tied = []
            for query, (rows, scores) in zip(
                pending, self._retrieve(impacts[pending], wanted, settings["algorithm"], threads)
            ):
                order = best_first(rows, scores)
                hits[query] = rows[order][:k], scores[order][:k]
                if len(rows) == wanted < self.n_docs and scores[order[-1]] == scores[order[k - 1]]:
                    tied.append(query)  # the k-th score's tie group may go on past the hits PISA kept
            pending, wanted = np.array(tied, dtype=np.int64), min(2 * wanted, self.n_docs)
        scale2 = self.params["scale"] ** 2
        return SearchResult.from_hits([(rows, (scores / scale2).astype(np.float32)) for rows, scores in hits], k)

    def _retrieve(
        self, impacts: sp.csr_matrix, k: int, algorithm: str, threads: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """PISA's top-``k`` (rows, integer scores as float64) of each quantized query, in query order."""
        n = impacts.shape[0]
        queries = []
        for i in range(n):
            low, high = impacts.indptr[i], impacts.indptr[i + 1]
            queries.append(
                (
                    i,
                    {
                        self.names[v]: float(w)
                        for v, w in zip(impacts.indices[low:high].tolist(), impacts.data[low:high].tolist())
                    },
                )
            )
        qidxs, ranks = np.empty(n * k, np.int32), np.empty(n * k, np.int32)
        docnos, scores = np.empty(n * k, object), np.empty(n * k, np.float32)
        with _native_output_to_log():
            size = _pisathon().retrieve(
                self.context,
                algorithm,
                queries,
                k=k,
                threads=threads,
                pretokenised=True,
                query_weighted=1,
                result_qidxs=qidxs,
                result_docnos=docnos,
                result_ranks=ranks,
                result_scores=scores,
            )
        order = np.argsort(qidxs[:size], kind="stable")  # with threads, queries finish in any order
        rows = np.array(docnos[:size][order], dtype=np.int64)
        found = scores[:size][order].astype(np.float64)
        bounds = np.concatenate([[0], np.cumsum(np.bincount(qidxs[:size], minlength=n))])
        return [(rows[bounds[i] : bounds[i + 1]], found[bounds[i] : bounds[i + 1]]) for i in range(n)]

    def write_files(self, folder: Path) -> None:
        for name in self.stored_files(self.params):
            shutil.copyfile(self.folder / name, folder / name)

    @classmethod
    def stored_files(cls, params: dict) -> tuple[str, ...]:
        return (TERMLEX, DOCLEX, *cls.index_files(params))

    @classmethod
    def read_files(cls, folder: Path, manifest: dict) -> PisaSearcher:
        return cls(folder, manifest["vocab_size"], manifest["n_docs"], cls.defaults() | manifest["params"])
