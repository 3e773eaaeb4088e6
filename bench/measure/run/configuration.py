"""`threads: auto` weighed on the experiment's own runs (issue 53: a configuration chosen from the
experiment's trials, with their uncertainty).

The thread probe (measure.machine.threads) times a step-shaped matmul, once per machine. Where this
machine has run the experiment's cells with `trials: plan` at one BLAS thread and at every core,
the plan cache holds what those runs measured at each: every cell's round, setup and rows' spreads.
The plan of the run, made from each, says how many rows each thread count is expected to decide in
the budget, which is what a thread count is for. The probe's choice stays unless the other thread
count's plan beats it even with its rows' spreads at their upper bounds (SD_BOUND: the 90% upper
bound of σ from the fewest rounds a planned cell runs, MIN_PLANNED_ROUNDS), as the probe's own
rule asks its challenger to win at a lower bound. On the Zen 4 (results/threads-weigh-zen4): two
threads 8.6 rows expected at their measured spreads against one thread's 7.5, but 5.0 at the
bounds, so one thread stayed; the two-thread run before had decided 4 of 16.

A thread count the experiment has not run here is not weighed: the probe's choice holds, and a
run at `threads: N` is what lets `auto` weigh N afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from scipy import stats

from ...core.header import ThreadChoice
from ...core.spec import MIN_PLANNED_ROUNDS

SD_BOUND = 0.10  # a spread's upper bound: σ at the 90% quantile given its rounds


def sd_upper_factor(rounds: int = MIN_PLANNED_ROUNDS) -> float:
    """σ's one-sided upper confidence bound over the sample SD s, from `rounds` rounds:
    √((n − 1) / χ²(SD_BOUND; n − 1))."""
    freedom = rounds - 1
    return math.sqrt(freedom / float(stats.chi2.ppf(SD_BOUND, freedom)))


@dataclass(frozen=True)
class PlannedRows:
    """What the plan made from one thread count's cached runs expects to decide."""

    threads: int
    expected: float  # rows, at the spreads the runs measured
    bounded: float  # rows, at those spreads' upper bounds


def weigh_threads(
    probed: ThreadChoice, incumbent: PlannedRows, challenger: PlannedRows, rows: int
) -> ThreadChoice:
    """The probe's choice (`incumbent`'s thread count) unless `challenger` is expected to decide
    more rows even at its spreads' upper bounds than the incumbent at its measured ones."""
    figures = (
        f"this experiment's runs here: {incumbent.threads} thread(s) {incumbent.expected:.1f} of "
        f"{rows} rows expected, {challenger.threads} thread(s) {challenger.expected:.1f} "
        f"({challenger.bounded:.1f} at the spreads' {100 * (1 - SD_BOUND):.0f}% upper bounds)"
    )
    if challenger.bounded > incumbent.expected:
        return ThreadChoice(
            challenger.threads,
            probed.settings,
            f"{figures}: {challenger.threads} surely decide more (the thread probe had chosen "
            f"{incumbent.threads})",
        )
    return replace(probed, reason=f"{probed.reason}; {figures}: not surely more")
