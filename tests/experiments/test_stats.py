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


# --- the equal-weight statistics (issue 42): stratified sign-flip test, seed × query bootstrap, TOST, Holm ---

from spladekit.experiments.stats import (  # noqa: E402
    contrast,
    equal_weight_mean,
    holm,
    seed_query_bootstrap,
    seed_query_replicates,
    stratified_test,
    tost,
    with_holm,
)


def collections(**columns) -> dict:
    """{("X", "q0"): …, ("Y", "q0"): …}: one list of values per collection."""
    return {(name, f"q{i}"): float(value) for name, values in columns.items() for i, value in enumerate(values)}


def test_stratified_test_on_five_units_matches_a_hand_enumeration_and_differs_from_the_pooled_one():
    # X has one query (d = +0.5), Y four (d = −0.2 each). Equal weights: X 1/2, each Y query 1/8.
    #   D = 0.5/2 − 4·0.2/8 = +0.15; pooled mean = (0.5 − 0.8)/5 = −0.06: opposite signs.
    # Sign patterns: T = 0.25·s1 − 0.025·(s2+…+s5). With s1 = +1 the sum of four signs is −4, −2, 0, 2, 4
    # (1, 4, 6, 4, 1 patterns), T = 0.35, 0.30, 0.25, 0.20, 0.15: all 16 reach |T| ≥ 0.15, and by symmetry all 16
    # with s1 = −1: p = 32/32 = 1. Pooled: |0.5·s1 − 0.2·Σ| ≥ 0.3 for Σ ∈ {−4, −2, 0, 4} (1+4+6+1 = 12 of 16 per
    # sign of s1): p = 24/32 = 0.75.
    a = collections(X=[0.5], Y=[0.0, 0.0, 0.0, 0.0])
    b = collections(X=[0.0], Y=[0.2, 0.2, 0.2, 0.2])
    difference, p_value = stratified_test(a, b)
    assert difference == pytest.approx(0.15) and p_value == pytest.approx(1.0)
    pooled = paired_test(a, b)
    assert pooled is not None and pooled.mean_difference == pytest.approx(-0.06)
    assert pooled.p_value == pytest.approx(0.75)


def test_stratified_test_on_a_small_example_with_p_under_one():
    # X: d = +0.4 (1 query, weight 1/2); Y: d = +0.3, −0.1 (weights 1/4): D = 0.2 + 0.05 = 0.25.
    # T = 0.2·s1 + 0.075·s2 − 0.025·s3 takes |T| = 0.3, 0.25, 0.15, 0.1, twice each: |T| ≥ 0.25 in 4 of 8, p = 0.5.
    a = collections(X=[0.4], Y=[0.3, 0.0])
    b = collections(X=[0.0], Y=[0.0, 0.1])
    assert stratified_test(a, b) == (pytest.approx(0.25), pytest.approx(0.5))
    # one sign changed on Y's first query: D = 0.2 − 0.075 − 0.025 = 0.1, |T| ≥ 0.1 in every pattern: p = 1
    assert stratified_test(collections(X=[0.4], Y=[0.0, 0.0]), collections(X=[0.0], Y=[0.3, 0.1])) == (
        pytest.approx(0.1),
        pytest.approx(1.0),
    )


def test_stratified_p_equals_the_exhaustive_weighted_sign_flip_test_on_twelve_queries():
    rng = np.random.default_rng(7)
    sizes = {"X": 2, "Y": 3, "Z": 7}
    a = collections(**{name: rng.random(n) for name, n in sizes.items()})
    b = collections(**{name: rng.random(n) for name, n in sizes.items()})
    units = sorted(a)
    weights = np.array([1 / (3 * sizes[unit[0]]) for unit in units])
    d = np.array([a[unit] - b[unit] for unit in units])
    observed = abs(weights @ d)
    flips = [abs(weights @ (d * np.array(signs))) for signs in itertools.product((1, -1), repeat=len(units))]
    exhaustive = np.mean([flip >= observed - 1e-12 for flip in flips])
    difference, p_value = stratified_test(a, b)  # 2^12 = 4096 ≤ 9999 resamples: enumerated exactly
    assert difference == pytest.approx(weights @ d) and p_value == pytest.approx(exhaustive, abs=1e-9)
    assert 0 < p_value < 1


def test_the_stratified_statistic_is_the_printed_five_collection_mean_difference():
    # a page prints, per configuration: per seed, the mean over collections of each collection's mean; averaged
    # over seeds. The test's D must be that number for A minus that number for B.
    rng = np.random.default_rng(11)
    sizes = {"scifact": 9, "cranfield": 5, "dl19": 2}
    arms = {arm: [collections(**{n: rng.random(k) for n, k in sizes.items()}) for _ in range(3)] for arm in "ab"}

    def printed(seeds):
        return np.mean(
            [np.mean([np.mean([v for (c, _), v in seed.items() if c == name]) for name in sizes]) for seed in seeds]
        )

    result = contrast(arms["a"], arms["b"], "A", "B")
    assert result is not None and (result.seeds_a, result.seeds_b, result.units) == (3, 3, 16)
    assert result.mean_a == pytest.approx(printed(arms["a"])) and result.mean_b == pytest.approx(printed(arms["b"]))
    assert result.mean_difference == pytest.approx(printed(arms["a"]) - printed(arms["b"]))
    assert result.mean_difference == pytest.approx(np.mean(list(result.per_collection.values())))
    pooled = np.mean([np.mean(list(s.values())) for s in arms["a"]]) - np.mean(
        [np.mean(list(s.values())) for s in arms["b"]]
    )
    assert result.pooled_difference == pytest.approx(pooled)
    assert abs(result.pooled_difference - result.mean_difference) > 1e-3  # the two weightings do differ here
    assert equal_weight_mean(collections(X=[1.0], Y=[0.0, 0.0, 0.0])) == pytest.approx(0.5)  # not 0.25


def test_the_seed_aware_interval_is_wider_than_the_seed_blind_one_only_when_seeds_disagree():
    rng = np.random.default_rng(5)
    base = collections(X=rng.random(40), Y=rng.random(25))
    shifted = {unit: value + 0.01 for unit, value in base.items()}
    agreeing = [dict(shifted), dict(shifted), dict(shifted)]
    blind = seed_query_bootstrap(agreeing, [base], seeds_resampled=False)
    aware = seed_query_bootstrap(agreeing, [base])
    assert aware == pytest.approx(blind) and blind[0] == pytest.approx(0.01)  # a constant shift: no spread at all
    # seeds that disagree by ±0.02 on every query: the seed-blind interval (seed means fixed) does not see it
    disagreeing = [{u: v + offset for u, v in shifted.items()} for offset in (-0.02, 0.0, 0.02)]
    blind = seed_query_bootstrap(disagreeing, [base], seeds_resampled=False)
    aware = seed_query_bootstrap(disagreeing, [base])
    assert blind == pytest.approx((0.01, 0.01))
    assert aware[0] < 0.0 and aware[1] > 0.02  # the seed spread (sd of a 3-seed mean 0.0115) is in the interval
    result = contrast(disagreeing, [base])
    assert result is not None and result.ci_high - result.ci_low > 10 * (
        result.seedblind_ci_high - result.seedblind_ci_low
    )


def test_the_seed_part_of_the_bootstrap_variance_is_the_unbiased_variance_of_a_seed_mean():
    # seeds constant over queries (0.1, 0.2, 0.3), B one seed of zeros: D* is the mean of 3 seeds drawn from the
    # deviations scaled by √(3/2). Var(D*) = (3/2)·(plug-in variance 0.02/3)/3 = 0.01/3 = s²/n with s² = 0.01.
    units = [f"q{i}" for i in range(6)]
    a_seeds = [{("X", q): level for q in units} for level in (0.1, 0.2, 0.3)]
    b_seeds = [{("X", q): 0.0 for q in units}]
    replicates = seed_query_replicates(a_seeds, b_seeds, resamples=20000)
    assert replicates.mean() == pytest.approx(0.2, abs=0.002)
    assert replicates.var() == pytest.approx(0.01 / 3, rel=0.05)  # without the scaling: 0.02/9 = 0.00222


def test_tost_against_a_hand_computation():
    # p_low = share(D* ≤ −m), p_high = share(D* ≥ +m), p = max
    replicates = [-0.03, -0.01, 0.0, 0.005, 0.02]
    result = tost(replicates, margin=0.02)
    assert (result.p_low, result.p_high, result.p_value, result.equivalent) == (0.2, 0.2, 0.2, False)
    # 101 replicates evenly from −0.01 to +0.01 (step 0.0002), margin 0.0095: −0.01, −0.0098, −0.0096 are ≤ −m
    # (3/101 = 0.0297) and likewise 3 are ≥ +m: p = 0.0297 < 0.05, equivalent
    result = tost(np.linspace(-0.01, 0.01, 101), margin=0.0095)
    assert result.p_value == pytest.approx(3 / 101) and result.equivalent
    # a margin is required and must be positive; none is guessed
    with pytest.raises(TypeError):
        tost(replicates)  # type: ignore[call-arg]
    for margin in (0.0, -0.01, float("nan")):
        with pytest.raises(ValueError, match="margin"):
            tost(replicates, margin=margin)


def test_tost_rejects_exactly_when_the_90_percent_interval_lies_inside_the_margin():
    rng = np.random.default_rng(2)
    replicates = rng.normal(0.001, 0.003, 4000)
    low, high = np.quantile(replicates, [0.05, 0.95])
    for margin in (0.002, 0.004, 0.005, 0.006, 0.01):
        inside = -margin < low and high < margin
        assert tost(replicates, margin=margin).equivalent == inside, margin


def test_holm_on_a_textbook_example():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 → running max 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # capped at 1, ties keep the running maximum; Bonferroni would give 0.9 for the 0.3
    assert holm([0.3, 0.6, 0.001]) == pytest.approx([0.6, 0.6, 0.003])
    assert holm([]) == []
    assert [p < 0.05 for p in holm([0.01, 0.04, 0.03, 0.005])] == [True, False, False, True]
    # the step-down rejects more than Bonferroni: 0.01, 0.015, 0.03, 0.2 → 0.04, 0.045, 0.06, 0.2 (Bonferroni: 0.06
    # for the second)
    assert holm([0.2, 0.015, 0.01, 0.03]) == pytest.approx([0.2, 0.045, 0.04, 0.06])


def test_contrast_verdicts_claim_no_difference_only_through_tost():
    rng = np.random.default_rng(4)
    base = collections(X=rng.random(60), Y=rng.random(60))
    noise = [{u: v + rng.normal(0, 0.002) for u, v in base.items()} for _ in range(3)]
    same = contrast(noise, [base, base, base], margin=0.01)
    assert same is not None and same.equivalent and same.verdict() == "equivalent (±0.01)"
    unresolved = contrast(noise, [base, base, base])  # no margin given: no equivalence claimed
    assert unresolved is not None and unresolved.equivalent is None and unresolved.verdict() == "not resolved"
    better = contrast([{u: v + 0.05 for u, v in base.items()}] * 2, [base] * 2)
    assert better is not None and better.p_value < 0.001 and better.verdict() == "A > B"
    adjusted = with_holm([better, same])
    assert adjusted[0].p_holm == pytest.approx(2 * better.p_value) and adjusted[1].p_holm >= same.p_value
