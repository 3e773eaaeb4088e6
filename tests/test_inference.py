"""Tests for fusebench.analysis.inference: hand-checked numbers, PR 15587's rows, and the
simulations behind the rules.

Every simulation is seeded and sized so the whole file runs in seconds; nothing here is timed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from fusebench.analysis.inference import (
    OUTLIER_MIN_ROUNDS,
    STALL_ALPHA,
    STALLS_BASELINE,
    STALLS_NEW,
    Adjusted,
    PairedEstimate,
    RoundsMean,
    adjust,
    outlier_rounds,
    paired_estimate,
    rounds_needed,
    sign_test_p,
    slower_beyond,
    verdict,
)
from fusebench.present.format import verdict_text

PR15587_BASELINES = [18777, 153.8, 6980, 99.1, 3957, 101.3, 531, 21.4]
PR15587_DELTAS_PCT = [16.6, 15.0, 15.8, 11.6, 10.5, 6.1, 11.7, 4.8]
CLAIMS = ("faster", "slower")

Noise = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]
# analysis.sequential.RHO, written out so the closed forms below are checked independently
RHO = 0.5


def _sequence(r: np.ndarray, confidence: float) -> tuple[float, float]:
    """The confidence sequence's bounds on the ratio scale, from Lai's closed form."""
    n, alpha = r.size, 1.0 - confidence
    c = (n + RHO) * (1.0 - (alpha**2 * RHO / (n + RHO)) ** (1.0 / n))
    if n <= c:
        return 0.0, math.inf  # unbounded so early at this level
    half = r.std(ddof=1) * math.sqrt(c * (n - 1) / (n * (n - c)))
    return math.exp(r.mean() - half), math.exp(r.mean() + half)


def _sequence_p(r: np.ndarray) -> float:
    """1 / M_n(0), the mixture martingale at a ratio of 1."""
    n, s, v = r.size, float(r.sum()), float((r**2).sum())
    return min(
        1.0, 1.0 / (math.sqrt(RHO / (n + RHO)) * (1.0 - s * s / ((n + RHO) * v)) ** (-n / 2.0))
    )


def _words(baseline: np.ndarray, new: np.ndarray, **kwargs: float) -> list[str]:
    """Verdict words for the rows of one table (row i = baseline[i], new[i])."""
    rows = adjust([paired_estimate(b, x) for b, x in zip(baseline, new, strict=True)])
    return [verdict(a, **kwargs).word for a in rows]


def _row(p: float, *, df: int = 9, se: float = 0.01) -> PairedEstimate:
    """An estimate with a chosen anytime-valid p (for Holm checks), consistent with its own
    interval."""
    from scipy.optimize import brentq

    from fusebench.analysis import sequential

    n, sd = df + 1, se * math.sqrt(df + 1)
    mean = (
        brentq(lambda m: sequential.p_value(n, m, sd) - p, 0.0, 1.0, xtol=1e-14) if p < 1 else 0.0
    )
    half = sequential.half_width_log(n, sd, 0.05)
    low, high = math.exp(mean - half), math.exp(mean + half)
    chosen = RoundsMean(
        n=df + 1,
        mean_log=mean,
        sd_log=se * math.sqrt(df + 1),
        se_log=se,
        df=df,
        ratio=math.exp(mean),
        low=float(low),
        high=float(high),
        p_value=p,
    )
    return PairedEstimate(
        chosen=chosen,
        excluded=0,
        baseline_gmean=100.0,
        new_gmean=100.0 * math.exp(mean),
        confidence=0.95,
    )


# --- the estimate itself --------------------------------------------------------------------------


def test_hand_checked_example() -> None:
    baseline = np.array([100.0, 102.0, 98.0, 101.0])
    new = np.array([110.0, 111.0, 108.0, 112.0])
    r = np.log(new / baseline)
    est = paired_estimate(baseline, new)

    assert est.n == 4 and est.excluded == 0 and est.df == 3
    assert est.mean_log == pytest.approx(r.mean(), rel=1e-12)
    assert est.sd_log == pytest.approx(r.std(ddof=1), rel=1e-12)
    assert est.se_log == pytest.approx(r.std(ddof=1) / 2, rel=1e-12)
    assert (est.low, est.high) == pytest.approx(_sequence(r, 0.95), rel=1e-12)
    assert est.p_value == pytest.approx(_sequence_p(r), rel=1e-9)
    assert est.baseline_gmean == pytest.approx(stats.gmean(baseline), rel=1e-12)
    assert est.new_gmean == pytest.approx(stats.gmean(new), rel=1e-12)
    # What a reader checks by hand in the table: New / Baseline - 1 = Δ.
    assert est.new_gmean / est.baseline_gmean == pytest.approx(est.ratio, rel=1e-15)
    assert est.delta_pct == pytest.approx((est.new_gmean / est.baseline_gmean - 1) * 100, rel=1e-12)
    assert est.half_width_pct == pytest.approx((est.high - est.low) / 2 * 100)
    assert (est.low_pct, est.high_pct) == pytest.approx(((est.low - 1) * 100, (est.high - 1) * 100))
    assert est.interval(0.99) == (0.0, math.inf) == _sequence(r, 0.99)  # 4 rounds: unbounded at 99%
    assert est.interval(0.9) == pytest.approx(_sequence(r, 0.9), rel=1e-12)


def test_nan_pairs_are_dropped() -> None:
    est = paired_estimate([100.0, np.nan, 101.0, 99.0], [110.0, 120.0, np.nan, 108.0])
    assert est == paired_estimate([100.0, 99.0], [110.0, 108.0])
    assert est.n == 2


@pytest.mark.parametrize(
    ("baseline", "new"),
    [
        ([], []),
        ([np.nan, 100.0], [110.0, np.nan]),
        ([100.0, 101.0], [110.0]),
        ([100.0, 0.0], [110.0, 111.0]),
        ([100.0, -1.0], [110.0, 111.0]),
        ([100.0, np.inf], [110.0, 111.0]),
    ],
)
def test_invalid_input_raises(baseline: list[float], new: list[float]) -> None:
    with pytest.raises(ValueError):
        paired_estimate(baseline, new)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5, -0.1])
def test_confidence_must_be_a_level(confidence: float) -> None:
    with pytest.raises(ValueError):
        paired_estimate([100.0, 101.0], [110.0, 111.0], confidence=confidence)


def test_single_round_has_no_interval() -> None:
    est = paired_estimate([100.0], [110.0])
    assert est.n == 1 and not est.has_interval
    assert est.ratio == pytest.approx(1.1)
    assert math.isnan(est.low) and math.isnan(est.high) and math.isnan(est.p_value)
    (row,) = adjust([est])
    assert math.isnan(row.p_holm) and math.isnan(row.half_width_pct)
    assert verdict(row).word == "needs more rounds"
    assert not slower_beyond(est, 0.0)


def test_zero_spread_collapses_the_interval() -> None:
    faster = paired_estimate([100.0] * 5, [116.6] * 5)
    assert faster.low == faster.high == faster.ratio
    assert faster.p_value == 0.0 and faster.sd_log == 0.0
    assert [verdict(a).word for a in adjust([faster])] == ["faster"]

    same = paired_estimate([100.0] * 5, [100.0] * 5)
    assert same.p_value == 1.0 and same.low == same.high == 1.0
    assert verdict(adjust([same])[0]).word == "no change"

    # Exactly proportional rounds under drift: log/exp rounding must not count as spread.
    drift = np.linspace(90.0, 110.0, 7)
    assert paired_estimate(drift, drift * 1.166).p_value == 0.0


# --- PR 15587 and other known truths --------------------------------------------------------------


def _pr15587_trials(sigma: float, seed: int = 15587) -> tuple[np.ndarray, np.ndarray]:
    """Eight rows x 8 rounds with the PR's baselines and deltas, independent lognormal noise on
    every trial (8: at a table's Bonferroni level the confidence sequence is unbounded below 6
    rounds)."""
    rng = np.random.default_rng(seed)
    base = np.array(PR15587_BASELINES)[:, None] * np.ones((1, 8))
    truth = 1 + np.array(PR15587_DELTAS_PCT)[:, None] / 100
    return base * rng.lognormal(0, sigma, base.shape), base * truth * rng.lognormal(
        0, sigma, base.shape
    )


def test_pr15587_rows_are_all_faster_after_holm() -> None:
    baseline, new = _pr15587_trials(sigma=0.01)
    rows = adjust([paired_estimate(b, x) for b, x in zip(baseline, new, strict=True)])
    p_holm = ", ".join(f"{a.p_holm:.2g}" for a in rows)
    assert [verdict(a).word for a in rows] == ["faster"] * 8, f"adjusted p: {p_holm}"


def test_pr15587_perfectly_paired_is_faster() -> None:
    assert _words(*_pr15587_trials(sigma=0.0)) == ["faster"] * 8


def test_three_percent_at_ten_rounds_is_faster() -> None:
    rng = np.random.default_rng(3)
    baseline = 100 * rng.lognormal(0, 0.01, 10)
    new = 103 * rng.lognormal(0, 0.01, 10)
    assert _words(baseline[None], new[None]) == ["faster"]


def test_no_change_inside_the_margin() -> None:
    rng = np.random.default_rng(4)
    baseline = 100 * rng.lognormal(0, 0.002, 12)
    new = 100 * rng.lognormal(0, 0.002, 12)
    assert _words(baseline[None], new[None], margin_pct=2.0) == ["no change"]


def test_inconclusive_states_its_precision() -> None:
    rng = np.random.default_rng(5)
    baseline = 100 * rng.lognormal(0, 0.05, 5)
    new = 100 * rng.lognormal(0, 0.05, 5)
    (row,) = adjust([paired_estimate(baseline, new)])
    v = verdict(row)
    assert v.word == "inconclusive"
    match = re.fullmatch(r"inconclusive \(±(\d+\.\d)%\)", verdict_text(v))
    assert match, verdict_text(v)
    assert float(match.group(1)) == pytest.approx(row.half_width_pct, abs=0.05)
    assert row.half_width_pct > 2.0


def test_too_few_rounds() -> None:
    (row,) = adjust([paired_estimate([100.0, 101.0], [130.0, 131.0])])
    v = verdict(row, min_rounds=3)
    assert (v.word, verdict_text(v)) == ("needs more rounds", "needs ≥ 3 rounds")
    with pytest.raises(ValueError):
        verdict(row, min_rounds=1)


# --- Holm -----------------------------------------------------------------------------------------


def test_holm_matches_the_step_down_and_keeps_order() -> None:
    p = [0.04, 0.001, 0.5, 0.012, 0.03]
    rows = adjust([_row(x) for x in p])
    # By hand: sorted 0.001, 0.012, 0.03, 0.04, 0.5 times 5, 4, 3, 2, 1 -> 0.005, 0.048, 0.09,
    # 0.08 -> 0.09, 0.5.
    expected = [0.09, 0.005, 0.5, 0.048, 0.09]
    assert [a.p_holm for a in rows] == pytest.approx(expected)
    assert [a.estimate.p_value for a in rows] == p
    assert adjust([_row(0.6), _row(0.7)])[0].p_holm == 1.0  # capped


def test_holm_interval_level_and_duality() -> None:
    p = [0.004, 0.03, 0.04, 0.2]
    rows = adjust([_row(x) for x in p], alpha=0.05)
    # No carry-over for the first two: Holm's level for rank k of m = 4 is 1 - alpha / (m - k + 1).
    assert rows[0].level == pytest.approx(1 - 0.05 / 4)
    assert rows[1].level == pytest.approx(1 - 0.05 / 3)
    # Rank 3 inherits rank 2's 0.09 by monotonicity; its interval widens so it still agrees with
    # p_holm.
    assert rows[2].p_holm == pytest.approx(0.09)
    assert rows[2].level == pytest.approx(1 - 0.05 * 0.04 / 0.09)
    for a in rows:
        assert (a.p_holm < 0.05) == (not a.low <= 1.0 <= a.high)
        assert a.low <= a.estimate.low and a.high >= a.estimate.high


def test_rows_without_an_interval_stay_out_of_the_family() -> None:
    lone = paired_estimate([100.0], [150.0])
    rows = adjust([lone, _row(0.03)])
    assert math.isnan(rows[0].p_holm)
    assert rows[1].p_holm == pytest.approx(0.03)  # m = 1, not 2


def test_family_wise_false_positives_on_aa_tables() -> None:
    """A/A tables of 8 rows, 5% per-trial noise, 5-12 rounds: how often does any row claim a
    difference?

    With 8 independent exact tests Holm's family-wise rate is 1 - (1 - 0.05/8)^8 = 4.89%, not below
    5% with room to spare, so the bound allows Monte Carlo error (3 SE). The second check is
    sharper: on the same tables, the outlier rule may add at most half a point to what the plain
    paired t-test with Holm does.
    """
    rng = np.random.default_rng(2024)
    tables, claims, reference = 2000, 0, 0
    for n in range(5, 13):
        count = tables // 8
        log_b = rng.normal(0, 0.05, (count, 8, n))
        log_n = rng.normal(0, 0.05, (count, 8, n))
        for b, x in zip(np.exp(log_b), np.exp(log_n), strict=True):
            claims += any(w in CLAIMS for w in _words(100 * b, 100 * x))
        plain_p = stats.ttest_1samp(log_n - log_b, 0.0, axis=2).pvalue
        reference += int(np.sum(_holm_rejects_any(plain_p)))
    rate, plain = claims / tables, reference / tables
    se = math.sqrt(0.05 * 0.95 / tables)
    message = (
        f"A/A family-wise rate {rate:.2%} over {tables} "
        f"tables (plain t + Holm: {plain:.2%}, SE {se:.2%})"
    )
    assert rate <= 0.05 + 3 * se, message
    assert rate <= plain + 0.005, message


def _holm_rejects_any(p: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Independent reference: does Holm reject anything in each row of p (tables x hypotheses)?"""
    m = p.shape[-1]
    adjusted = np.maximum.accumulate(np.sort(p, axis=-1) * (m - np.arange(m)), axis=-1)
    return (adjusted < alpha).any(axis=-1)


# --- coverage under heavy tails -------------------------------------------------------------------


def _contaminated(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """2% lognormal noise; each trial independently loses 40% with probability 5% (same on both
    sides)."""
    return rng.lognormal(0, 0.02, shape) * np.where(rng.random(shape) < 0.05, 0.6, 1.0)


def _student_t3(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Student-t(3) noise on log throughput, scale 2%."""
    return np.exp(0.02 * rng.standard_t(3, shape))


@pytest.mark.parametrize("noise", [_contaminated, _student_t3], ids=["drop40", "t3"])
@pytest.mark.parametrize("n", [5, 8, 12])
def test_coverage_under_heavy_tails(noise: Noise, n: int) -> None:
    # Noise is drawn the same way for both sides, so the true mean log ratio is exactly log(truth).
    rng = np.random.default_rng(1000 + n)
    reps, truth = 3000, 1.07
    baseline = 100 * noise(rng, (reps, n))
    new = 100 * truth * noise(rng, (reps, n))
    ests = [paired_estimate(b, x) for b, x in zip(baseline, new, strict=True)]
    coverage = np.mean([e.low <= truth <= e.high for e in ests])
    assert coverage >= 0.93, f"95% interval covered {coverage:.1%} at n={n} ({reps} replications)"


# --- the outlier rule -----------------------------------------------------------------------------


def test_one_bad_trial_cannot_swing_the_row() -> None:
    rng = np.random.default_rng(40)
    baseline = 100 * rng.lognormal(0, 0.01, 12)
    new = 110 * rng.lognormal(0, 0.01, 12)
    clean = paired_estimate(baseline, new)
    hit = new.copy()
    hit[7] *= 0.6  # one trial of one side loses 40%
    est = paired_estimate(baseline, hit)

    plain_shift = (np.exp(np.mean(np.log(hit / baseline))) - clean.ratio) * 100
    assert abs(plain_shift) > 3.0  # what a plain mean would do
    assert abs(est.delta_pct - clean.delta_pct) < 1.0
    assert clean.excluded == 0 and est.excluded == 1 and est.n == 11
    # A lone wild round says nothing about which arm stalls: it stays trimmed, counted against the
    # arm it hit.
    assert (est.excluded_new, est.excluded_baseline, est.stalls, est.over_all_rounds) == (
        1,
        0,
        None,
        False,
    )
    assert outlier_rounds(np.log(hit / baseline)).tolist() == [i == 7 for i in range(12)]
    # The excluded round leaves the mean but not the spread: the interval widens instead of
    # narrowing.
    assert est.sd_log > np.std(np.delete(np.log(hit / baseline), 7), ddof=1)


def test_outlier_rule_needs_enough_rounds_and_real_spread() -> None:
    short = np.log([1.1] * (OUTLIER_MIN_ROUNDS - 2) + [0.6])
    assert not outlier_rounds(short).any()
    # Near-identical ratios: the floor keeps a 2% round in.
    assert not outlier_rounds(np.log([1.10, 1.10, 1.10, 1.10, 1.10, 1.12])).any()


# --- helpers for precision and the gate -----------------------------------------------------------


@pytest.mark.parametrize(
    ("sd_log", "target", "confidence"), [(0.02, 1.0, 0.95), (0.05, 2.0, 0.99), (0.01, 5.0, 0.95)]
)
def test_rounds_needed_is_the_smallest_n(sd_log: float, target: float, confidence: float) -> None:
    def half_width_pct(n: int) -> float:
        # any rounds with this SD: only n, the SD and the level matter
        r = np.array([sd_log, -sd_log] * n)[:n]
        r = (r - r.mean()) / r.std(ddof=1) * sd_log
        low, high = _sequence(r, confidence)
        return 100 * math.sinh(math.log(high / low) / 2)

    n = rounds_needed(sd_log, target, confidence)
    assert half_width_pct(n) <= target
    assert n == 2 or half_width_pct(n - 1) > target


def test_rounds_needed_edges() -> None:
    assert rounds_needed(0.0, 1.0) == 2
    for bad in [(-0.1, 1.0), (math.nan, 1.0), (0.02, 0.0)]:
        with pytest.raises(ValueError):
            rounds_needed(*bad)


def test_slower_beyond_needs_the_whole_interval() -> None:
    rng = np.random.default_rng(6)
    baseline = 100 * rng.lognormal(0, 0.01, 10)
    clear = paired_estimate(baseline, 0.90 * baseline * rng.lognormal(0, 0.01, 10))
    assert slower_beyond(clear, 5.0)
    assert not slower_beyond(clear, 15.0)
    noisy = paired_estimate(baseline[:3], 0.90 * baseline[:3] * rng.lognormal(0, 0.08, 3))
    assert noisy.delta_pct < -5.0 and noisy.high_pct > -5.0
    assert not slower_beyond(noisy, 5.0)  # a point estimate alone never fails the gate
    (adjusted,) = adjust([clear])
    assert isinstance(adjusted, Adjusted) and slower_beyond(adjusted, 5.0)
    with pytest.raises(ValueError):
        slower_beyond(clear, -1.0)


# --- stalls: one arm loses more rounds to the outlier rule than the other -------------------------


def test_sign_test_is_the_exact_binomial() -> None:
    for against_new, against_baseline in [
        (0, 0),
        (1, 0),
        (5, 0),
        (6, 0),
        (5, 1),
        (3, 3),
        (0, 7),
        (9, 2),
    ]:
        k = against_new + against_baseline
        expected = 1.0 if k == 0 else stats.binomtest(against_new, k, 0.5).pvalue
        assert sign_test_p(against_new, against_baseline) == pytest.approx(expected, rel=1e-12)
    # the fewest one-sided exclusions that are significant
    assert sign_test_p(6, 0) == pytest.approx(2 / 64)


def _stalling(
    seed: int, n: int = 40, stalls: tuple[int, ...] = (3, 9, 15, 22, 30, 37)
) -> tuple[np.ndarray, ...]:
    """n rounds, new 20% faster with 1% noise, except the listed rounds where new loses 40%."""
    rng = np.random.default_rng(seed)
    baseline = 100 * rng.lognormal(0, 0.01, n)
    new = 120 * rng.lognormal(0, 0.01, n)
    new[list(stalls)] *= 0.6
    return baseline, new


def test_a_stalling_new_arm_is_named_and_delta_uses_every_round() -> None:
    baseline, new = _stalling(7)
    r = np.log(new / baseline)
    est = paired_estimate(baseline, new)
    assert (est.excluded_new, est.excluded_baseline, est.outliers) == (6, 0, 6)
    assert est.sign_p == pytest.approx(2 / 64)
    assert est.stalls == STALLS_NEW and est.over_all_rounds
    # The chosen estimate is the plain paired interval over all 40 rounds; the trimmed one is kept
    # beside it.
    assert (
        est.n == 40 and est.excluded == 0 and est.all_rounds is not None and est.trimmed is not None
    )
    assert est.mean_log == pytest.approx(r.mean(), rel=1e-12)
    assert (est.low, est.high) == pytest.approx(_sequence(r, 0.95), rel=1e-12)
    assert est.p_value == pytest.approx(_sequence_p(r), rel=1e-9)
    assert (est.ratio, est.low, est.high) == (
        est.all_rounds.ratio,
        est.all_rounds.low,
        est.all_rounds.high,
    )
    assert est.trimmed.n == 34 and est.trimmed.delta_pct == pytest.approx(20.0, abs=1.0)
    # the stalls cost real throughput, and the row now says so
    assert est.delta_pct < est.trimmed.low_pct
    assert est.new_gmean / est.baseline_gmean == pytest.approx(est.ratio, rel=1e-15)
    # Holm and the verdict follow the chosen estimate.
    (adjusted,) = adjust([est])
    assert adjusted.low <= est.low and adjusted.high >= est.high


def test_a_stalling_baseline_is_named_too() -> None:
    baseline, new = _stalling(8)
    est = paired_estimate(new, baseline)  # swap the arms: now the baseline stalls
    assert (est.excluded_new, est.excluded_baseline) == (0, 6)
    assert est.stalls == STALLS_BASELINE and est.over_all_rounds


def test_clean_rows_keep_the_trimmed_estimate() -> None:
    rng = np.random.default_rng(9)
    baseline = 100 * rng.lognormal(0, 0.01, 20)
    est = paired_estimate(baseline, 110 * rng.lognormal(0, 0.01, 20))
    assert est.outliers == 0 and est.stalls is None and not est.over_all_rounds
    assert est.trimmed == est.all_rounds
    assert (est.n, est.ratio, est.low, est.high) == (
        est.trimmed.n,
        est.trimmed.ratio,
        est.trimmed.low,
        est.trimmed.high,
    )


def _stalls_of(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Each trial independently loses 40% with probability 5%: a re-trace or a kernel fallback."""
    return np.where(rng.random(shape) < 0.05, 0.6, 1.0)


@pytest.mark.parametrize("n", [6, 8, 12, 20, 40])
def test_aa_with_symmetric_stalls_rarely_names_an_arm(n: int) -> None:
    """Both arms stall alike (5% of trials 40% slower, 2% lognormal noise): the flag is a false
    alarm, and the chosen interval must still cover the true all-rounds mean log ratio, 0."""
    rng = np.random.default_rng(6000 + n)
    reps = 1500
    baseline = 100 * rng.lognormal(0, 0.02, (reps, n)) * _stalls_of(rng, (reps, n))
    new = 100 * rng.lognormal(0, 0.02, (reps, n)) * _stalls_of(rng, (reps, n))
    ests = [paired_estimate(b, x) for b, x in zip(baseline, new, strict=True)]
    flagged = np.mean([e.stalls is not None for e in ests])
    coverage = np.mean([e.low <= 1.0 <= e.high for e in ests])
    message = (
        f"n={n}: an arm named in {flagged:.1%} of {reps} A/A "
        f"rows, chosen interval covered 0 in {coverage:.1%}"
    )
    assert flagged <= STALL_ALPHA, message
    assert coverage >= 0.94, message


def test_one_stalling_arm_is_caught_and_its_delta_covered() -> None:
    """new is 3% faster but 5% of its trials lose 40%: the true all-rounds Δ is exp(log 1.03 + 0.05
    log 0.6) − 1 = +0.4%, which the trimmed mean (≈ +3%) misses. n = 40, 2% lognormal noise on both
    arms."""
    rng = np.random.default_rng(4040)
    reps, n = 1500, 40
    truth = math.exp(math.log(1.03) + 0.05 * math.log(0.6))
    baseline = 100 * rng.lognormal(0, 0.02, (reps, n))
    new = 103 * rng.lognormal(0, 0.02, (reps, n)) * _stalls_of(rng, (reps, n))
    ests = [paired_estimate(b, x) for b, x in zip(baseline, new, strict=True)]
    named = np.mean([e.stalls == STALLS_NEW for e in ests])
    wrong = np.mean([e.stalls == STALLS_BASELINE for e in ests])
    over_all = np.mean([e.over_all_rounds for e in ests])
    chosen = np.mean([e.low <= truth <= e.high for e in ests])
    trimmed = np.mean([e.trimmed.low <= truth <= e.trimmed.high for e in ests])
    message = (
        f"new named in {named:.1%}, baseline in {wrong:.1%}, Δ over all rounds in {over_all:.1%}; "
        f"coverage of the all-rounds Δ: chosen {chosen:.1%}, trimmed {trimmed:.1%}"
    )
    print(message)
    assert wrong == 0.0, message
    assert chosen >= trimmed + 0.15, message


def test_rounds_from_processes_that_differ_widen_the_interval_by_their_spread():
    rng = np.random.default_rng(4)
    base = np.exp(rng.normal(0.0, 0.01, 12))
    # two pairs, offsets ±5%
    new = base * np.exp(rng.normal(0.0, 0.01, 12) + np.repeat([0.05, -0.05], 6))
    pooled = paired_estimate(base, new)
    by_pair = paired_estimate(base, new, processes=[0] * 6 + [1] * 6)
    assert by_pair.processes == 2 and pooled.processes == 1
    assert by_pair.mean_log == pytest.approx(pooled.mean_log)
    # MSB = 6 · Σ (pair mean − mean)² / 1 ≈ 6 · 2 · 0.05² = 0.03: an SD near 0.17, not the rounds'
    # 0.05.
    assert by_pair.sd_log == pytest.approx(math.sqrt(0.03), rel=0.2)
    assert by_pair.high - by_pair.low > 2 * (pooled.high - pooled.low)


def test_rounds_from_processes_that_agree_keep_the_rounds_spread():
    rng = np.random.default_rng(5)
    base = np.exp(rng.normal(0.0, 0.02, 12))
    new = base * np.exp(rng.normal(0.0, 0.02, 12))
    # any hashable label; the MSB is no bigger than the SD here
    labels = ["a", "a", "a", "b", "b", "b"] * 2
    same = paired_estimate(base, new, processes=labels)
    assert same.sd_log >= paired_estimate(base, new).sd_log
    with pytest.raises(ValueError, match="process labels"):
        paired_estimate(base, new, processes=labels[:5])
