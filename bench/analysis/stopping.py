"""When a cell has enough rounds (`trials: auto`): each watched row is decided, or no decision is in
reach.

Decided
    A row of a comparison is decided when its interval, at the level the table prints it, says
    "faster", "slower" or "no change within ±margin" (analysis.inference, "Verdict words"). A row of
    the gate (a variant of the current build against the reference build) is decided when its
    interval lies wholly above or wholly below −limit: within the limit, or beyond it. An
    experiment's `precision`, when it sets one, asks in addition that the row's half-width be at
    most that.
    The level is Bonferroni's over the table's rows (`print_level`); Holm's adjusted interval is
    never wider, so a row decided here is decided in print.

Looking after every round
    The intervals are confidence sequences (analysis.sequential): they hold at every round count at
    once, so the cell may stop at the first round at which its rows are decided without the interval
    covering less than it says. The rule never needs a plan fixed in advance: the first
    `MIN_AUTO_ROUNDS` rounds (core.experiment), always run, only keep the first verdict from
    resting on a handful of rounds, and `max_rounds` and the budget bound it. Simulated at both
    machines' noise, with heavy tails and dips: benchmarks/sequential_coverage.py.

In reach
    After each round an undecided row's forecast is the rounds at which its interval would be narrow
    enough if its estimate and spread stayed as they are (`Row.rounds_to_decide`): half-width below
    the distance from the estimate to the nearest boundary that decides it. A cell stops adding
    rounds ("out of reach") when no undecided row's forecast fits the rounds and time it has left,
    so its time goes to the cells after it. The forecast decides only when to stop spending, never
    what a row reads.

Time (measure.run.ledger's `RunTime`)
    `budget_s` bounds the command's wall time from its start, less the machine's one-time
    measurements: building weights, warm-up, correctness, the timed rounds, op shares and the
    fresh worker pairs, each planned at what this cell measured it to cost. Each cell's allowance
    is an even part of what the run has left when it starts (the cells before it may have passed
    time on), and a round that would not fit its allowance is not started. One thing lies outside
    it: a cell's first rounds always run, since before them no row has an interval at all (the
    sequence is unbounded below 6 rounds at a table's α/8); where they alone outrun the budget, the
    run takes that long and each cell's first line says what a larger budget would settle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import special

from . import sequential

__all__ = ["Goal", "Row", "print_level", "target_for_margin"]


def print_level(rows_in_table: int, alpha: float = 0.05) -> float:
    """The confidence level no row of an m-row Holm table is printed below (Bonferroni's)."""
    return 1.0 - alpha / max(1, rows_in_table)


def target_for_margin(margin_pct: float) -> float:
    """The largest half-width (percent) at which a row whose interval holds Δ = 0 still reads "no
    change"."""
    return 100.0 * math.sinh(math.log1p(margin_pct / 100.0) / 2.0)


@dataclass(frozen=True)
class Goal:
    """What decides a watched row: the verdict at `margin_pct`, or (`limit_pct` set) which side of
    −limit its interval lies; `target_pct`, when set, a half-width it must reach as well."""

    margin_pct: float
    limit_pct: float | None = None
    target_pct: float | None = None


@dataclass(frozen=True)
class Row:
    """One watched row after some rounds: its mean log ratio, log-ratio SD and rounds, and its
    interval's half-width (log units) at `alpha`, Bonferroni's share of the table's 5%: the
    confidence sequence's, or with `fixed` rounds (trials: N, budget, plan) the t interval's."""

    mean_log: float
    sd_log: float
    n: int
    alpha: float
    goal: Goal
    fixed: bool = False

    @property
    def half_log(self) -> float:
        return _half_log(self.n, self.sd_log, self.alpha, self.fixed) if self.sd_log > 0 else 0.0

    def _room(self) -> float:
        return decision_room(self.mean_log, self.goal)

    @property
    def decided(self) -> bool:
        if self.n < 2:
            return False
        half, m, goal = self.half_log, self.mean_log, self.goal
        if goal.target_pct is not None and half > math.asinh(goal.target_pct / 100.0):
            return False
        if goal.limit_pct is not None:
            edge = math.log1p(-goal.limit_pct / 100.0)
            return m - half >= edge or m + half < edge
        margin = goal.margin_pct / 100.0
        inside = m - half >= math.log1p(-margin) and m + half <= math.log1p(margin)
        return m - half > 0.0 or m + half < 0.0 or inside

    def rounds_to_decide(self) -> int | None:
        """The round count at which this row would be decided, were its estimate and spread to stay;
        None when none would (an estimate on the boundary itself)."""
        if self.decided:
            return self.n
        if self.fixed:
            needed = _t_rounds_to_reach(self._room(), self.sd_log, self.alpha)
        else:
            needed = sequential.rounds_to_reach(self._room(), self.sd_log, self.alpha)
        return None if needed is None else max(needed, self.n + 1)


def decision_room(mean_log: float, goal: Goal) -> float:
    """The largest half-width (log units) at which an estimate `mean_log` would be decided."""
    m = mean_log
    if goal.limit_pct is not None:
        room = abs(m - math.log1p(-goal.limit_pct / 100.0))
    else:
        inside = min(
            math.log1p(goal.margin_pct / 100.0) - m, m - math.log1p(-goal.margin_pct / 100.0)
        )
        room = max(abs(m), inside)
    if goal.target_pct is not None:
        room = min(room, math.asinh(goal.target_pct / 100.0))
    return room


def _half_log(n: int, sd: float, alpha: float, fixed: bool) -> float:
    if not fixed:
        return sequential.half_width_log(n, sd, alpha)
    if n < 2:
        return math.inf
    return float(special.stdtrit(n - 1, 1.0 - alpha / 2.0)) * sd / math.sqrt(n)


def _t_rounds_to_reach(
    half_log: float, sd: float, alpha: float, limit: int = 100_000
) -> int | None:
    """The fewest rounds whose fixed-n t half-width at this SD is at most `half_log`."""
    if not (half_log > 0 and math.isfinite(sd)):
        return None
    n = 2
    while _half_log(n, sd, alpha, True) > half_log:
        n = n + 1 if n < 64 else int(n * 1.1)
        if n > limit:
            return None
    while n > 2 and _half_log(n - 1, sd, alpha, True) <= half_log:
        n -= 1
    return n
