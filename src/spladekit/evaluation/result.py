"""``EvaluationResult``: the artifact of evaluation — metrics, per-query values, efficiency, provenance.

JSON form (``to_dict`` / ``save``; the ``spladekit evaluate --json-out`` contract): the mean of each
measure under its ir_measures name at the top level (``nDCG@10``, ``RR@10``, ``R@1000``…), the
efficiency numbers (``flops``, ``avg_q_nnz``, ``avg_d_nnz``, ``docs``, ``queries``,
``search_ms_per_query``), the timings, the provenance (source, backend, k, max length, cache…), plus
``measures`` (which keys are measures), ``per_query`` (``{measure: {query_id: value}}``, for paired
tests) and, for a suite, ``datasets`` (one result per collection; the top level holds their means).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import InputError
from spladekit.common.lines import describe, expect, read_json

EFFICIENCY_KEYS = ("flops", "avg_q_nnz", "avg_d_nnz", "docs", "queries", "search_ms_per_query")
TIMING_KEYS = ("encode_docs_seconds", "encode_queries_seconds", "index_seconds")
STRUCTURE_KEYS = ("name", "suite", "measures", "per_query", "datasets")


@dataclass
class EvaluationResult:
    """One collection's (or, with ``members``, one suite's) evaluation."""

    name: str
    measures: tuple[str, ...]
    metrics: dict[str, float]  # measure → mean over judged queries (ir_measures names)
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)  # measure → query id → value
    efficiency: dict[str, float] = field(default_factory=dict)  # EFFICIENCY_KEYS
    timings: dict[str, float | None] = field(default_factory=dict)  # TIMING_KEYS
    provenance: dict = field(
        default_factory=dict
    )  # source, backend, backend_params, k, max lengths, max_active_dims, cache…
    members: dict[str, EvaluationResult] = field(default_factory=dict)  # a suite's collections

    @property
    def is_suite(self) -> bool:
        return bool(self.members)

    @classmethod
    def mean_of(cls, name: str, members: dict[str, EvaluationResult]) -> EvaluationResult:
        """A suite: the mean of each measure and efficiency number over its collections, timings summed."""
        if not members:
            raise ValueError(f"suite {name!r} has no collections")
        first = next(iter(members.values()))
        parts = list(members.values())

        def mean(key: str, of: str) -> float:
            return float(np.mean([getattr(part, of)[key] for part in parts]))

        return cls(
            name=name,
            measures=first.measures,
            metrics={measure: mean(measure, "metrics") for measure in first.measures},
            efficiency={key: mean(key, "efficiency") for key in first.efficiency},
            timings={key: float(sum(part.timings.get(key) or 0.0 for part in parts)) for key in first.timings},
            provenance={
                key: first.provenance[key]
                for key in ("backend", "k", "max_length", "query_max_length", "max_active_dims", "precision")
                if key in first.provenance
            },
            members=members,
        )

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        payload: dict = {"name": self.name}
        if self.is_suite:
            payload["suite"] = self.name
        payload |= self.metrics | self.efficiency | self.timings | self.provenance
        payload["measures"] = list(self.measures)
        if self.per_query:
            payload["per_query"] = self.per_query
        if self.members:
            payload["datasets"] = {name: member.to_dict() for name, member in self.members.items()}
        return payload

    @classmethod
    def from_dict(cls, payload: object, source: str | Path | None = None, where: str = "") -> EvaluationResult:
        """Inverse of :meth:`to_dict`; also reads files written before ``measures`` was recorded.

        Every value is checked for its type (measures and efficiency numbers, timings numbers or null,
        ``per_query`` ``{measure: {query id: number}}``…): a wrong one is an :class:`InputError` naming
        ``source`` and the key (``where`` prefixes keys inside a suite's ``datasets``)."""
        if not isinstance(payload, dict):
            what = repr(where.removesuffix(".")) if where else "an evaluation result"
            raise InputError(f"{what} must be a JSON object, got {describe(payload)}", source)

        def key(name: object) -> str:
            return repr(f"{where}{name}")

        measures = payload.get("measures")
        if measures is None:
            # Written by spladekit < 0.2: a key is a measure when ir_measures can parse it.
            measures = [
                name
                for name in payload
                if name not in (*EFFICIENCY_KEYS, *TIMING_KEYS, *STRUCTURE_KEYS)
                and _is_measure(name)
                and isinstance(payload[name], (int, float))
            ]
        if not isinstance(measures, list) or not all(isinstance(m, str) and m in payload for m in measures):
            raise InputError(f"{key('measures')} must list measure names present in the result", source)
        for name in measures:
            expect(payload[name], float, key(name), source)
        for name in EFFICIENCY_KEYS:
            if name in payload:
                expect(payload[name], float, key(name), source)
        for name in TIMING_KEYS:
            if name in payload:
                expect(payload[name], (float, type(None)), key(name), source)
        for name in ("name", "suite"):
            expect(payload.get(name), (str, type(None)), key(name), source)
        per_query = expect(payload.get("per_query") or {}, dict, key("per_query"), source)
        for measure, values in per_query.items():
            expect(values, dict, key(f"per_query.{measure}"), source)
            for query_id, value in values.items():
                expect(value, float, f"{key(f'per_query.{measure}')}[{query_id!r}]", source)
        members = expect(payload.get("datasets") or {}, dict, key("datasets"), source)
        used = {*measures, *EFFICIENCY_KEYS, *TIMING_KEYS, *STRUCTURE_KEYS}
        return cls(
            name=payload.get("name") or payload.get("suite") or "",
            measures=tuple(measures),
            metrics={measure: payload[measure] for measure in measures},
            per_query=per_query,
            efficiency={name: payload[name] for name in EFFICIENCY_KEYS if name in payload},
            timings={name: payload[name] for name in TIMING_KEYS if name in payload},
            provenance={name: value for name, value in payload.items() if name not in used},
            members={
                name: cls.from_dict(member, source, f"{where}datasets.{name}.") for name, member in members.items()
            },
        )

    def save(self, path: str | Path) -> Path:
        with atomic_file(path) as stream:
            stream.write(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> EvaluationResult:
        return cls.from_dict(read_json(path, dict), path)


def _is_measure(name: str) -> bool:
    import ir_measures

    try:
        ir_measures.parse_measure(name)
    except (ValueError, NameError, SyntaxError, TypeError):
        return False
    return True
