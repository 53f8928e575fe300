"""experiments/stats.py: paired randomization test and bootstrap CI over queries, seeds averaged per query."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from spladekit.experiments.stats import paired_test, seed_mean


def units(values) -> dict:
    return {("c", f"q{i}"): float(value) for i, value in enumerate(values)}


def test_the_p_value_equals_the_exhaustive_sign_flip_test_on_ten_queries():
    rng = np.random.default_rng(3)
    a, b = rng.random(10), rng.random(10)
    difference = a - b
    observed = abs(difference.mean())
    flips = [abs((difference * np.array(signs)).mean()) for signs in itertools.product((1, -1), repeat=10)]
    exhaustive = np.mean([flip >= observed - 1e-12 for flip in flips])
    test = paired_test(units(a), units(b))
    assert test is not None and test.units == 10
    assert test.p_value == pytest.approx(exhaustive, abs=1e-9)  # 2^10 < resamples: scipy enumerates them all
    assert test.mean_difference == pytest.approx(difference.mean())


def test_a_consistent_gain_is_significant_and_its_interval_excludes_zero():
    rng = np.random.default_rng(0)
    b = rng.random(40) * 0.8
    test = paired_test(units(b + 0.05), units(b), "A", "B")
    assert test is not None and test.p_value < 0.001
    assert test.mean_difference == pytest.approx(0.05) and test.ci_low == pytest.approx(0.05)
    assert (test.a, test.b, test.mean_a - test.mean_b) == ("A", "B", pytest.approx(0.05))


def test_noise_around_zero_is_not_significant():
    rng = np.random.default_rng(1)
    a = rng.random(60)
    b = a + rng.normal(0, 0.1, 60) * np.where(rng.random(60) < 0.5, 1, -1)
    test = paired_test(units(a), units(b))
    assert test is not None and test.p_value > 0.05 and test.ci_low < 0 < test.ci_high


def test_identical_systems_have_p_one_and_only_shared_queries_count():
    a = units([0.1, 0.5, 0.9])
    test = paired_test(a | {("other", "q9"): 1.0}, a)
    assert test is not None and (test.units, test.p_value, test.mean_difference) == (3, 1.0, 0.0)
    assert paired_test(units([0.2]), units([0.3])) is None  # one shared query: nothing to test


def test_seed_mean_averages_each_query_over_the_seeds_that_evaluated_it():
    first = {("c", "q1"): 0.2, ("c", "q2"): 0.4}
    second = {("c", "q1"): 0.6}
    assert seed_mean([first, second]) == {("c", "q1"): pytest.approx(0.4), ("c", "q2"): 0.4}
