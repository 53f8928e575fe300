"""PISA (``pyterrier-pisa``'s native ``_pisathon`` module): dynamic pruning (block-max WAND, MaxScore…) over
quantized impacts, rank-safe.

Quantization (``scale``, recorded in the manifest): a document weight d_v becomes the integer impact
``d̂_v = round(d_v · scale)`` and a query weight ``q̂_v = round(q_v · scale)`` (``vectors_ops.quantize``;
weights that round to 0 are dropped). PISA's ``quantized`` scorer ranks by ``Σ_v q̂_v · d̂_v`` (a query term
of weight q̂ is passed as q̂ repetitions, which PISA counts into its query weight); the scores returned are
``Σ_v q̂_v · d̂_v / scale²`` ≈ ``q · d``, each weight off by at most ``0.5 / scale``. PISA adds in float32,
so a score is that exact integer while it stays below 2²⁴ (16,777,216; with the default scale 100 a
product of two weights of 3 is 90,000).

Rank safety and ties: every ``algorithm`` offered returns the exact top-k of the quantized scores except
at a tie: PISA's heap compares scores only and admits a document only when it beats the k-th score, so
of several documents tied at the k-th score an arbitrary subset is kept. We therefore ask for k + 1 hits
and, while the (k + 1)-th ties with the k-th, ask that query again with twice as many; then the top-k
ordered by (score descending, row ascending) equals brute force over the quantized vectors
(``tests/test_index_pisa.py``).

Terms and documents: term v is the PISA term ``str(v)`` zero-padded to the width of the vocabulary (so
PISA's sorted lexicon is in vocabulary order) and document row r is PISA document r (name ``str(r)``).

Building streams the row blocks: each block is inverted with scipy and written as one PISA batch
(``inv.batch.N.docs/.freqs/.sizes``: postings of every vocabulary term, global document ids); PISA's
``merge_inv`` joins the batches, terms without postings are dropped (PISA refuses empty lists), and
``prepare_index`` writes the block-max data and the compressed index. Python never holds more than one
block; the temporary files take up to about twice 8 bytes per posting. The index folder keeps what
searching reads: ``fwd.termlex``, ``fwd.doclex``, the block-max file ``quantized.q0.bmw.BLOCK_SIZE`` and
the compressed index ``quantized.q0.bmw.BLOCK_SIZE.ENCODING``.
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
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from spladekit.errors import SpladekitError
from spladekit.index.base import Searcher, SearchResult, check_documents
from spladekit.index.params import Param
from spladekit.vectors_ops import best_first, quantize

logger = logging.getLogger("spladekit")

TERMLEX, DOCLEX = "fwd.termlex", "fwd.doclex"
UINT32_MAX = 2**32 - 1  # PISA stores impacts and document lengths as uint32
ENCODINGS = ("block_simdbp", "block_optpfor", "block_varintg8iu", "block_streamvbyte", "block_maskedvbyte",
             "block_interpolative", "block_qmx", "block_varintgb", "block_simple8b", "block_simple16", "ef",
             "single", "pefuniform", "pefopt")
# Disjunctive and rank-safe only: PISA's ranked_and variants keep documents holding every query term, and
# ranked_or_taat_lazy drops the query weights.
ALGORITHMS = ("block_max_wand", "block_max_maxscore", "maxscore", "wand", "ranked_or")
PARAMS = (
    Param("scale", float, 100.0, "quantization: weight w -> integer impact round(w x scale), documents and "
          "queries alike; scores returned are sum(q_impact x d_impact) / scale^2", minimum=0,
          exclusive_minimum=True, maximum=10_000),
    Param("block_size", int, 64, "postings per block of the block-max score bounds", minimum=1, maximum=2**20),
    Param("encoding", str, "block_simdbp", "posting list compression", choices=ENCODINGS),
    Param("algorithm", str, "block_max_wand", "query processing, all rank-safe (ranked_or: no pruning)",
          role="search", choices=ALGORITHMS),
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
    found = [folder / f"_pisathon{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES
             if (folder / f"_pisathon{suffix}").is_file()]
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


def _write_sequences(path: Path, lengths: np.ndarray, values: np.ndarray, header: list[int] | None = None) -> None:
    """PISA's binary collection: each sequence is its length then its values, all uint32 (optionally after a
    one-value header sequence)."""
    out = np.empty(len(lengths) + len(values), dtype=np.uint32)
    starts = np.concatenate([[0], np.cumsum(lengths[:-1])]).astype(np.int64) + np.arange(len(lengths))
    out[starts] = lengths
    mask = np.ones(len(out), dtype=bool)
    mask[starts] = False
    out[mask] = values
    with path.open("wb") as handle:
        if header is not None:
            handle.write(np.array([len(header), *header], dtype=np.uint32).tobytes())
        handle.write(out.tobytes())


def _write_batch(folder: Path, number: int, impacts: sp.csr_matrix, first_row: int) -> None:
    """One block as PISA batch ``number``: the posting list of every vocabulary term (empty ones included,
    as ``merge_inv`` expects the same terms in every batch), global document ids, and document lengths."""
    postings = impacts.tocsc()
    postings.sort_indices()
    lengths = np.diff(postings.indptr)
    base = folder / f"inv.batch.{number}"
    _write_sequences(Path(f"{base}.docs"), lengths, postings.indices.astype(np.int64) + first_row,
                     header=[impacts.shape[0]])
    _write_sequences(Path(f"{base}.freqs"), lengths, postings.data)
    sizes = np.asarray(impacts.sum(axis=1, dtype=np.int64)).ravel()
    if sizes.max(initial=0) > UINT32_MAX:
        raise SpladekitError(f"a document's total impact is over {UINT32_MAX:,} (PISA keeps it in 32 bits); "
                             "lower the pisa scale")
    _write_sequences(Path(f"{base}.sizes"), np.array([len(sizes)]), sizes)


def _drop_empty_lists(folder: Path, document_frequency: np.ndarray) -> None:
    """Rewrite the merged ``inv.docs`` / ``inv.freqs`` without the terms that have no postings (their
    sequence is a lone 0), list by list through memory maps."""
    keep = np.flatnonzero(document_frequency)
    starts = np.concatenate([[0], np.cumsum(document_frequency + 1)[:-1]])
    for name, skip in (("inv.docs", 2), ("inv.freqs", 0)):  # inv.docs opens with the sequence [n_docs]
        source = folder / name
        merged = np.memmap(source, dtype=np.uint32, mode="r")
        with (folder / f"{name}.kept").open("wb") as out:
            out.write(merged[:skip].tobytes())
            for term in keep:
                start = skip + starts[term]
                out.write(merged[start : start + document_frequency[term] + 1].tobytes())
        del merged
        (folder / f"{name}.kept").replace(source)


class PisaSearcher(Searcher):
    name = "pisa"
    summary = "PISA: block-max WAND / MaxScore over quantized impacts, rank-safe"
    declared_params = PARAMS

    def __init__(self, folder: Path, vocab_size: int, n_docs: int, params: dict,
                 staging: tempfile.TemporaryDirectory[str] | None = None) -> None:
        self._staging = staging  # a freshly built index lives here as long as the searcher
        self.folder = folder
        self.vocab_size = vocab_size
        self.n_docs = n_docs
        self.params = params
        self.names = term_names(vocab_size)
        self.context = _pisathon().RetrievalContext()
        with _native_output_to_log():
            _pisathon().prepare_index(self.context, str(folder), params["encoding"], "quantized", "",
                                      block_size=params["block_size"], quantize=0, stop_fname="")

    @classmethod
    def index_files(cls, params: dict) -> tuple[str, str]:
        """The block-max file and the compressed index, named by PISA from the parameters."""
        bounds = f"quantized.q0.bmw.{params['block_size']}"
        return bounds, f"{bounds}.{params['encoding']}"

    @classmethod
    def build(cls, documents: sp.csr_matrix, **params: Any) -> PisaSearcher:
        return cls.build_from_blocks([documents], **params)

    @classmethod
    def build_from_blocks(cls, blocks: Iterable[sp.csr_matrix], show_progress: bool = False,
                          **params: Any) -> PisaSearcher:
        """Index consecutive row blocks (rows numbered across blocks) without stacking them."""
        params = cls.defaults() | cls.check_params(params)
        pisathon = _pisathon()
        staging = tempfile.TemporaryDirectory(prefix="spladekit-pisa-")
        folder = Path(staging.name)
        n_docs, batches, frequency = 0, 0, np.zeros(0, dtype=np.int64)
        vocab_size: int | None = None
        for block in tqdm(blocks, desc="pisa invert", unit="block", disable=not show_progress, leave=False):
            block = check_documents(block)
            if vocab_size is None:
                vocab_size, frequency = block.shape[1], np.zeros(block.shape[1], dtype=np.int64)
            elif block.shape[1] != vocab_size:
                raise SpladekitError(f"document blocks differ in vocabulary: {block.shape[1]} columns after "
                                     f"{vocab_size}")
            impacts = quantize(block, params["scale"])
            if impacts.nnz and impacts.data.max() > UINT32_MAX:
                raise SpladekitError(f"an impact is over {UINT32_MAX:,} (PISA keeps impacts in 32 bits); lower the "
                                     "pisa scale")
            impacts = impacts.astype(np.uint32)
            _write_batch(folder, batches, impacts, n_docs)
            frequency += np.bincount(impacts.indices, minlength=vocab_size)
            n_docs, batches = n_docs + block.shape[0], batches + 1
        if vocab_size is None or not frequency.any():
            raise SpladekitError("cannot build a PISA index: no document has a weight x scale of 0.5 or more "
                                 f"(scale={params['scale']:g}; every document vector is empty or too light)")
        with _native_output_to_log():
            pisathon.merge_inv(str(folder / "inv"), batches, vocab_size)
        for leftover in folder.glob("inv.batch.*"):
            leftover.unlink()
        _drop_empty_lists(folder, frequency)
        names = term_names(vocab_size)
        (folder / "fwd.terms").write_text("".join(f"{names[v]}\n" for v in np.flatnonzero(frequency)))
        with (folder / "fwd.documents").open("w") as handle:
            for start in range(0, n_docs, 1 << 16):
                handle.write("".join(f"{row}\n" for row in range(start, min(start + (1 << 16), n_docs))))
        with _native_output_to_log():
            pisathon.build_binlex(str(folder / "fwd.terms"), str(folder / TERMLEX))
            pisathon.build_binlex(str(folder / "fwd.documents"), str(folder / DOCLEX))
        searcher = cls(folder, vocab_size, n_docs, params, staging)  # writes the block-max data and compresses
        for name in ("inv.docs", "inv.freqs", "inv.sizes", "fwd.terms", "fwd.documents"):
            (folder / name).unlink()
        return searcher

    def search(self, queries: sp.csr_matrix, k: int = 10, **params: Any) -> SearchResult:
        """``params``: algorithm, threads (default: the index's). Scores: ``Σ q̂_v d̂_v / scale²``."""
        settings = self.search_settings(params)
        k = self.result_size(k)
        impacts = quantize(self.check_queries(queries), self.params["scale"])
        threads = settings["threads"] or os.cpu_count() or 1
        hits: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0, np.int64), np.empty(0))] * impacts.shape[0]
        pending, wanted = np.arange(impacts.shape[0]), min(k + 1, self.n_docs)
        while len(pending):
            tied = []
            for query, (rows, scores) in zip(pending, self._retrieve(impacts[pending], wanted, settings["algorithm"],
                                                                     threads)):
                order = best_first(rows, scores)
                hits[query] = rows[order][:k], scores[order][:k]
                if len(rows) == wanted < self.n_docs and scores[order[-1]] == scores[order[k - 1]]:
                    tied.append(query)  # the k-th score's tie group may go on past the hits PISA kept
            pending, wanted = np.array(tied, dtype=np.int64), min(2 * wanted, self.n_docs)
        scale2 = self.params["scale"] ** 2
        return SearchResult.from_hits([(rows, (scores / scale2).astype(np.float32)) for rows, scores in hits], k)

    def _retrieve(self, impacts: sp.csr_matrix, k: int, algorithm: str,
                  threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """PISA's top-``k`` (rows, integer scores as float64) of each quantized query, in query order."""
        n = impacts.shape[0]
        queries = []
        for i in range(n):
            low, high = impacts.indptr[i], impacts.indptr[i + 1]
            queries.append((i, {self.names[v]: float(w) for v, w in zip(impacts.indices[low:high].tolist(),
                                                                          impacts.data[low:high].tolist())}))
        qidxs, ranks = np.empty(n * k, np.int32), np.empty(n * k, np.int32)
        docnos, scores = np.empty(n * k, object), np.empty(n * k, np.float32)
        with _native_output_to_log():
            size = _pisathon().retrieve(self.context, algorithm, queries, k=k, threads=threads, pretokenised=True,
                                        query_weighted=1, result_qidxs=qidxs, result_docnos=docnos,
                                        result_ranks=ranks, result_scores=scores)
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
