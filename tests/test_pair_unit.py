"""The pair as the unit of the fixed-n interval (analysis.inference, "Between processes" in
docs/statistics.md): rounds from several worker pairs whose means differ by more than their rounds
do get the between-pair scale and its B − 1 degrees of freedom; otherwise the rounds' n − 1.

Seeded and small; nothing here is timed. The replay on real rounds is
benchmarks/pair_unit_coverage.py (results/pair-unit/summary.md).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from fusebench.analysis import sequential
from fusebench.analysis.inference import Unit, adjust, paired_estimate

PAIRS, ROUNDS = 6, 6  # the gate's design: 36 rounds, a fresh pair every worker_rounds (6)
LABELS = np.repeat(np.arange(PAIRS), ROUNDS)


def _t_half(sd: float, n: int, df: int, confidence: float = 0.95) -> float:
    return float(special.stdtrit(df, 0.5 + confidence / 2.0)) * sd / math.sqrt(n)


def _rounds(seed: int, offset_sd: float, round_sd: float = 0.01) -> np.ndarray:
    """Per-round log ratios of PAIRS pairs of ROUNDS rounds, each pair with its own offset."""
    rng = np.random.default_rng(seed)
    offsets = np.repeat(rng.normal(0.0, offset_sd, PAIRS), ROUNDS)
    return offsets + rng.normal(0.0, round_sd, PAIRS * ROUNDS)


def test_pairs_that_differ_are_the_unit_with_b_minus_1_degrees_of_freedom():
    r = _rounds(1, offset_sd=0.03)
    est = paired_estimate(np.ones(r.size), np.exp(r), processes=LABELS, fixed_rounds=True)
    n = r.size
    pair_means = r.reshape(PAIRS, ROUNDS).mean(axis=1)
    msb = ROUNDS * float(np.sum((pair_means - r.mean()) ** 2)) / (PAIRS - 1)

    assert est.unit is Unit.PAIR and est.df == PAIRS - 1 and est.processes == PAIRS
    assert est.sd_log == pytest.approx(math.sqrt(msb), rel=1e-12)
    half = _t_half(est.sd_log, n, PAIRS - 1)
    assert (math.log(est.low), math.log(est.high)) == pytest.approx(
        (est.mean_log - half, est.mean_log + half), rel=1e-12
    )
    # the same as the t interval over the pair means: equal pairs, so sqrt(MSB / n) is their SE
    se_means = float(np.std(pair_means, ddof=1)) / math.sqrt(PAIRS)
    assert est.se_log == pytest.approx(se_means, rel=1e-12)
    # wider than the rounds' n − 1 would make it at the same scale, by t(5) / t(35)
    old = _t_half(est.sd_log, n, n - 1)
    assert half / old == pytest.approx(
        special.stdtrit(PAIRS - 1, 0.975) / special.stdtrit(n - 1, 0.975)
    )
    assert half > 1.2 * old
    # the p-value, another level and Holm's interval all read the same degrees of freedom
    z = abs(est.mean_log) / est.se_log
    assert est.p_value == pytest.approx(2.0 * special.stdtr(PAIRS - 1, -z), rel=1e-12)
    assert est.interval(0.95) == pytest.approx((est.low, est.high), rel=1e-12)
    hi99 = est.interval(0.99)[1]
    assert math.log(hi99) - est.mean_log == pytest.approx(_t_half(est.sd_log, n, 5, 0.99))
    (row,) = adjust([est])
    assert (row.low, row.high) == pytest.approx((est.low, est.high), rel=1e-12)
    assert row.p_holm == pytest.approx(est.p_value, rel=1e-12)


def test_pairs_that_agree_keep_the_rounds_and_n_minus_1():
    r = _rounds(2, offset_sd=0.0)
    # every pair's mean set equal: MSB = 0, no larger than the rounds' variance
    r = r - np.repeat(r.reshape(PAIRS, ROUNDS).mean(axis=1), ROUNDS) + r.mean()
    labelled = paired_estimate(np.ones(r.size), np.exp(r), processes=LABELS, fixed_rounds=True)
    alone = paired_estimate(np.ones(r.size), np.exp(r), fixed_rounds=True)

    assert labelled.unit is Unit.ROUND and labelled.df == r.size - 1
    assert labelled.sd_log == pytest.approx(float(np.std(r, ddof=1)), rel=1e-12)
    assert (labelled.low, labelled.high, labelled.p_value) == pytest.approx(
        (alone.low, alone.high, alone.p_value), rel=1e-12
    )


def test_one_process_is_unchanged():
    r = _rounds(3, offset_sd=0.03)
    one = paired_estimate(np.ones(r.size), np.exp(r), processes=[7] * r.size, fixed_rounds=True)
    alone = paired_estimate(np.ones(r.size), np.exp(r), fixed_rounds=True)

    assert one.unit is Unit.ROUND and one.df == r.size - 1 and one.processes == 1
    assert one == alone
    half = _t_half(float(np.std(r, ddof=1)), r.size, r.size - 1)
    assert math.log(one.high) - one.mean_log == pytest.approx(half, rel=1e-12)


def test_the_confidence_sequence_keeps_its_n_rounds_at_the_pairs_scale():
    r = _rounds(4, offset_sd=0.03)
    est = paired_estimate(np.ones(r.size), np.exp(r), processes=LABELS)
    # the scale and its unit are reported alike; the sequence itself takes no degrees of freedom
    assert est.unit is Unit.PAIR and est.df == PAIRS - 1 and not est.fixed_rounds
    half = sequential.half_width_log(r.size, est.sd_log, 0.05)
    assert math.log(est.high) - est.mean_log == pytest.approx(half, rel=1e-12)
    assert est.p_value == pytest.approx(sequential.p_value(r.size, est.mean_log, est.sd_log))


def test_heavy_tailed_rounds_with_a_pair_offset_are_covered_at_the_stated_rate():
    """t(3) rounds plus a pair offset of one round SD, 4 pairs of 6 rounds (24 rounds): the B − 1
    interval holds the truth at ~95%; the n − 1 one at the same scale would hold it at ~88%
    (benchmarks/pair_unit_coverage.py's synthetic table)."""
    rng = np.random.default_rng(5)
    pairs, runs, sd = 4, 1500, 0.013
    labels = np.repeat(np.arange(pairs), ROUNDS)
    covered = covered_n_minus_1 = units = 0
    for _ in range(runs):
        r = sd * rng.standard_t(3, pairs * ROUNDS) / math.sqrt(3.0)
        r += np.repeat(rng.normal(0.0, sd, pairs), ROUNDS)
        est = paired_estimate(np.ones(r.size), np.exp(r), processes=labels, fixed_rounds=True)
        covered += est.low <= 1.0 <= est.high
        half = _t_half(est.sd_log, est.n, est.n - 1)
        covered_n_minus_1 += abs(est.mean_log) <= half
        units += est.unit is Unit.PAIR
    coverage, before = covered / runs, covered_n_minus_1 / runs
    message = f"B − 1: {coverage:.1%}, n − 1: {before:.1%}, pairs the unit in {units / runs:.0%}"
    print(message)
    assert 0.93 <= coverage <= 0.975, message
    assert before <= coverage - 0.03, message
