"""What each engine's storage of the weights costs: a collection re-scored with the weights as the engine holds them,
against exact float32 search of the same vectors (``spladekit fidelity``).

Every target is a pair of maps, a document weight d → d' and a query weight q → q', taken from the engine's own code;
the collection is then searched exactly (``Σ q'·d'``, ties by lower row) and scored, and the report gives each
measure's drift from float32 and how much of each query's top-10 is kept:

* ``lucene-9bit`` — Elasticsearch and OpenSearch ``rank_features``, Elasticsearch ``sparse_vector`` (Lucene's
  ``FeatureField``): d' = d with the low 15 bits of its float32 dropped (``Float.floatToIntBits(d) >>> 15`` is
  stored as the term frequency: 9 significant bits, a relative error under 2⁻⁸); q' = q (a float boost).
* ``opensearch-byte`` — OpenSearch ≥ 3.3 ``sparse_vector`` (SEISMIC): neural-search's ``ByteQuantizer``,
  d' = round(min(d, c_ingest) · 255 / c_ingest) and q' = round(min(q, c_search) · 255 / c_search), Java's
  round-half-up, with the field's ``quantization_ceiling_ingest`` (default 3) and ``quantization_ceiling_search``
  (default 16); a document weight above the ingest ceiling is clipped to it. Swept: the ingest ceiling.
* ``qdrant-uint8`` — Qdrant ``datatype=uint8`` (``QuantizedU8``): per term, over its postings, m = min,
  Δ = (max − m)/255, d' = m + round((d − m)/Δ)·Δ (d' = m when every posting has one weight); q' = q.
* ``qdrant-float16`` — Qdrant ``datatype=float16``: d' = float16(d); q' = q.
* ``impacts`` — CIFF, Anserini, PISA: integer impacts at a scale S, d' = round(d·S), q' = round(q·S) (weights that
  round to 0 are dropped). Swept: S, including spladekit's default, derived from the documents
  (:func:`spladekit.common.sparse.impact_scale`), and the engines' customary 100.
* ``bmp`` — run on BMP itself (``--backend bmp`` at alpha = beta = 1, which is rank-safe): its 8-bit,
  overflow-safe document impacts and its own query quantization.
* ``onnx-int8`` — not a storage but a model change: the collection encoded again through the dynamically quantized
  int8 ONNX graph (``spladekit export onnx --int8``), searched exactly. Only when named (it re-encodes the
  whole collection, without the cache).

For a swept target the report lists the values tried whose every measure of the collection (nDCG@10, RR@10, R@1000)
stays within ``tolerance`` (0.001) of float32, and the smallest value from which every larger one tried does too —
on this collection and model: a measurement, not a guarantee (drift is not monotone in the setting).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from spladekit.common.errors import SpladekitError
from spladekit.common.sparse import impact_scale, quantize
from spladekit.data.collections import Collection, reconcile
from spladekit.evaluation.evaluate import encode_corpus, score_hits
from spladekit.index import BmpSearcher, ExactSearcher
from spladekit.model.loading import RetrievalModel

LUCENE_DROPPED_BITS = 15  # FeatureField keeps floatToIntBits(value) >>> 15
OPENSEARCH_INGEST_CEILING, OPENSEARCH_SEARCH_CEILING = 3.0, 16.0  # neural-search's SparseConstants.Seismic
BYTE_LEVELS = 255
TOLERANCE = 0.001

Weights = Callable[[sp.csr_matrix, float], sp.csr_matrix]  # (matrix, the swept setting or 0) -> as the engine holds it


def _with_data(matrix: sp.csr_matrix, data: np.ndarray) -> sp.csr_matrix:
    """``matrix`` with its stored weights replaced; zeros (weights the engine drops) removed (on copies of the
    structure: removing zeros rewrites it in place)."""
    held = sp.csr_matrix((data.astype(np.float32), matrix.indices.copy(), matrix.indptr.copy()), shape=matrix.shape)
    held.eliminate_zeros()
    return held


def lucene_9bit(matrix: sp.csr_matrix, _: float = 0) -> sp.csr_matrix:
    """Lucene FeatureField: the float32's low 15 bits dropped (truncation, 9 significant bits)."""
    bits = matrix.data.astype(np.float32).view(np.uint32) >> LUCENE_DROPPED_BITS << LUCENE_DROPPED_BITS
    return _with_data(matrix, bits.view(np.float32))


def opensearch_byte(matrix: sp.csr_matrix, ceiling: float) -> sp.csr_matrix:
    """neural-search's ByteQuantizer: round(clip(w, 0, ceiling) · 255 / ceiling) in float32, half up."""
    ceiling32 = np.float32(ceiling)
    scaled = np.clip(matrix.data.astype(np.float32), 0, ceiling32) * np.float32(BYTE_LEVELS) / ceiling32
    return _with_data(matrix, np.floor(scaled + np.float32(0.5)))


def opensearch_query(matrix: sp.csr_matrix, _: float = 0) -> sp.csr_matrix:
    return opensearch_byte(matrix, OPENSEARCH_SEARCH_CEILING)


def qdrant_uint8(matrix: sp.csr_matrix, _: float = 0) -> sp.csr_matrix:
    """Qdrant's QuantizedU8, per term over its postings: min + round((w − min) / Δ) · Δ, Δ = (max − min) / 255."""
    columns = matrix.tocsc()
    columns.sort_indices()
    weights = columns.data.astype(np.float32)
    counts = np.diff(columns.indptr)
    starts = columns.indptr[:-1][counts > 0]
    low = np.repeat(np.minimum.reduceat(weights, starts), counts[counts > 0]) if len(starts) else weights
    high = np.repeat(np.maximum.reduceat(weights, starts), counts[counts > 0]) if len(starts) else weights
    step = (high - low) / np.float32(BYTE_LEVELS)
    with np.errstate(invalid="ignore", divide="ignore"):
        levels = np.where(step > 0, np.clip(np.floor((weights - low) / step + np.float32(0.5)), 0, BYTE_LEVELS), 0)
    columns.data = (low + levels.astype(np.float32) * step).astype(np.float32)
    held = columns.tocsr()
    held.sort_indices()
    held.eliminate_zeros()
    return held


def float16(matrix: sp.csr_matrix, _: float = 0) -> sp.csr_matrix:
    return _with_data(matrix, matrix.data.astype(np.float16).astype(np.float32))


def impacts(matrix: sp.csr_matrix, scale: float) -> sp.csr_matrix:
    return quantize(matrix, scale)


def unchanged(matrix: sp.csr_matrix, _: float = 0) -> sp.csr_matrix:
    return matrix


@dataclass(frozen=True)
class Target:
    """One engine's storage: ``documents`` and ``queries`` map the weights (given the setting); ``setting`` names
    the swept parameter (None: nothing to sweep), ``default`` the engine's own default of it."""

    name: str
    engines: str
    documents: Weights
    queries: Weights
    setting: str | None = None
    default: float = 0.0
    sweep: tuple[float, ...] = ()
    kind: str = "maps"  # "maps": exact search through the maps; "bmp": on BMP itself; "onnx-int8": re-encoded
    derived_default: Callable[[sp.csr_matrix], float] | None = None  # the default comes from the documents

    def settings(self, documents: sp.csr_matrix) -> tuple[tuple[float | None, ...], float]:
        """The values to try (the sweep, plus a default derived from ``documents``) and the default among them."""
        if self.derived_default is None:
            return self.sweep or (None,), self.default
        default = self.derived_default(documents)
        return tuple(sorted({*self.sweep, default})), default


TARGETS = {
    target.name: target
    for target in (
        Target(
            "lucene-9bit",
            "Elasticsearch / OpenSearch rank_features, Elasticsearch sparse_vector",
            lucene_9bit,
            unchanged,
        ),
        Target(
            "opensearch-byte",
            "OpenSearch sparse_vector (SEISMIC)",
            opensearch_byte,
            opensearch_query,
            "quantization_ceiling_ingest",
            OPENSEARCH_INGEST_CEILING,
            (1.0, 2.0, 3.0, 4.0, 6.0, 8.0),
        ),
        Target("qdrant-uint8", "Qdrant datatype=uint8", qdrant_uint8, unchanged),
        Target("qdrant-float16", "Qdrant datatype=float16", float16, unchanged),
        Target(
            "impacts",
            "CIFF, Anserini, PISA (integer impacts x scale)",
            impacts,
            impacts,
            "scale",
            100.0,  # the engines' customary scale, still swept; spladekit's default is derived
            (5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0),
            derived_default=lambda documents: impact_scale(float(documents.data.max(initial=0.0))),
        ),
        Target("bmp", "BMP (8-bit, overflow-safe scale; run on bmp)", unchanged, unchanged, kind="bmp"),
        Target("onnx-int8", "the int8 ONNX graph (export onnx --int8)", unchanged, unchanged, kind="onnx-int8"),
    )
}
ONLY_WHEN_NAMED = ("onnx-int8",)  # re-encodes the whole collection


@dataclass
class FidelityReport:
    """float32's metrics and, per target and setting, the metrics, their drift and the top-10 kept."""

    collection: str
    measures: tuple[str, ...]
    reference: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)
    tolerance: float = TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "measures": list(self.measures),
            "float32": self.reference,
            "tolerance": self.tolerance,
            "rows": self.rows,
            "sweeps": self.sweeps(),
        }

    def sweeps(self) -> dict[str, dict[str, Any]]:
        """Per swept target: the settings tried whose every measure stays within the tolerance of float32, and the
        smallest from which every larger setting tried does too (None when the largest does not)."""
        summary = {}
        for name in dict.fromkeys(row["target"] for row in self.rows if row.get("setting")):
            tried = sorted((row["value"], self.within(row)) for row in self.rows if row["target"] == name)
            stable = None
            for value, within in reversed(tried):
                if not within:
                    break
                stable = value
            summary[name] = {"within_tolerance": [value for value, within in tried if within], "stable_from": stable}
        return summary

    def within(self, row: dict[str, Any]) -> bool:
        return all(abs(drift) <= self.tolerance for drift in row["drift"].values())


def top10_kept(reference: np.ndarray, other: np.ndarray) -> tuple[float, int]:
    """(mean fraction of each query's float32 top-10 found in the target's top-10, queries with the same top-10)."""
    kept, same = [], 0
    for mine, theirs in zip(reference[:, :10], other[:, :10]):
        expected, found = mine[mine >= 0], theirs[theirs >= 0]
        if len(expected):
            kept.append(len(np.intersect1d(expected, found)) / len(expected))
        same += expected.tolist() == found.tolist()
    return float(np.mean(kept)) if kept else 1.0, same


def check_targets(names: list[str] | None) -> list[Target]:
    """The named targets (default: all but :data:`ONLY_WHEN_NAMED`); SpladekitError for an unknown name, or for a
    target whose engine is not installed (bmp; onnx-int8's ONNX packages): said before the collection is encoded,
    not after, as an error row."""
    if not names:
        chosen = [target for name, target in TARGETS.items() if name not in ONLY_WHEN_NAMED]
    else:
        unknown = [name for name in names if name not in TARGETS]
        if unknown:
            raise SpladekitError(f"unknown fidelity target {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
        chosen = [TARGETS[name] for name in names]
    for target in chosen:
        try:
            if target.kind == "bmp":
                BmpSearcher.check_prerequisites({})
            elif target.kind == "onnx-int8":
                from spladekit.model.onnx import _onnx_packages

                _onnx_packages()
        except SpladekitError as error:
            raise SpladekitError(
                f"fidelity target {target.name}: {error} (or name the targets to measure, --target)"
            ) from None
    return chosen


def check_tolerance(tolerance: float) -> None:
    if not np.isfinite(tolerance) or tolerance < 0:
        raise SpladekitError(f"tolerance must be a finite number >= 0, got {tolerance:g}")


def fidelity(
    encoder: RetrievalModel,
    collection: Collection,
    targets: list[str] | None = None,
    k: int = 1000,
    max_length: int | None = None,
    query_max_length: int | None = None,
    batch_size: int = 32,
    cache: bool = True,
    tolerance: float = TOLERANCE,
    show_progress: bool = True,
) -> FidelityReport:
    """Encode ``collection`` once (the evaluation cache), search it exactly in float32 and as each target holds the
    weights, and report the drift of the collection's measures (see the module)."""
    chosen = check_targets(targets)
    check_tolerance(tolerance)
    collection = reconcile(collection)
    document_limit = encoder.side_max_length("document", max_length)
    query_limit = encoder.side_max_length("query", query_max_length or max_length)
    documents = encode_corpus(encoder, collection.corpus, document_limit, batch_size, cache, show_progress)[0].matrix
    queries = encoder.encode_query(
        collection.queries.texts, batch_size=batch_size, max_length=query_limit, show_progress=show_progress
    )
    depth = k + collection.drop_self_hits

    def scored(found: Any) -> tuple[dict[str, float], np.ndarray]:
        return score_hits(collection, found.doc_indices, found.scores, k, None, "fidelity")[0], found.doc_indices

    reference, reference_rows = scored(ExactSearcher.build(documents).search(queries, k=depth))
    report = FidelityReport(collection.name, tuple(collection.measures), reference, tolerance=tolerance)
    for target in chosen:
        values, default = target.settings(documents)
        for value in values:
            setting = 0.0 if value is None else value
            try:
                if target.kind == "bmp":
                    with BmpSearcher.build(documents) as engine:
                        found = engine.search(queries, k=depth)
                elif target.kind == "onnx-int8":
                    limits = (document_limit, query_limit)
                    found = _onnx_int8_search(encoder, collection, limits, batch_size, depth, show_progress)
                else:
                    held = ExactSearcher.build(target.documents(documents, setting))
                    found = held.search(target.queries(queries, setting), k=depth)
            except SpladekitError as error:  # e.g. a vocabulary over BMP's 65,535 terms, a model ONNX cannot export
                report.rows.append({"target": target.name, "engines": target.engines, "error": str(error)})
                continue
            metrics, rows = scored(found)
            kept, same = top10_kept(reference_rows, rows)
            report.rows.append(
                {
                    "target": target.name,
                    "engines": target.engines,
                    "setting": target.setting,
                    "value": value,
                    "default": value == default if target.setting else None,
                    "metrics": metrics,
                    "drift": {name: metrics[name] - reference[name] for name in reference},
                    "top10_kept": kept,
                    "top10_same": same,
                    "queries": queries.shape[0],
                }
            )
    return report


def _onnx_int8_search(
    encoder: RetrievalModel,
    collection: Collection,
    limits: tuple[int, int],
    batch_size: int,
    depth: int,
    show_progress: bool,
) -> Any:
    """The collection encoded again through the int8 ONNX export of ``encoder``, searched exactly."""
    from spladekit.common.scratch import scratch_folder
    from spladekit.model.encoder import SparseEncoder
    from spladekit.model.inference_free import InferenceFreeEncoder
    from spladekit.model.onnx import OnnxEncoder, export_onnx

    if not isinstance(encoder, (SparseEncoder, InferenceFreeEncoder)):
        raise SpladekitError("onnx-int8 needs a spladekit model to export (not an ONNX folder)")
    with scratch_folder("fidelity") as scratch:
        export_onnx(encoder, scratch, quantize="int8")
        graph = OnnxEncoder(scratch)
        documents = graph.encode_document(collection.corpus.texts, batch_size, limits[0], show_progress)
        queries = graph.encode_query(collection.queries.texts, batch_size, limits[1], show_progress)
    return ExactSearcher.build(documents).search(queries, k=depth)


def fidelity_table(report: FidelityReport) -> str:
    """The report as a readable table: per target and setting, each measure's drift and the top-10 kept."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report.collection}: drift from exact float32 search (tolerance {report.tolerance:g})")
    for column in ("target", "setting", *report.measures, "top-10 kept", "same top-10"):
        table.add_column(column, justify="left" if column in ("target", "setting") else "right")
    table.add_row("float32", "", *(f"{report.reference[name]:.4f}" for name in report.measures), "1.000", "all")
    for row in report.rows:
        if "error" in row:
            table.add_row(row["target"], row["error"], *[""] * (len(report.measures) + 2))
            continue
        setting = (
            "" if row["setting"] is None else f"{row['setting']}={row['value']:g}" + (" *" if row["default"] else "")
        )
        drifts = (f"{row['drift'][name]:+.5f}" for name in report.measures)
        table.add_row(
            row["target"], setting, *drifts, f"{row['top10_kept']:.3f}", f"{row['top10_same']}/{row['queries']}"
        )
    buffer = io.StringIO()
    Console(file=buffer, width=160, color_system=None).print(table)
    lines = [buffer.getvalue().rstrip(), "* the engine's default"]
    for name, sweep in report.sweeps().items():
        lines.append(
            f"{name}: within {report.tolerance:g} at {sweep['within_tolerance'] or 'none tried'}; "
            f"from {sweep['stable_from']} on, every larger setting tried is too"
        )
    return "\n".join(lines)
