"""Pairs against rounds a pair (analysis.allocation): the variance components of an A/B's rounds
and the rounds a pair that narrow the interval most in a run's time."""

from __future__ import annotations

import numpy as np
import pytest

from fusebench.analysis.allocation import (
    OFFSET_RATIOS,
    Components,
    best_rounds_per_pair,
    components,
    expected_half_width,
    rounds_per_pair,
)


def _rounds(pairs: int, k: int, within: float, between: float, seed: int = 1):
    rng = np.random.default_rng(seed)
    offsets = rng.normal(0, between, pairs)
    values = [offsets[p] + rng.normal(0, within) for p in range(pairs) for _ in range(k)]
    return values, [p for p in range(pairs) for _ in range(k)]


def test_components_recover_the_within_and_between_scatter():
    values, labels = _rounds(400, 6, within=0.01, between=0.02)
    found = components(values, labels)
    assert found.within == pytest.approx(0.01, rel=0.05)
    assert found.between == pytest.approx(0.02, rel=0.1)
    assert (found.pairs, found.rounds) == (400, 2400)


def test_pairs_that_agree_have_no_between_component_and_one_pair_none():
    values, labels = _rounds(50, 6, within=0.01, between=0.0)
    assert components(values, labels).between < 0.003
    assert components(values[:6], labels[:6]) is None
    assert components([0.1, 0.2], [0, 1]) is None  # two pairs of one round: no within scatter


def test_a_large_pair_offset_asks_for_short_pairs_and_none_for_long_ones():
    offset = Components(within=0.007, between=0.013, pairs=6, rounds=36)
    k, width = best_rounds_per_pair(offset, rounds=36, pair_cost=2.4, alpha=0.05 / 8)
    assert k <= 2 and width < 0.007 * expected_half_width(0.013 / 0.007, 6, 36, 0.05 / 8)
    calm = Components(within=0.02, between=0.0, pairs=6, rounds=36)
    k, _ = best_rounds_per_pair(calm, rounds=36, pair_cost=2.4, alpha=0.05 / 8)
    # pairs cost rounds and buy nothing, yet few pairs leave the interval few degrees of freedom
    # whenever their means differ by chance (one pair cannot qualify its interval at all)
    assert 3 <= k <= 9


def test_the_pairs_widen_the_interval_where_they_set_the_spread():
    # τ = σ: the pairs are mostly the unit, B - 1 degrees of freedom and the spread MSB/n
    assert expected_half_width(1.0, 6, 36, 0.05) > expected_half_width(1.0, 1, 36, 0.05)
    # τ = 0: the pairs are the unit only by chance; more rounds a pair lose degrees of freedom
    assert expected_half_width(0.0, 12, 36, 0.05) > expected_half_width(0.0, 3, 36, 0.05)
    assert expected_half_width(0.0, 6, 1, 0.05) == float("inf")
    assert expected_half_width(0.0, 6, 6, 0.05) == float("inf")  # one pair


def test_before_any_pair_is_measured_the_rounds_a_pair_hold_across_the_offsets_seen():
    # 9 s rounds, a fresh pair 25 s, 300 s: the Zen 4's gate cell (results/placement)
    def fits(k: int) -> int:
        n = 0
        while (n + 1) * 9 + (n // k) * 25 <= 300:
            n += 1
        return n

    k, rounds = rounds_per_pair(fits, most=60, alpha=0.05 / 8)
    assert (k, rounds) == (2, 14)  # seven pairs of 2
    for ratio in OFFSET_RATIOS:  # within 1.5x of the best at every offset; 6 a pair is not
        best = min(
            expected_half_width(ratio, j, fits(j), 0.05 / 8) for j in range(1, 61) if fits(j) > j
        )
        assert expected_half_width(ratio, k, rounds, 0.05 / 8) <= 1.5 * best
    assert expected_half_width(2.0, 6, fits(6), 0.05 / 8) > 1.7 * expected_half_width(
        2.0, k, rounds, 0.05 / 8
    )


def test_an_undecided_row_of_pairs_forecasts_more_pairs_not_the_rounds_it_ran():
    # A row whose pairs were the unit (4 pairs of 6 rounds, df 3 at its Holm level) and undecided
    # against a -5% limit: its forecast adds whole pairs on their degrees of freedom, never "24
    # rounds" when 24 ran.
    from fusebench.analysis.stats import ComparisonRow
    from fusebench.analysis.stopping import Goal

    row = ComparisonRow(
        "m", "E2B", "e2b", "pp128", "gen", "reference", "current",
        n_pairs=24, mean_log=-0.011, sd_log=0.06, level=1 - 0.05 / 8, pair_unit=4,
    )  # fmt: skip
    needed = row.rounds_to_decide(Goal(5.0, limit_pct=5.0))
    assert needed is not None and needed > 24 and needed % 6 == 0
