"""`fusebench bisect`: which candidate (a commit, a package release) made the build slower, decided
by intervals.

Candidates are ordered oldest first; GOOD lies before the first and BAD is the last. Every step is
an A/B of one candidate (the current build) against a reference, both interleaved round by round in
one run (run --against), and its verdict comes from the Holm-adjusted intervals of
`stats.compare_builds`, the same table `fusebench check` gates:

1. BAD against GOOD. The rows whose whole interval lies below -limit (check's rule) are the
   regression, and the search tracks them. When no row did, but an interval reaches below -limit,
   the A/B is repeated (the runs pooled, paired within each) until a row regresses or every interval
   lies above -limit (the pooled rows', when the experiment has several variants): then there is no
   regression to find.
2. Binary search, each step the midpoint candidate against GOOD. Once step 1 has measured the step
   (`StepSize`: the tracked rows' Δ and per-round spread), a midpoint is either like GOOD (Δ about
   0) or like BAD (Δ about the step), so a step asks only which: "bad" when some tracked row's
   interval lies wholly below the step's midway point (geometric, half the step's log ratio: the
   culprit is at or before it), "good" when every tracked row's lies wholly above it (the culprit
   is after it). Its rounds are the fewest whose interval is expected to fall on one side with
   probability STEP_POWER at the step's spread (analysis.planner.rounds_for), fixed before the run,
   instead of the experiment's own (issue 64: each search step paid the gate's full budget). Its
   Holm family is the tracked rows alone, the only ones it reads (the pooled prefill and gen: 2
   rows, not the table's 8, ~25% fewer rounds). A decision errs only where its interval misses the
   true Δ, which lies half a step from the midway point either way: at most the family's 5% a
   step. Without a spread, the limit and
   the experiment's rounds, as step 1. Neither: the step cannot tell and is measured again,
   pooling its runs, up to `max_runs`; one that still cannot tell ends the search with the two
   candidates it could not decide between, never with a guess.
3. The first bad candidate against its predecessor, once more, at the step's rounds, by step 1's
   rule: "confirmed" when it alone is slower beyond the limit (a regression spread over several
   candidates may be bad against GOOD but not against its predecessor, and the output says so).

A BAD-against-GOOD step that can tell neither is "cannot tell", never "no regression": the command
exits 3 and says what would settle it (the rounds its widest undecided row would need at the noise
it saw).

The intervals are confidence sequences (analysis.sequential): pooling a further run into an
undecided step is one more look at the same sequence, so each decision errs with at most the Holm
family's 5% however many runs it pooled (simulated: benchmarks/sequential_coverage.py). Runs are
capped for time, not for error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import pandas as pd

from . import stats
from .planner import MIN_PLANNED_ROUNDS, rounds_for
from .stopping import Goal

BAD, GOOD, CANNOT_TELL = "bad", "good", "cannot tell"
REGRESSION, SEARCH, CULPRIT = "regression", "search", "culprit"  # what a step asks
MIN_PAIRS = 3  # fewer paired rounds give no interval worth deciding on
STEP_POWER = 0.9  # the chance a step-sized A/B decides on its first run, at the step's spread


@dataclass(frozen=True)
class Reading:
    """One row of a step's build table: a variant's (or all variants') metric, current against
    reference."""

    model_key: str
    workload: str
    variant: str
    metric: str
    delta_pct: float
    low_pct: float  # the Holm-adjusted 95% interval
    high_pct: float
    rounds: int
    # the rounds that would put this row's interval on one side of -limit
    settle_rounds: int | None = None
    sd_log: float = math.nan  # a round's log-ratio spread

    @property
    def row(self) -> tuple[str, str, str, str]:
        return self.model_key, self.workload, self.variant, self.metric


def readings(
    trials: pd.DataFrame, limit_pct: float, family: Collection[stats.RowKey] | None = None
) -> list[Reading]:
    """A run --against file's (or several pooled ones') build table, as check computes it; with
    `family`, those rows alone, Holm over them (a step that decides on them)."""
    goal = Goal(limit_pct, limit_pct=limit_pct)
    return [
        Reading(
            r.model_key,
            r.workload,
            r.variant,
            r.metric,
            r.delta_pct,
            (r.adj_low - 1) * 100,
            (r.adj_high - 1) * 100,
            r.n_pairs,
            r.rounds_to_decide(goal),
            r.sd_log,
        )
        for r in stats.compare_builds(trials, family=family)
        if r.n_pairs >= MIN_PAIRS and math.isfinite(r.adj_high)
    ]


def regressed(found: Sequence[Reading], limit_pct: float) -> list[Reading]:
    """The rows a check would fail: the whole interval below -limit. The pooled rows, when any
    regressed, stand for the rest: a change to shared code moves every variant, and pooling gives
    the narrowest interval."""
    rows = [r for r in found if r.high_pct < -limit_pct]
    pooled = [r for r in rows if r.variant == stats.ALL_VARIANTS]
    return sorted(pooled or rows, key=lambda r: r.high_pct)


def classify(
    found: Sequence[Reading], tracked: Sequence[tuple[str, str, str, str]], limit_pct: float
) -> tuple[str, Reading | None]:
    """A step's verdict on the tracked rows, and the reading that decided it (the first tracked one
    when none did)."""
    mine = [r for r in found if r.row in tracked]
    if not mine:
        return CANNOT_TELL, None
    if bad := [r for r in mine if r.high_pct < -limit_pct]:
        return BAD, min(bad, key=lambda r: r.high_pct)
    if all(r.low_pct > -limit_pct for r in mine):
        return GOOD, mine[0]
    return CANNOT_TELL, min((r for r in mine if r.low_pct <= -limit_pct), key=lambda r: r.low_pct)


@dataclass(frozen=True)
class BisectStep:
    role: str  # REGRESSION, SEARCH or CULPRIT
    index: int  # the candidate measured (current build)
    against: int  # its reference: -1 is GOOD
    status: str
    reading: Reading | None
    runs: int  # A/B runs pooled for the verdict


@dataclass(frozen=True)
class StepSize:
    """The regression step 1 measured, and what the later steps ask of it: which side of
    `midway_pct` a candidate lies, in `rounds` rounds."""

    delta_pct: float  # the tracked rows' smallest slowdown (the step the search must see)
    sd_log: float  # their largest per-round spread
    midway_pct: float  # the geometric middle of 0 and delta_pct
    rounds: int


def step_size(tracked: Sequence[Reading], max_rounds: int, alpha: float = 0.05) -> StepSize | None:
    """The step BAD showed against GOOD, and the rounds a later A/B needs to tell which end a
    candidate is like (module docstring, 2), at Holm's level over the tracked rows, the family a
    later step decides on; None without a spread to plan on."""
    spread = max((r.sd_log for r in tracked), default=math.nan)
    if not math.isfinite(spread) or spread <= 0:
        return None
    delta = max(r.delta_pct for r in tracked)  # the least slowed tracked row
    midway = (math.sqrt(1.0 + delta / 100.0) - 1.0) * 100.0
    goal = Goal(-midway, limit_pct=-midway)
    needed = rounds_for(spread, alpha / len(tracked), goal, STEP_POWER) or max_rounds
    # no fewer than a planned cell's: on heavy tails a t interval on fewer is slightly liberal
    return StepSize(delta, spread, midway, min(max(needed, MIN_PLANNED_ROUNDS), max_rounds))


@dataclass(frozen=True)
class BisectOutcome:
    steps: tuple[BisectStep, ...]
    tracked: tuple[Reading, ...]  # the regression BAD showed against GOOD; empty: none
    first_bad: int | None = None
    # (last good, first bad) when a step stayed inconclusive
    undecided: tuple[int, int] | None = None
    size: StepSize | None = None  # what the search steps asked, once step 1 measured the step

    @property
    def confirmed(self) -> bool:
        return bool(self.steps) and self.steps[-1].role == CULPRIT and self.steps[-1].status == BAD


# measure(index, against, runs, rounds, family): the readings of candidate `index` against `against`
# (-1: GOOD), pooled over its first `runs` A/B runs (each run made once, then read again), each of
# `rounds` rounds fixed before it (None: the experiment's own rule), Holm over the `family` rows
# alone (None: the whole table).
Measure = Callable[[int, int, int, int | None, Collection[stats.RowKey] | None], Sequence[Reading]]


def bisect(
    candidates: int, measure: Measure, limit_pct: float, max_runs: int, max_rounds: int = 60
) -> BisectOutcome:
    """The search over candidates 0..candidates-1 (the last is BAD), as the module's docstring
    describes."""
    bad = candidates - 1
    first, tracked = regression(bad, measure, limit_pct, max_runs)
    steps = [first]
    if not tracked:
        return BisectOutcome(tuple(steps), ())
    rows = [r.row for r in tracked]
    size = step_size(tracked, max_rounds)
    # a search step asks which end a candidate is like; without a spread, step 1's question
    midway, rounds = (-size.midway_pct, size.rounds) if size else (limit_pct, None)
    low, high = -1, bad
    while high - low > 1:
        mid = (low + high) // 2
        step = decide(SEARCH, mid, -1, measure, rows, (midway, rounds), max_runs)
        steps.append(step)
        if step.status == CANNOT_TELL:
            return BisectOutcome(tuple(steps), tuple(tracked), undecided=(low, high), size=size)
        low, high = (low, mid) if step.status == BAD else (mid, high)
    steps.append(decide(CULPRIT, high, high - 1, measure, rows, (limit_pct, rounds), max_runs))
    return BisectOutcome(tuple(steps), tuple(tracked), first_bad=high, size=size)


def regression(
    bad: int, measure: Measure, limit_pct: float, max_runs: int
) -> tuple[BisectStep, list[Reading]]:
    """BAD against GOOD, runs pooled while some row could still be a regression: the step and the
    rows that regressed (empty: none did, every interval lying above -limit or the runs spent)."""
    tracked: list[Reading] = []
    found: Sequence[Reading] = []
    runs, cleared = 0, False
    while runs < max_runs and not tracked and not cleared:
        runs += 1
        found = measure(bad, -1, runs, None, None)
        tracked = regressed(found, limit_pct)
        # The pooled rows, when there are any, clear BAD: single variants' wider intervals may never
        # settle.
        deciding = [r for r in found if r.variant == stats.ALL_VARIANTS] or found
        cleared = all(r.low_pct > -limit_pct for r in deciding)
    shown = tracked[0] if tracked else min(deciding, key=lambda r: r.low_pct, default=None)
    status = BAD if tracked else GOOD if cleared else CANNOT_TELL
    return BisectStep(REGRESSION, bad, -1, status, shown, runs), tracked


def decide(
    role: str,
    index: int,
    against: int,
    measure: Measure,
    rows: Sequence[tuple[str, str, str, str]],
    asks: tuple[float, int | None],
    max_runs: int,
) -> BisectStep:
    """One step: A/B runs pooled until the tracked rows decide against `asks`' threshold (a
    slowdown in percent) at its rounds a run, at most max_runs."""
    threshold, rounds = asks
    status, reading, runs = CANNOT_TELL, None, 0
    while status == CANNOT_TELL and runs < max_runs:
        runs += 1
        status, reading = classify(measure(index, against, runs, rounds, rows), rows, threshold)
    return BisectStep(role, index, against, status, reading, runs)
