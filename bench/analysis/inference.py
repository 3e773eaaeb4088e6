"""The one paired inference behind the report, the regression gate, op microbenchmarks and calibration.

Pure numpy/scipy. Throughputs are bigger-is-better, so a ratio new/baseline above 1 means faster.

Unit of evidence
    An experiment runs rounds; in each round the baseline and the new variant run once, interleaved. A round gives one
    log ratio log(new/baseline). Drift and load that hit both trials of a round cancel in it, which is the whole point
    of interleaving, so everything here works on those per-round log ratios and never on the two sides as independent
    samples.

Estimator: the mean log ratio, Δ = exp(mean log ratio) − 1
    Noise on throughput is multiplicative, so the log scale is where it is additive and roughly symmetric. The mean log
    ratio is symmetric under swapping the sides (A vs B is exactly the inverse of B vs A, which a ratio of arithmetic
    means is not), and its exponential is the ratio of the geometric means of the kept rounds. That is why the estimate
    carries `baseline_gmean` and `new_gmean`: a reader can check New / Baseline − 1 = Δ by hand.
    (`new_gmean` is computed as baseline_gmean · ratio, which is the geometric mean of new mathematically, so that the
    identity also holds to the last bit.)

Interval and test: a confidence sequence on the mean log ratio (analysis.sequential)
    95% CI = mean ± the sequence's half-width over the n kept rounds (sd as in the outlier rule below), mapped to
    the ratio scale by exp; p is the sequence's anytime-valid p-value of mean = 0, so the test is dual to the
    interval. Unlike a fixed-n t interval it stays valid at whatever round the looking stopped: the runner stops a
    cell when its rows are decided, and check --confirm and bisect pool more runs into an undecided step. It is
    exact for normal log-ratio noise at any n and any stopping rule; heavy tails and dips are simulated
    (benchmarks/sequential_coverage.py, and a small seeded run in tests/test_sequential.py).

Between processes
    A process's speed has its own offset (where its memory landed, what the allocator and the kernel cache did)
    that its rounds share and never average out. Two variants in one worker share it, so it cancels in their
    ratio; two builds run in two processes do not. So `run --against` gives each pair of workers worker_rounds
    rounds and then starts a fresh pair, records which pair ran each round (`process`), and the spread used
    above is sqrt(max(SD², MSB)), MSB the between-pair mean square (`_process_sd`): the mean then carries the
    pairs' spread as well as the rounds'. Rounds of different runs pooled in one row count as different
    processes too. With one pair the rule has nothing to see; the simulated coverage with a process offset is
    in benchmarks/sequential_coverage.py (--process-sd).

Outlier rule (the constants OUTLIER_K, OUTLIER_SCALE_FLOOR, OUTLIER_MIN_ROUNDS)
    This machine sometimes loses ~40% on a single trial. That hits one side of one round and moves a plain mean of 12
    log ratios by ~4 points. So, once there are at least OUTLIER_MIN_ROUNDS = 6 valid rounds, a round is excluded from
    the mean when its log ratio lies more than OUTLIER_K = 4.5 robust SDs from the median log ratio. The robust SD is
    the pairwise (Shamos) scale, median |r_i − r_j| over all pairs / 0.9539 (consistent for normal noise), floored at
    OUTLIER_SCALE_FLOOR = 0.01 in log units. An excluded round leaves the mean but not the spread: for the SD it counts
    as lying on the fence (median ± K · scale), the least extreme value it could have had and still be excluded. The
    excluded rounds are counted, by the arm they went against, so a report can warn (`outlier_rounds` says which they
    are), and when they go against one arm the stall rule below may put them back. Why:
    - Spread: dropping a round from the SD as well would let the rule manufacture certainty. The rule fires exactly
      when the other rounds happen to sit tightly together, so their SD alone is too small. In simulated A/A tables
      (8 rows, 5% trial noise, 5-12 rounds, 60 000 tables) the Holm family-wise rate was 4.84% for the plain t-test,
      5.67% when excluded rounds also left the SD (K = 5), and 4.87% with the fence rule used here. This is the
      trimmed-mean recipe of Tukey-McLaughlin / Yuen (trimmed rounds stay in a winsorized variance), applied to the
      rounds the rule trims instead of a fixed share from each end.
    - Scale: with the MAD instead of the pairwise scale, the MAD of 6 values is so noisy that K must be ~10 to keep
      false exclusions in clean normal samples near 1%, and then a 40% drop at 5% trial noise is never caught. The
      pairwise scale is ~86% efficient: the 99th percentile of max |r − median| / scale in clean normal samples stays
      at 3.8-4.4 for n = 6..50, so one K fits every n.
    - K = 4.5: 0.2-1.0% of clean normal rows lose a round. The fixed-n t interval this module used before then
      covered (the confidence sequence, wider at every n, covers more: benchmarks/sequential_coverage.py;
      20 000 samples per cell, n = 5, 6, 8, 12, 20): 94.8-95.4% with 5% normal trial noise, 95.0-95.2% with
      0.2%; 96.8-99.3% with 2% lognormal
      noise plus a 40% drop on 5% of trials (conservative: excluded rounds keep the interval honest, not narrow);
      95.2-95.9% with Student-t(3) trial noise. A lone 40% drop is caught in ~100% of rows at 1-2% trial noise and
      in 42-77% (n = 6-12) at 5%, where it is only ~7 SDs out; K = 5 caught 33-65% there, K = 4 let the A/A rate
      creep up (5.00%).
    - Floor 0.01: with near-identical ratios (quantised timers, a perfectly paired run) the scale collapses towards 0
      and every round would look like an outlier. With the floor, a round within K · floor = 4.5% of the median is
      never excluded; a deviation that small cannot swing the row and is ordinary noise here anyway.
    - n ≥ 6: below that a robust scale rests on too few pairs to trust, and the plain t-interval with the outlier
      kept is conservative (heavy symmetric tails widen it: 96.8% coverage at n = 5 in the contaminated model).
    - The pairwise scale breaks down when more than ~29% of the rounds are bad; the rule then excludes nothing,
      which errs on the wide side. The cost is O(n²) pairs, trivial for the tens of rounds an experiment runs.

Stalls: when one arm loses more rounds than the other (`PairedEstimate.stalls`, STALL_ALPHA)
    The outlier rule assumes a wild round is the machine's doing and hits either arm alike. A compiled function that
    now and then re-traces, or a kernel that sometimes falls back, breaks that: its slow rounds are the variant's own
    cost, and trimming them reports a speed the variant does not deliver. (Seen: a plugin softcap that stalled on ~1
    call in 16 read "faster +26.2% [+23.6%, +28.9%]" with 6 of 40 rounds left out; over all 40 rounds, which is Δ
    as the README defines it, it was +11.4%.) So each excluded round is counted against an arm: below the fence (new
    much slower than baseline in that round) against new (`excluded_new`), above it against baseline
    (`excluded_baseline`), and the mean log ratio over ALL valid rounds is kept beside the trimmed one
    (`all_rounds`, with the plain t-interval at the same confidence; `trimmed` is the estimate described above).
    - Naming an arm (`stalls`): the exact two-sided sign test of the k = excluded_new + excluded_baseline directions
      (binomial, H0 p = 1/2: under symmetric noise an excluded round is as likely to go either way) gives
      p < STALL_ALPHA = 0.05; the arm named is the one with more exclusions against it. It takes at least 6
      one-sided exclusions (p = 2/64) to name an arm, so a lone hiccup never does.
    - Δ over all rounds (`over_all_rounds`): when an arm is named, OR when the rounds trimmed away move Δ beyond the
      trimmed interval (the all-rounds point lies outside it) and at least STALL_MIN_LEAN = 2 more exclusions went
      against one arm than the other. Then Δ, its interval, Holm and the verdict use every round (a variant that is
      usually fast but sometimes stalls is a finding, not noise), `excluded` is 0, and tables show the trimmed Δ
      beside it. A lone wild round stays trimmed: one round is the outlier rule's own case and cannot tell which
      arm stalls.
    Why the sign test alone names the arm (and fails the A/B gate), not also "the all-rounds point lies outside the
    trimmed interval": symmetric stalls make that happen all the time. In simulated A/A rows (both arms: 5% of
    trials 40% slower, 2% lognormal noise; 1500 rows per n) it held in 5%, 16%, 37%, 48% and 46% of rows at n = 6,
    8, 12, 20, 40, so naming an arm on it would fail identical builds in CI. The sign test named one in 0.0-0.3%
    (tests/test_inference.py, as are the figures below unless said). Switching Δ to all rounds costs no coverage:
    the chosen 95% interval covered the true all-rounds mean log ratio (0) in 96.9-98.7% of those rows with the
    fixed-n t interval used before, and covers more with the wider confidence sequence (Δ over all
    rounds in 0-35% of them, most at n = 40).
    With one arm stalling (new 3% faster but 5% of its trials 40% slower, so the all-rounds Δ is +0.4%; n = 40,
    1500 rows) new was named in 1.4% of rows and baseline never: 40 rounds hold only 2 stalls on average, and the
    sign test needs 6 one-sided ones. Δ was taken over all rounds in 50%, and the chosen interval covered +0.4% in
    59% of rows against 40% for the trimmed one (4.8% with the fixed-n t interval used before). No rule can do
    much better here: 13% of such rows hold no stall
    at all, and the plain all-rounds interval covers in 87% (exploratory run, 1500 rows).
    Why STALL_MIN_LEAN = 2 and not 1: with 1, a lone 40% hiccup at n = 12 puts the row back to all rounds, and a
    clear +10.4% [+9.6%, +11.3%] reads +5.8% [-4.0%, +16.7%], inconclusive; the outlier rule exists to prevent
    exactly that. The price: in the one-arm case above, coverage 59% instead of 81% (exploratory run).

Degenerate cases
    No valid pair → ValueError. One round → no interval: low, high and p are NaN (`has_interval` is False) and the
    verdict asks for more rounds. Zero spread (n ≥ 2, all kept log ratios equal to within ZERO_SPREAD = 1e-12, which
    absorbs log/exp rounding of exactly proportional inputs): the interval collapses to the point and p is 0.0 when the
    ratio differs from 1, else 1.0; a perfectly paired +16.6% is then "faster", as it should be.

Holm across the rows of one table (`adjust`)
    A table tests several rows at once, so the family-wise error is controlled by Holm's step-down (uniformly more
    powerful than Bonferroni, valid under any dependence between rows). Rows with n < 2 have no p and take no part.
    Each row also gets an adjusted interval at level 1 − α / c, where c = (Holm's unadjusted step-down value) / p is
    the multiplier Holm actually applied to the row: c = m − rank + 1 (Holm's level for that row) unless a
    better-ranked row's larger adjusted p carries over by monotonicity, in which case c is a little bigger (never more
    than m, Bonferroni). That keeps the verdict exactly dual to the printed interval: p_holm < α ⇔ the adjusted
    interval excludes a ratio of 1. With c fixed at m − rank + 1 a row could show an interval excluding 1 next to a
    Holm p above α.

Verdict words (`verdict`: a VerdictWord with the figures its wording states; tables read it as quoted here,
bench.present.format.verdict_text), in the order they are decided
    - "needs ≥ N rounds" (word "needs more rounds"): fewer than min_rounds rounds were kept; nothing is claimed.
    - "faster" / "slower": p_holm < α, equivalently the Holm-adjusted interval excludes 0%; the direction is the
      estimate's sign. A real but small effect (say +0.5%, tightly measured) is still "faster".
    - "no change": the whole adjusted interval lies within ±margin_pct (2% by default): an effect larger than the
      margin is ruled out, not merely undetected.
    - "inconclusive (±X.X%)": neither; X is the adjusted half-width in percent, i.e. the size of effect this run
      could have detected. More rounds narrow it (`rounds_needed` says how many for a target).
    There is deliberately no bare "≈": absence of evidence is reported as "inconclusive" with its precision.

Gate (`slower_beyond`)
    A regression gate fails only when the whole interval lies below −limit%: a point estimate alone never fails a build.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import ArrayLike

from . import sequential

__all__ = [
    "OUTLIER_K",
    "OUTLIER_MIN_ROUNDS",
    "OUTLIER_SCALE_FLOOR",
    "STALLS_BASELINE",
    "STALLS_NEW",
    "STALL_ALPHA",
    "STALL_MIN_LEAN",
    "ZERO_SPREAD",
    "Adjusted",
    "PairedEstimate",
    "RatioInterval",
    "RoundsMean",
    "Verdict",
    "VerdictWord",
    "adjust",
    "interval_verdict",
    "outlier_rounds",
    "paired_estimate",
    "pairwise_scale",
    "rounds_needed",
    "sign_test_p",
    "slower_beyond",
    "verdict",
]

OUTLIER_K = 4.5  # robust SDs from the median log ratio beyond which a round is excluded (see module docstring)
OUTLIER_SCALE_FLOOR = 0.01  # floor on the robust SD, log units: nothing within K * floor = 4.5% is ever excluded
OUTLIER_MIN_ROUNDS = 6  # the rule applies only from this many valid rounds
ZERO_SPREAD = 1e-12  # log-ratio SD (and |mean|) at or below this counts as exactly zero
STALL_ALPHA = 0.05  # two-sided level of the sign test on the excluded rounds' directions (see "Stalls")
STALL_MIN_LEAN = 2  # net exclusions against one arm before trimmed-away rounds may move Δ to all rounds
STALLS_NEW, STALLS_BASELINE = "new", "baseline"  # the arm `PairedEstimate.stalls` names (codes, not display words)
_SHAMOS_NORMAL = 0.9538725524089398  # median |X - Y| for X, Y iid N(0, 1): sqrt(2) * Phi^-1(0.75)


class VerdictWord(StrEnum):
    """What a row's interval says, in the order `verdict` decides it (see "Verdict words"); how each reads in a
    table is bench.present's choice."""

    NEEDS_ROUNDS = "needs more rounds"
    FASTER = "faster"
    SLOWER = "slower"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"


class RatioInterval:
    """A ratio new/baseline with an interval [low, high], read as percentages (Δ, bounds, half-width)."""

    ratio: float
    low: float
    high: float

    @property
    def delta_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    @property
    def low_pct(self) -> float:
        return (self.low - 1.0) * 100.0

    @property
    def high_pct(self) -> float:
        return (self.high - 1.0) * 100.0

    @property
    def half_width_pct(self) -> float:
        return (self.high - self.low) / 2.0 * 100.0


@dataclass(frozen=True)
class RoundsMean(RatioInterval):
    """The mean log ratio over one set of rounds, with its t-interval at the estimate's confidence.

    sd_log is the log-ratio SD about mean_log (for the trimmed mean: excluded rounds counted at the fence),
    se_log = sd_log / sqrt(n), df = n - 1; low/high/p_value are NaN when n < 2.
    """

    n: int
    mean_log: float
    sd_log: float
    se_log: float
    df: int
    ratio: float
    low: float
    high: float
    p_value: float

    @property
    def has_interval(self) -> bool:
        return self.n >= 2


@dataclass(frozen=True)
class PairedEstimate(RatioInterval):
    """Mean-log-ratio estimate of new/baseline with its t-interval at `confidence`: the one Δ, Holm and the verdict
    use. That is `trimmed` (the kept rounds) unless the stall rule chose `all_rounds` (`over_all_rounds`; see "Stalls"
    in the module docstring); the flat fields n ... p_value copy the chosen one.

    excluded counts the rounds left out of the chosen mean (0 when it is over all rounds). excluded_new and
    excluded_baseline split the outlier rule's exclusions by direction: below the fence (new much slower than
    baseline in that round) against new, above it against baseline; `outliers` is their sum. sign_p is the exact
    two-sided sign test of those directions (1.0 with none). stalls is STALLS_NEW or STALLS_BASELINE when that test
    says one arm took significantly more of the exclusions, else None. baseline_gmean and new_gmean are geometric
    means over the chosen rounds, and new_gmean / baseline_gmean == ratio.
    """

    n: int
    excluded: int
    mean_log: float
    sd_log: float
    se_log: float
    df: int
    ratio: float
    low: float
    high: float
    p_value: float
    baseline_gmean: float
    new_gmean: float
    confidence: float
    excluded_new: int = 0
    excluded_baseline: int = 0
    sign_p: float = 1.0
    stalls: str | None = None
    over_all_rounds: bool = False
    trimmed: RoundsMean | None = None  # None only for estimates built by hand (tests); paired_estimate sets both
    all_rounds: RoundsMean | None = None
    processes: int = 1  # the worker processes (or pairs of them) the rounds came from

    @property
    def has_interval(self) -> bool:
        return self.n >= 2

    @property
    def outliers(self) -> int:
        return self.excluded_new + self.excluded_baseline

    def interval(self, confidence: float) -> tuple[float, float]:
        """The t-interval on the ratio scale at another level (same rounds, same estimate)."""
        _check_level(confidence, "confidence")
        lo, hi = _log_interval(self.mean_log, self.sd_log, self.n, confidence)
        return math.exp(lo), math.exp(hi)


@dataclass(frozen=True)
class Adjusted(RatioInterval):
    """One row after Holm across its table: p_holm and the interval at the row's Holm level `level`.

    p_holm, level, low and high are NaN for rows with n < 2 (they take no part in the family).
    """

    estimate: PairedEstimate
    p_holm: float
    level: float
    low: float
    high: float

    @property
    def n(self) -> int:
        return self.estimate.n

    @property
    def ratio(self) -> float:
        return self.estimate.ratio



@dataclass(frozen=True)
class Verdict:
    """A row's verdict and the figure its wording states: the interval's half-width (an inconclusive row's
    precision) and the rounds a row needs before anything is claimed."""

    word: VerdictWord
    half_width_pct: float
    min_rounds: int

    @property
    def decided(self) -> bool:
        """Faster or slower: the interval excludes a ratio of 1."""
        return self.word in (VerdictWord.FASTER, VerdictWord.SLOWER)


def outlier_rounds(log_ratios: ArrayLike) -> np.ndarray:
    """Boolean mask of the rounds the outlier rule excludes (all False below OUTLIER_MIN_ROUNDS rounds).

    A round is excluded when |r - median| > OUTLIER_K * max(pairwise scale, OUTLIER_SCALE_FLOOR); see the module
    docstring for why these constants.
    """
    r = np.asarray(log_ratios, dtype=np.float64).ravel()
    centre, reach = _fence(r)
    return np.abs(r - centre) > reach


def paired_estimate(baseline: ArrayLike, new: ArrayLike, *, confidence: float = 0.95,
                    processes: Iterable[Hashable] | None = None) -> PairedEstimate:
    """Estimate new/baseline from per-round throughputs (index i of both arrays is round i).

    Pairs with NaN on either side are dropped, then the outlier rule excludes wild rounds from the trimmed mean (they
    stay in its spread, pulled in to the fence), and the stall rule picks the trimmed mean or the mean over all
    rounds. `processes` labels each round with the worker processes that ran it (see "Between processes" in
    the module docstring); rounds of several processes widen the spread by what those processes' means differ.
    Raises ValueError for unequal lengths, no valid pair, or a non-positive / infinite throughput.
    """
    _check_level(confidence, "confidence")
    log_b, log_n, blocks = _valid_log_pairs(baseline, new, processes)
    r = log_n - log_b
    centre, reach = _fence(r)
    below, above = r < centre - reach, r > centre + reach
    drop = below | above
    kept_mean = float(np.mean(r[~drop]))
    winsorized = np.clip(r, centre - reach, centre + reach)
    trimmed = _rounds_mean(kept_mean, _process_sd(winsorized, kept_mean, blocks), int((~drop).sum()), confidence)
    all_rounds = _rounds_mean(float(np.mean(r)), _process_sd(r, float(np.mean(r)), blocks), int(r.size),
                              confidence)
    low, high = int(below.sum()), int(above.sum())
    call = _stall_call(low, high, trimmed, all_rounds)
    chosen, used = (all_rounds, np.ones_like(drop)) if call.over_all_rounds else (trimmed, ~drop)
    baseline_gmean = math.exp(float(np.mean(log_b[used])))
    return PairedEstimate(
        **{f: getattr(chosen, f) for f in _MEAN_FIELDS},
        excluded=int(r.size) - chosen.n,
        baseline_gmean=baseline_gmean,
        new_gmean=baseline_gmean * chosen.ratio,  # = exp(mean log new); keeps New / Baseline == ratio to the bit
        confidence=confidence,
        excluded_new=low,
        excluded_baseline=high,
        sign_p=call.sign_p,
        stalls=call.stalls,
        over_all_rounds=call.over_all_rounds,
        trimmed=trimmed,
        all_rounds=all_rounds,
        processes=int(np.unique(blocks).size),
    )


_MEAN_FIELDS = ("n", "mean_log", "sd_log", "se_log", "df", "ratio", "low", "high", "p_value")


@dataclass(frozen=True)
class _StallCall:
    sign_p: float
    stalls: str | None
    over_all_rounds: bool


def _stall_call(low: int, high: int, trimmed: RoundsMean, all_rounds: RoundsMean) -> _StallCall:
    """The stall rule (module docstring, "Stalls"): which arm the exclusions lean to, whether that is significant,
    and whether Δ must then be taken over all rounds."""
    p = sign_test_p(low, high)
    lean = STALLS_NEW if low > high else STALLS_BASELINE if high > low else None
    significant = lean is not None and p < STALL_ALPHA
    # The trimmed-away rounds move Δ beyond the trimmed interval: trimming would hide a material share of Δ. A lone
    # wild round (or a one-round lean) is the outlier rule's own case and cannot say which arm stalls.
    leaning = abs(low - high) >= STALL_MIN_LEAN
    shifted = leaning and trimmed.has_interval and not trimmed.low <= all_rounds.ratio <= trimmed.high
    return _StallCall(p, lean if significant else None, significant or shifted)


def sign_test_p(against_new: int, against_baseline: int) -> float:
    """Exact two-sided binomial (sign) test of k = against_new + against_baseline excluded rounds, H0 p = 1/2.

    Two-sided as twice the smaller tail, capped at 1 (the binomial is symmetric at p = 1/2, so this equals the
    "as likely or less likely" definition); 1.0 when nothing was excluded.
    """
    k = against_new + against_baseline
    if k == 0:
        return 1.0
    tail = sum(math.comb(k, i) for i in range(min(against_new, against_baseline) + 1))
    return min(1.0, 2.0 * tail / 2.0**k)


def _rounds_mean(mean: float, sd: float, n: int, confidence: float) -> RoundsMean:
    se = sd / math.sqrt(n) if n >= 2 else math.nan
    lo, hi = _log_interval(mean, sd, n, confidence)
    return RoundsMean(n=n, mean_log=mean, sd_log=sd, se_log=se, df=n - 1, ratio=math.exp(mean), low=math.exp(lo),
                      high=math.exp(hi), p_value=_p_value(mean, sd, n))


def adjust(estimates: Sequence[PairedEstimate], *, alpha: float = 0.05) -> list[Adjusted]:
    """Holm across the rows of one table; the output keeps the input order.

    p_holm is the step-down adjusted p (monotone in the rank, capped at 1). The row's interval is the t-interval at
    level 1 - alpha / c with c the multiplier Holm applied to it (m - rank + 1 unless monotonicity raised it), so
    p_holm < alpha exactly when that interval excludes a ratio of 1. Rows with n < 2 get NaNs and do not count in m.
    """
    _check_level(alpha, "alpha")
    family = sorted((i for i, e in enumerate(estimates) if e.has_interval), key=lambda i: estimates[i].p_value)
    m = len(family)
    done: dict[int, Adjusted] = {}
    running = 0.0
    for rank, i in enumerate(family, start=1):
        est = estimates[i]
        running = max(running, (m - rank + 1) * est.p_value)  # step-down: never below a better-ranked row
        c = running / est.p_value if est.p_value > 0 else float(m - rank + 1)
        level = 1.0 - alpha / c
        low, high = est.interval(level)
        done[i] = Adjusted(est, p_holm=min(1.0, running), level=level, low=low, high=high)
    nan = math.nan
    return [done.get(i, Adjusted(est, nan, nan, nan, nan)) for i, est in enumerate(estimates)]


def verdict(adjusted: Adjusted, *, margin_pct: float = 2.0, min_rounds: int = 3, alpha: float = 0.05) -> Verdict:
    """The row's word; see "Verdict words" in the module docstring for what each one promises."""
    if min_rounds < 2:
        raise ValueError(f"min_rounds must be at least 2 (an interval needs two rounds), got {min_rounds}")
    if not margin_pct >= 0:
        raise ValueError(f"margin_pct must be >= 0, got {margin_pct}")
    _check_level(alpha, "alpha")
    if adjusted.n < min_rounds:
        word = VerdictWord.NEEDS_ROUNDS
    elif adjusted.p_holm < alpha:
        word = VerdictWord.FASTER if adjusted.ratio > 1.0 else VerdictWord.SLOWER
    elif adjusted.low >= 1.0 - margin_pct / 100.0 and adjusted.high <= 1.0 + margin_pct / 100.0:
        word = VerdictWord.NO_CHANGE
    else:
        word = VerdictWord.INCONCLUSIVE
    return Verdict(word, adjusted.half_width_pct, min_rounds)


def interval_verdict(low: float, high: float, n: int, *, margin_pct: float = 2.0, min_rounds: int = 3) -> Verdict:
    """The same words for an interval that did not come from `adjust` (say, an unpaired comparison of two runs):
    faster or slower when it excludes a ratio of 1, no change when it lies within ±margin_pct, else inconclusive."""
    if n < min_rounds or math.isnan(low):
        word = VerdictWord.NEEDS_ROUNDS
    elif low > 1.0 or high < 1.0:
        word = VerdictWord.FASTER if low > 1.0 else VerdictWord.SLOWER
    elif low >= 1.0 - margin_pct / 100.0 and high <= 1.0 + margin_pct / 100.0:
        word = VerdictWord.NO_CHANGE
    else:
        word = VerdictWord.INCONCLUSIVE
    return Verdict(word, (high - low) / 2.0 * 100.0, min_rounds)


def rounds_needed(sd_log: float, target_half_width_pct: float, confidence: float = 0.95) -> int:
    """Smallest n (≥ 2) whose interval at this log-ratio SD reaches the target half-width.

    The half-width is measured like `half_width_pct` at a ratio of 1: 100 * sinh(half-width in log units). Pass
    a Holm level as `confidence` to size a row of a table. A target no count reaches raises ValueError.
    """
    _check_level(confidence, "confidence")
    if not (math.isfinite(sd_log) and sd_log >= 0):
        raise ValueError(f"sd_log must be finite and >= 0, got {sd_log}")
    if not target_half_width_pct > 0:
        raise ValueError(f"target_half_width_pct must be > 0, got {target_half_width_pct}")
    n = sequential.rounds_to_reach(math.asinh(target_half_width_pct / 100.0), sd_log, 1.0 - confidence)
    if n is None:
        raise ValueError(f"no round count reaches ±{target_half_width_pct:g}% at a log-ratio SD of {sd_log:g}")
    return n


def slower_beyond(est_or_adjusted: RatioInterval, limit_pct: float) -> bool:
    """True only when the whole interval lies below -limit_pct, so a point estimate alone never fails a gate."""
    if not limit_pct >= 0:
        raise ValueError(f"limit_pct must be >= 0, got {limit_pct}")
    return bool(est_or_adjusted.high < 1.0 - limit_pct / 100.0)  # NaN (no interval) compares False


def _check_level(value: float, name: str) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value}")


def _valid_log_pairs(baseline: ArrayLike, new: ArrayLike, processes: Iterable[Hashable] | None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = np.asarray(baseline, dtype=np.float64).ravel()
    x = np.asarray(new, dtype=np.float64).ravel()
    blocks = np.zeros(b.size, dtype=np.int64) if processes is None else _block_codes(processes)
    if b.shape != x.shape or blocks.shape != b.shape:
        raise ValueError(f"baseline and new must pair up round by round, got {b.size} and {x.size} values"
                         + ("" if blocks.shape == b.shape else f" and {blocks.size} process labels"))
    ok = ~(np.isnan(b) | np.isnan(x))  # a round missing either side carries no paired evidence
    b, x, blocks = b[ok], x[ok], blocks[ok]
    if b.size == 0:
        raise ValueError("no round has both a baseline and a new throughput")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(x)) and np.all(b > 0) and np.all(x > 0)):
        raise ValueError("throughputs must be finite and positive")
    return np.log(b), np.log(x), blocks


def _block_codes(processes: Iterable[Hashable]) -> np.ndarray:
    """Each round's process label as a small integer (labels may be any hashable values)."""
    codes: dict[object, int] = {}
    return np.array([codes.setdefault(label, len(codes)) for label in processes], dtype=np.int64)


def _fence(r: np.ndarray) -> tuple[float, float]:
    """Centre and reach of the outlier rule: rounds beyond centre ± reach are excluded (reach inf below the minimum)."""
    if r.size < OUTLIER_MIN_ROUNDS:
        return 0.0, math.inf
    scale = max(pairwise_scale(r), OUTLIER_SCALE_FLOOR)
    return float(np.median(r)), OUTLIER_K * scale


def pairwise_scale(values: ArrayLike) -> float:
    """The Shamos scale: median |x_i − x_j| over all pairs / 0.9539, an SD for normal data that one wild value
    hardly moves. Pairwise differences do not involve a centre, so one wild value spoils only its own n − 1 pairs."""
    x = np.asarray(values, dtype=np.float64).ravel()
    i, j = np.triu_indices(x.size, 1)
    return float(np.median(np.abs(x[i] - x[j]))) / _SHAMOS_NORMAL


def _sd(winsorized: np.ndarray, mean: float) -> float:
    """SD about the kept rounds' mean over all valid rounds, excluded ones already pulled in to the fence."""
    if winsorized.size < 2:
        return math.nan
    sd = math.sqrt(float(np.sum((winsorized - mean) ** 2)) / (winsorized.size - 1))
    return 0.0 if sd <= ZERO_SPREAD else sd  # rounding noise of exactly proportional inputs is no spread


def _process_sd(values: np.ndarray, mean: float, blocks: np.ndarray) -> float:
    """The rounds' SD, raised to what the processes' means say when they differ by more than the rounds do.

    With B processes of k_j rounds each, the between-process mean square MSB = Σ k_j (m_j − m)² / (B − 1)
    estimates σ² + k̄τ² (τ: the SD of a process's own offset, σ: a round's), while the rounds' SD estimates
    σ² + τ². n · Var(mean) is σ² + k̄τ², so sqrt(max(SD², MSB)) is the per-round scale that gives the mean its
    true spread; with one process it is the SD."""
    sd = _sd(values, mean)
    labels = np.unique(blocks)
    if labels.size < 2 or not math.isfinite(sd):
        return sd
    sizes = np.array([np.sum(blocks == label) for label in labels], dtype=np.float64)
    means = np.array([np.mean(values[blocks == label]) for label in labels])
    between = float(np.sum(sizes * (means - mean) ** 2)) / (labels.size - 1)
    return max(sd, math.sqrt(between))


def _log_interval(mean: float, sd: float, n: int, confidence: float) -> tuple[float, float]:
    if n < 2:
        return math.nan, math.nan
    if sd == 0.0:
        return mean, mean
    half = sequential.half_width_log(n, sd, 1.0 - confidence)
    return mean - half, mean + half


def _p_value(mean: float, sd: float, n: int) -> float:
    if n < 2:
        return math.nan
    if sd == 0.0:
        return 0.0 if abs(mean) > ZERO_SPREAD else 1.0
    return sequential.p_value(n, mean, sd)
