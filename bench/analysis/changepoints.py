"""Change points in a series of runs over commits: where a metric stepped and stayed, never where
one run was noisy.

The series is one figure per commit in log space (a rate's log, or a Δ's log ratio), each with the
standard error its 95% interval implies. Segments are fitted by PELT (the `ruptures` library) with
a weighted least-squares cost: each point weighs 1 / (se² + τ²), so a run whose interval is wide
(a busy machine) moves the fit little. τ² is the spread between runs that their own intervals do
not hold (processes, the machine's day), read robustly from consecutive differences, so that one
step or one spike barely moves it. Assumptions: within a segment the runs scatter around one level
with those variances, independently; a change is a shift of the level that persists.

What is never flagged: a segment shorter than MIN_SEGMENT runs (so one run, or two, off the level
cannot be a change on their own), a shift smaller than MIN_SHIFT_PCT (Chromium's dashboard uses 1%),
or one whose interval (the two segments' weighted means) holds zero. The penalty per change point
was chosen so that a series with no change (and two single-run spikes in it) is flagged in about 5%
of series or fewer (4.0% in the worst simulated case): benchmarks/changepoint_calibration.py
simulates it (results/simulations/changepoints.md; docs/history.md has the method and the
figures), tests/test_changepoints.py keeps a small seeded version.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import ruptures as rpt
from ruptures.base import BaseCost

MIN_SEGMENT = 3
MIN_SHIFT_PCT = 1.0
Z_95 = 1.959963984540054
# The cost a change point must save, in χ² units of the weighted fit (chosen by simulation, see the
# module docstring): a shift of PENALTY ** 0.5 standard errors of the segments' means.
PENALTY = 16.0


# A spike: a run further than SPIKE_SDS standard deviations (its own and the between-run spread)
# from the median of the SIDE runs on each side of it, and SIDE_SDS from each side's alone, the
# same way: set aside, and said so, before the fit. Chosen by simulation (benchmarks/
# changepoint_calibration.py) against the four-run median of the first rule.
SPIKE_SDS = 3.0
SIDE_SDS = 1.5
SIDE = 3


@dataclass(frozen=True)
class Steps:
    """What a series' fit found: its steps, and the runs set aside as single-run spikes."""

    steps: list[ChangePoint]
    spikes: list[int]


@dataclass(frozen=True)
class ChangePoint:
    """A change point: the series' level moved at `index` (the first point of the new segment), by
    `shift_pct` with its 95% interval."""

    index: int
    shift_pct: float
    low_pct: float
    high_pct: float


class _WeightedLevel(BaseCost):
    """Weighted squared deviations from a segment's weighted mean, from cumulative sums."""

    model = "weighted-level"
    min_size = MIN_SEGMENT

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = weights

    def fit(self, signal: np.ndarray) -> _WeightedLevel:
        self.signal = signal.reshape(-1, 1)
        y = signal.reshape(-1)
        w = self.weights
        self._w = np.concatenate([[0.0], np.cumsum(w)])
        self._wy = np.concatenate([[0.0], np.cumsum(w * y)])
        self._wyy = np.concatenate([[0.0], np.cumsum(w * y * y)])
        return self

    def error(self, start: int, end: int) -> float:
        w = self._w[end] - self._w[start]
        wy = self._wy[end] - self._wy[start]
        wyy = self._wyy[end] - self._wyy[start]
        return float(wyy - wy * wy / w) if w > 0 else 0.0


def between_run_variance(y: np.ndarray, se: np.ndarray) -> float:
    """τ²: the variance between runs beyond their own intervals, from the median absolute
    consecutive difference (a step or a spike touches one or two of them)."""
    if len(y) < 3:
        return 0.0
    diffs = np.diff(y)
    spread = (1.4826 * np.median(np.abs(diffs - np.median(diffs)))) ** 2 / 2.0
    return max(0.0, float(spread - np.median(se[np.isfinite(se)] ** 2)))


def find_steps(y: Sequence[float], se: Sequence[float], penalty: float = PENALTY) -> Steps:
    """The persistent level shifts of a log-scale series with the given standard errors."""
    values, errors = np.asarray(y, dtype=float), np.asarray(se, dtype=float)
    finite = np.isfinite(errors) & (errors > 0)
    if len(values) < 2 * MIN_SEGMENT or not finite.any():
        return Steps([], [])
    errors = np.where(finite, errors, np.nan)
    spikes = _spikes(
        values, np.nan_to_num(errors, nan=np.inf) ** 2 + between_run_variance(values, errors)
    )
    # τ² again without the spikes, which would otherwise count as spread between runs
    kept = np.setdiff1d(np.arange(len(values)), spikes)
    tau2 = between_run_variance(values[kept], errors[kept])
    variance = np.nan_to_num(errors, nan=np.inf) ** 2 + tau2
    weights = np.where(finite, 1.0 / variance, 0.0)
    weights[spikes] = 0.0
    cost = _WeightedLevel(weights)
    ends = rpt.Pelt(custom_cost=cost, min_size=MIN_SEGMENT, jump=1).fit(values).predict(pen=penalty)
    bounds = [0, *ends]
    steps = [
        step
        for before, start, after in zip(bounds, bounds[1:], bounds[2:], strict=False)
        if (step := _step(values, weights, slice(before, start), slice(start, after), start))
    ]
    return Steps(steps, spikes)


def _spikes(y: np.ndarray, variance: np.ndarray) -> list[int]:
    """A busy machine's one run: further than SPIKE_SDS from the median of the runs around it (up
    to SIDE on each side), and off, the same way, by SIDE_SDS or more from the runs on each side
    alone. The ends of a level shift are not: the runs on one side of each share its level (the
    around-it test alone set a step's ends aside once the runs' intervals were tight; a test on
    each side alone at SPIKE_SDS missed real spikes: more false steps in simulation)."""
    found = []
    for i in range(len(y)):
        before = list(range(max(0, i - SIDE), i))
        after = list(range(i + 1, min(len(y), i + 1 + SIDE)))
        around = _offset(y, variance, i, before + after)
        sides = [_offset(y, variance, i, side) for side in (before, after) if side]
        if abs(around) > SPIKE_SDS and all(z * around > 0 and abs(z) > SIDE_SDS for z in sides):
            found.append(i)
    return found


def _offset(y: np.ndarray, variance: np.ndarray, i: int, side: list[int]) -> float:
    """How many standard deviations run i lies from the median of the runs in `side`."""
    sd = math.sqrt(variance[i] + np.median(variance[side]))
    return (y[i] - float(np.median(y[side]))) / sd if math.isfinite(sd) else 0.0


def _step(
    y: np.ndarray, w: np.ndarray, before: slice, after: slice, index: int
) -> ChangePoint | None:
    w1, w2 = w[before].sum(), w[after].sum()
    # runs set aside weigh nothing: a segment is as long as the runs it weighs
    if min(np.count_nonzero(w[before]), np.count_nonzero(w[after])) < MIN_SEGMENT:
        return None
    shift = (w[after] @ y[after]) / w2 - (w[before] @ y[before]) / w1
    half = Z_95 * math.sqrt(1.0 / w1 + 1.0 / w2)
    pct = math.expm1(shift) * 100.0
    if abs(pct) < MIN_SHIFT_PCT or abs(shift) <= half:
        return None
    return ChangePoint(
        index, pct, math.expm1(shift - half) * 100.0, math.expm1(shift + half) * 100.0
    )


def log_point(value: float, low: float, high: float) -> tuple[float, float]:
    """A positive figure (a rate, or a ratio 1 + Δ) and its 95% interval as (log value, se)."""
    if not (low > 0 and math.isfinite(high) and high > low):
        return math.log(value), math.inf
    return math.log(value), (math.log(high) - math.log(low)) / (2.0 * Z_95)
