"""Paired significance over queries: is configuration A better than B, or is the gap query-sampling noise?

A *unit* is one judged query of one collection, ``(collection, query id)``; units are pooled over the
evaluated collections (so a five-collection mean is tested on all their queries at once). A configuration
trained with several seeds contributes, per unit, the mean of its seeds' values, so the test is about the
configuration and not one lucky seed. For the per-unit differences ``d_i = a_i − b_i``:

* **randomization test** (Fisher's sign-flip test; ``scipy.stats.permutation_test`` with
  ``permutation_type="samples"``, which swaps a and b within a unit): under "A and B are exchangeable",
  each d_i is as likely as −d_i; the p-value is the share of the 2ⁿ sign patterns (sampled) whose
  |mean| reaches the observed one (two-sided). Smucker, Allan & Carterette, "A comparison of statistical
  significance tests for information retrieval evaluation", CIKM 2007, recommend it for IR.
* **bootstrap** 95 % confidence interval of mean(d) (``scipy.stats.bootstrap``, percentile), resampling units.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
import scipy.stats

Unit = tuple[str, str]  # (collection, query id)
RESAMPLES = 9999
SEED = 0  # fixed: a report is reproducible to the last digit


@dataclass(frozen=True)
class PairedTest:
    """The outcome of comparing A with B over ``units`` shared queries (``mean_difference`` = A − B)."""

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
    """Randomization test and bootstrap CI of mean(A − B) over the units both evaluated; None under two
    shared units (nothing to test)."""
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
