"""Paired comparisons of two configurations over the queries of several collections, and across seeds.

A *unit* is one judged query of one collection, ``(collection, query id)``. A configuration trained with
several seeds has one value per unit and seed, ``x[s, i]``. Collections ``c = 1..C`` hold ``n_c`` units each.

**The printed quantity.** A results page prints each configuration's *five-collection mean*: per seed, the
mean over collections of the per-collection mean, averaged over seeds. Because every piece is a mean, it is one
weighted mean of the seed-averaged unit values ``x̄_i = mean_s x[s, i]``::

    M(x) = Σ_c (1/C) · (1/n_c) · Σ_{i∈c} x̄_i  = Σ_i w_i x̄_i,   w_i = 1 / (C · n_c(i))

and the printed difference of A and B is ``D = M(a) − M(b) = Σ_i w_i d_i`` with ``d_i = ā_i − b̄_i`` (the
*equal-weight* difference: each collection counts 1/C whatever its number of queries). Everything below tests
or brackets D; :func:`contrast` bundles it.

* **Stratified sign-flip test** (:func:`stratified_test`; Fisher's randomization test for paired data,
  ``scipy.stats.permutation_test`` with ``permutation_type="samples"``). Null hypothesis: on every unit, A and
  B are exchangeable, so each ``d_i`` is as likely as ``−d_i``. The statistic is D itself,
  ``T(σ) = Σ_i w_i σ_i d_i`` for sign patterns ``σ ∈ {±1}ⁿ``; the two-sided p-value is the share of patterns
  with ``|T(σ)| ≥ |D|``. Flipping a unit's sign keeps it in its collection, so this is the sign-flip test
  stratified by collection with the page's equal weights. Exact (all 2ⁿ patterns) when ``2ⁿ ≤ resamples``;
  otherwise ``resamples`` random patterns from a fixed seed, with scipy's ``(hits + 1) / (resamples + 1)``.
  Smucker, Allan & Carterette, "A comparison of statistical significance tests for information retrieval
  evaluation", CIKM 2007, recommend the randomization test for IR. It conditions on the trained models: seed
  variance is not part of its null.
* **Seed-aware interval** (:func:`seed_query_bootstrap`): a two-factor bootstrap over the crossed design
  seeds × queries. Each replicate draws, independently, the seeds of A with replacement (as many as A has),
  the seeds of B likewise, and, within each collection, ``n_c`` of its queries with replacement (the same draw
  for both arms, so the pairing by query is kept), and recomputes D on the draw::

      D* = Σ_c (1/C) · mean_{i ∈ draw_c} [ mean_{s ∈ seeds*_A} a'[s, i] − mean_{s ∈ seeds*_B} b'[s, i] ]

  The 95 % interval is the 2.5–97.5 % percentile range of D*. Why this design: seeds and queries are *crossed*
  (every seed evaluates every query), and resampling both factors independently is Owen's pigeonhole bootstrap
  ("The pigeonhole bootstrap", Annals of Applied Statistics 1(2), 2007, 386–411), which is mildly
  conservative for crossed random effects; resampling a higher stage with replacement is Davison & Hinkley's
  recommended strategy for multi-stage data ("Bootstrap Methods and their Application", CUP 1997, §3.8).
  Queries are resampled *within* collections because the collections are fixed, equally weighted strata, not
  a sample. With only n seeds per arm, the plug-in bootstrap variance of a seed mean is ``(n−1)/n`` of the
  unbiased ``s²/n`` (a third too small at n = 3); so, as Davison & Hinkley do for residuals (§3.3, "modified
  residuals"), each seed's deviation from its arm's seed mean is scaled by ``√(n/(n−1))`` before resampling
  (``a'[s, i] = ā_i + √(n/(n−1)) · (a[s, i] − ā_i)``), which makes the seed part of Var(D*) unbiased. A mixed
  model (unit and seed random effects) was the alternative; the bootstrap needs no normality of nDCG values
  (bounded, often 0 or 1) and gives the interval of exactly D. Limits: with 3 seeds an arm has 10 distinct seed
  draws, so the interval's tails are coarse; with 1 seed it is seed-blind (say so when you print it).
* **Equivalence** (:func:`tost`): two one-sided tests (Schuirmann, J. Pharmacokinetics and Biopharmaceutics
  15, 1987, 657–680; Lakens, Social Psychological and Personality Science 8(4), 2017) of ``H0: D ≤ −m`` and
  ``H0: D ≥ +m`` for a margin m that must be given (a margin is stated before the runs, never chosen after).
  On the seed-aware bootstrap distribution: ``p_low = share(D* ≤ −m)``, ``p_high = share(D* ≥ +m)``,
  ``p_TOST = max(p_low, p_high)``. ``p_TOST < α`` holds exactly when the ``1 − 2α`` percentile interval of D*
  lies inside ``(−m, +m)`` (the interval-inclusion form of TOST). "No difference" is claimed only then.
* **Holm's step-down correction** (:func:`holm`) across the tests of one page: with p-values sorted,
  ``p_(1) ≤ … ≤ p_(m)``, the adjusted ``p̃_(j) = max_{k ≤ j} min(1, (m − k + 1) · p_(k))`` (Holm, "A simple
  sequentially rejective multiple test procedure", Scandinavian Journal of Statistics 6, 1979, 65–70); reject
  where ``p̃ < α``. It controls the family-wise error rate under any dependence.
* **Pooled test** (:func:`paired_test`, kept as a secondary column): the same sign-flip test and a
  bootstrap interval of the *query-pooled* mean ``Σ_i d_i / n``, which weights each collection by its number of
  queries (a large collection dominates it) and can differ from D, even in sign.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import scipy.stats

Unit = tuple[str, str]  # (collection, query id)
RESAMPLES = 9999
SEED = 0  # fixed: a report is reproducible to the last digit
ALPHA = 0.05


@dataclass(frozen=True)
class PairedTest:
    """The outcome of comparing A with B over ``units`` shared queries (``mean_difference`` = A − B, pooled)."""

    a: str
    b: str
    units: int
    mean_a: float
    mean_b: float
    mean_difference: float
    ci_low: float
    ci_high: float
    p_value: float

    def to_dict(self) -> dict:
        return asdict(self)


def seed_mean(per_seed: Iterable[Mapping[Unit, float]]) -> dict[Unit, float]:
    """Per unit, the mean over the seeds that evaluated it (a seed missing a unit does not count as 0)."""
    sums: dict[Unit, list[float]] = {}
    for values in per_seed:
        for unit, value in values.items():
            sums.setdefault(unit, []).append(value)
    return {unit: float(np.mean(values)) for unit, values in sums.items()}


def paired_test(
    a: Mapping[Unit, float],
    b: Mapping[Unit, float],
    name_a: str = "A",
    name_b: str = "B",
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> PairedTest | None:
    """The pooled test: randomization test and bootstrap CI of the query-pooled mean(A − B) over the units both
    evaluated; None under two shared units (nothing to test)."""
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
        return None
    x = np.array([a[unit] for unit in shared], dtype=np.float64)
    y = np.array([b[unit] for unit in shared], dtype=np.float64)
    difference = x - y
    if not difference.any():  # identical systems: no sign pattern can differ, p = 1 exactly
        p_value, low, high = 1.0, 0.0, 0.0
    else:
        permutation = scipy.stats.permutation_test(
            (x, y),
            lambda u, v, axis: np.mean(u - v, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=resamples,
            rng=np.random.default_rng(seed),
        )
        interval = scipy.stats.bootstrap(
            (difference,), np.mean, n_resamples=resamples, method="percentile", rng=np.random.default_rng(seed)
        ).confidence_interval
        p_value, low, high = float(permutation.pvalue), float(interval.low), float(interval.high)
    return PairedTest(
        a=name_a,
        b=name_b,
        units=len(shared),
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        mean_difference=float(difference.mean()),
        ci_low=low,
        ci_high=high,
        p_value=p_value,
    )


def equal_weights(units: Sequence[Unit]) -> np.ndarray:
    """``w_i = 1 / (C · n_c(i))``: each of the C collections weighs 1/C, split equally over its units."""
    collections = [unit[0] for unit in units]
    counts: dict[str, int] = {}
    for name in collections:
        counts[name] = counts.get(name, 0) + 1
    return np.array([1.0 / (len(counts) * counts[name]) for name in collections], dtype=np.float64)


def equal_weight_mean(values: Mapping[Unit, float]) -> float:
    """``M(x) = Σ_c (1/C) · mean_{i∈c} x_i``: the mean over collections of each collection's mean."""
    units = sorted(values)
    return float(equal_weights(units) @ np.array([values[unit] for unit in units], dtype=np.float64))


def stratified_test(
    a: Mapping[Unit, float],
    b: Mapping[Unit, float],
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float]:
    """``(D, p)``: the equal-weight difference ``D = Σ_i w_i (a_i − b_i)`` over the shared units and the two-sided
    p-value of the sign-flip test whose statistic is D (flips within each collection; weights
    :func:`equal_weights`). Exact when ``2ⁿ ≤ resamples``, else Monte Carlo from ``seed``."""
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
        raise ValueError(f"a paired test needs at least 2 shared units, got {len(shared)}")
    weights = equal_weights(shared)
    x = np.array([a[unit] for unit in shared], dtype=np.float64)
    y = np.array([b[unit] for unit in shared], dtype=np.float64)
    observed = float(weights @ (x - y))
    if not (x - y).any():
        return observed, 1.0
    result = scipy.stats.permutation_test(
        (x, y),
        lambda u, v, axis: np.sum(weights * (u - v), axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=resamples,
        rng=np.random.default_rng(seed),
    )
    return observed, float(result.pvalue)


def _seed_matrix(per_seed: Sequence[Mapping[Unit, float]], units: Sequence[Unit]) -> np.ndarray:
    """seeds × units, each seed's deviation from the seed mean scaled by √(n/(n−1)) (n ≥ 2 seeds)."""
    matrix = np.array([[values[unit] for unit in units] for values in per_seed], dtype=np.float64)
    n = matrix.shape[0]
    if n < 2:
        return matrix
    centre = matrix.mean(axis=0)
    return centre + math.sqrt(n / (n - 1)) * (matrix - centre)


def shared_units(*per_seed: Sequence[Mapping[Unit, float]]) -> list[Unit]:
    """The units every seed of every arm evaluated, sorted."""
    sets = [set(values) for arm in per_seed for values in arm]
    return sorted(set.intersection(*sets)) if sets else []


def seed_query_replicates(
    a_seeds: Sequence[Mapping[Unit, float]],
    b_seeds: Sequence[Mapping[Unit, float]],
    resamples: int = RESAMPLES,
    seed: int = SEED,
    seeds_resampled: bool = True,
) -> np.ndarray:
    """``resamples`` bootstrap replicates D* of the equal-weight difference (module docstring): seeds of each
    arm resampled with replacement (deviations scaled by √(n/(n−1))), queries resampled within each collection,
    the same query draw for both arms. ``seeds_resampled=False`` keeps the seed means fixed (the seed-blind
    interval, queries only)."""
    if not a_seeds or not b_seeds:
        raise ValueError("each arm needs at least one seed")
    units = shared_units(a_seeds, b_seeds)
    if len(units) < 2:
        raise ValueError(f"a paired bootstrap needs at least 2 shared units, got {len(units)}")
    rng = np.random.default_rng(seed)
    a = _seed_matrix(a_seeds, units)
    b = _seed_matrix(b_seeds, units)
    # seed weights per replicate: multinomial counts / n, so (weights @ matrix) is the mean of the drawn seeds; drawn
    # in both modes so that the query draws below are the same ones with and without seed resampling
    weights_a = rng.multinomial(a.shape[0], np.full(a.shape[0], 1 / a.shape[0]), size=resamples) / a.shape[0]
    weights_b = rng.multinomial(b.shape[0], np.full(b.shape[0], 1 / b.shape[0]), size=resamples) / b.shape[0]
    if seeds_resampled:
        difference = weights_a @ a - weights_b @ b  # resamples × units
    else:
        difference = np.broadcast_to(a.mean(axis=0) - b.mean(axis=0), (resamples, len(units)))
    collections = np.array([unit[0] for unit in units])
    names = list(dict.fromkeys(collections))
    replicates = np.zeros(resamples, dtype=np.float64)
    for name in names:
        columns = np.flatnonzero(collections == name)
        counts = rng.multinomial(len(columns), np.full(len(columns), 1 / len(columns)), size=resamples)
        replicates += np.einsum("rq,rq->r", counts, difference[:, columns]) / (len(columns) * len(names))
    return replicates


def seed_query_bootstrap(
    a_seeds: Sequence[Mapping[Unit, float]],
    b_seeds: Sequence[Mapping[Unit, float]],
    level: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    seeds_resampled: bool = True,
) -> tuple[float, float]:
    """The percentile interval (``level``) of :func:`seed_query_replicates`."""
    replicates = seed_query_replicates(a_seeds, b_seeds, resamples, seed, seeds_resampled)
    tail = (1 - level) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Equivalence:
    """TOST of ``|D| < margin`` on a bootstrap distribution: ``equivalent`` when ``p < alpha``."""

    margin: float
    p_low: float
    p_high: float
    p_value: float
    equivalent: bool


def tost(replicates: np.ndarray | Sequence[float], *, margin: float, alpha: float = ALPHA) -> Equivalence:
    """Two one-sided tests of ``H0: D ≤ −margin`` and ``H0: D ≥ +margin`` on bootstrap replicates of D:
    ``p_low = share(D* ≤ −margin)``, ``p_high = share(D* ≥ +margin)``, ``p = max(p_low, p_high)``; equivalent
    iff ``p < alpha``. ``margin`` has no default: it must be the one stated before the runs."""
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin > 0):
        raise ValueError(f"an equivalence margin must be a positive number stated before the runs, got {margin!r}")
    values = np.asarray(replicates, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no bootstrap replicates")
    p_low = float(np.mean(values <= -margin))
    p_high = float(np.mean(values >= margin))
    p_value = max(p_low, p_high)
    return Equivalence(float(margin), p_low, p_high, p_value, p_value < alpha)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input's order: ``p̃_(j) = max_{k ≤ j} min(1, (m − k + 1) · p_(k))`` over
    the ascending order; reject ``H_(j)`` at level α iff ``p̃_(j) < α``."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[index])))
        adjusted[index] = running
    return adjusted


@dataclass(frozen=True)
class Contrast:
    """A against B: the equal-weight difference D with its stratified test and seed-aware interval (primary),
    per-collection differences, an optional TOST, and the pooled test (secondary). ``p_holm`` is filled in by
    :func:`with_holm` across the contrasts of one page or report."""

    a: str
    b: str
    units: int
    seeds_a: int
    seeds_b: int
    mean_a: float  # equal-weight mean of A (the page's five-collection mean, seeds averaged)
    mean_b: float
    mean_difference: float  # D = mean_a − mean_b
    p_value: float  # stratified sign-flip test of D
    ci_low: float  # seed × query bootstrap, 95 %
    ci_high: float
    seedblind_ci_low: float  # the same bootstrap with the seed means fixed (queries only)
    seedblind_ci_high: float
    per_collection: dict[str, float]
    pooled_difference: float
    pooled_ci_low: float
    pooled_ci_high: float
    pooled_p_value: float
    margin: float | None = None
    tost_p_value: float | None = None
    equivalent: bool | None = None
    p_holm: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def verdict(self, alpha: float = ALPHA) -> str:
        """``A > B`` / ``A < B`` when the (Holm-adjusted, if set) stratified p is under ``alpha``; ``equivalent
        (±m)`` when TOST rejects; else ``not resolved`` — never "no difference" without a TOST."""
        p = self.p_holm if self.p_holm is not None else self.p_value
        if p < alpha:
            return "A > B" if self.mean_difference > 0 else "A < B"
        if self.equivalent:
            return f"equivalent (±{self.margin:g})"
        return "not resolved"


def contrast(
    a_seeds: Sequence[Mapping[Unit, float]],
    b_seeds: Sequence[Mapping[Unit, float]],
    name_a: str = "A",
    name_b: str = "B",
    *,
    margin: float | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Contrast | None:
    """Compare A and B, each a list of per-seed unit values, over the units every seed of both evaluated; None
    under two shared units. ``margin`` (stated before the runs) adds a TOST of ``|D| < margin``."""
    units = shared_units(a_seeds, b_seeds)
    if len(units) < 2:
        return None
    a = {unit: value for unit, value in seed_mean(a_seeds).items() if unit in set(units)}
    b = {unit: value for unit, value in seed_mean(b_seeds).items() if unit in set(units)}
    difference, p_value = stratified_test(a, b, resamples, seed)
    replicates = seed_query_replicates(a_seeds, b_seeds, resamples, seed)
    low, high = (float(q) for q in np.quantile(replicates, [0.025, 0.975]))
    blind_low, blind_high = seed_query_bootstrap(a_seeds, b_seeds, 0.95, resamples, seed, seeds_resampled=False)
    per_collection: dict[str, list[float]] = {}
    for unit in units:
        per_collection.setdefault(unit[0], []).append(a[unit] - b[unit])
    pooled = paired_test(a, b, name_a, name_b, resamples, seed)
    assert pooled is not None  # ≥ 2 shared units
    equivalence = tost(replicates, margin=margin) if margin is not None else None
    return Contrast(
        a=name_a,
        b=name_b,
        units=len(units),
        seeds_a=len(a_seeds),
        seeds_b=len(b_seeds),
        mean_a=equal_weight_mean(a),
        mean_b=equal_weight_mean(b),
        mean_difference=difference,
        p_value=p_value,
        ci_low=low,
        ci_high=high,
        seedblind_ci_low=blind_low,
        seedblind_ci_high=blind_high,
        per_collection={name: float(np.mean(values)) for name, values in per_collection.items()},
        pooled_difference=pooled.mean_difference,
        pooled_ci_low=pooled.ci_low,
        pooled_ci_high=pooled.ci_high,
        pooled_p_value=pooled.p_value,
        margin=margin,
        tost_p_value=None if equivalence is None else equivalence.p_value,
        equivalent=None if equivalence is None else equivalence.equivalent,
    )


def with_holm(contrasts: Sequence[Contrast]) -> list[Contrast]:
    """The contrasts with ``p_holm`` set: Holm's correction of their stratified p-values as one family."""
    adjusted = holm([item.p_value for item in contrasts])
    return [replace(item, p_holm=p) for item, p in zip(contrasts, adjusted)]
