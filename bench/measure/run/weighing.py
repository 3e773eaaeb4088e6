"""`threads: auto` and `schedule: auto` weighed on the experiment's own runs (issues 53 and 64: a
configuration chosen from the experiment's trials, with their uncertainty).

The thread probe (measure.machine.threads) times a step-shaped matmul, once per machine; a run
starts in sequential rounds unless a pilot was cached (measure.run.pilot). Where this machine has
run the experiment's cells with `trials: plan` in other configurations (one BLAS thread or every
core; sequential rounds or duets, which run one thread a worker), the plan cache holds what those
runs measured in each: every cell's round, setup and rows' spreads. The plan made from each says
how many rows that configuration is expected to decide within the budget, and in how long, which
is what a configuration is for. The chosen one stays unless another beats it even with its rows'
spreads at their upper bounds (SD_BOUND: the 90% upper bound of σ from the fewest rounds a
planned cell runs, MIN_PLANNED_ROUNDS): more rows than the chosen one's plan expects at its
measured spreads, or as many in less time; as the probe's own rule asks its challenger to win at a
lower bound. On the Zen 4 (results/threads-weigh-zen4): two threads 8.6 rows expected at their
measured spreads against one thread's 7.5, but 5.0 at the bounds, so one thread stayed; the
two-thread run before had decided 4 of 16.

A configuration the experiment has not run here is not weighed: the chosen one holds, and a run
at `threads: N` or `--schedule duet` is what lets `auto` weigh that one afterwards.

Then the run weighs the schedules on its own first rounds where it can (`weighs_schedules`;
measure.run.cellrun, analysis.schedule_gain), and caches the one it keeps as the next run's prior
(`cache_weighed`). Where a run's rows scatter far beyond what a cached pilot measured, both the
thread and the schedule caches are forgotten (`stale_machine_line`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scipy import stats

from ...core.experiment import MIN_PLANNED_ROUNDS, Experiment, Schedule
from ...core.header import Env, ScheduleChoice
from ..machine.env import write_cached
from ..machine.threads import cache_path as threads_cache_path
from .pilot import cache_path as schedule_cache_path
from .planning import RunPlanner

SD_BOUND = 0.10  # a spread's upper bound: σ at the 90% quantile given its rounds
SAME_ROWS = 0.05  # expected rows this close count as as many (plans stop at the same target)


def sd_upper_factor(rounds: int = MIN_PLANNED_ROUNDS) -> float:
    """σ's one-sided upper confidence bound over the sample SD s, from `rounds` rounds:
    √((n − 1) / χ²(SD_BOUND; n − 1))."""
    freedom = rounds - 1
    return math.sqrt(freedom / float(stats.chi2.ppf(SD_BOUND, freedom)))


@dataclass(frozen=True)
class Configuration:
    """How a run's workers run: their BLAS threads and the schedule of their rounds."""

    threads: int
    schedule: str

    def __str__(self) -> str:
        return f"{self.threads} thread{'s' if self.threads > 1 else ''}, {self.schedule}"


@dataclass(frozen=True)
class PlannedRows:
    """What the plan made from one configuration's cached runs expects: rows decided and the time
    it takes, at the spreads the runs measured and at their upper bounds."""

    configuration: Configuration
    expected: float
    seconds: float
    bounded: float
    bounded_seconds: float

    def __str__(self) -> str:
        return (
            f"{self.configuration} {self.expected:.1f} rows in {self.seconds:.0f} s "
            f"({self.bounded:.1f} in {self.bounded_seconds:.0f} s at the spreads' "
            f"{100 * (1 - SD_BOUND):.0f}% upper bounds)"
        )

    def surely_beats(self, chosen: PlannedRows) -> bool:
        """More rows at this one's spreads' upper bounds than `chosen` expects at its measured
        ones, or as many in less time."""
        if self.bounded > chosen.expected + SAME_ROWS:
            return True
        return self.bounded >= chosen.expected - SAME_ROWS and self.bounded_seconds < chosen.seconds


def weigh(
    chosen: PlannedRows, others: Sequence[PlannedRows], rows: int
) -> tuple[Configuration, str]:
    """The configuration a run uses, and why: `chosen`'s unless another surely beats it (the one
    with the most rows, then the least time, at its bounds)."""
    figures = f"this experiment's runs here, {rows} rows: " + "; ".join(
        str(planned) for planned in (chosen, *others)
    )
    winners = [planned for planned in others if planned.surely_beats(chosen)]
    if not winners:
        return chosen.configuration, f"{figures}: none other surely better"
    best = max(winners, key=lambda planned: (round(planned.bounded, 6), -planned.bounded_seconds))
    return best.configuration, f"{figures}: {best.configuration} surely better"


WEIGHING_SHARE = 0.10  # of the run's budget: the most the schedule a weighing drops may cost


def weighs_schedules(
    exp: Experiment, env: Env, choice: ScheduleChoice, builds: int, resumed: bool
) -> bool:
    """Whether a run weighs the schedules on its first cell (analysis.schedule_gain): asked
    `auto`, where both run alike (a CPU's two cores, one BLAS thread a worker: a sequential worker
    on more measures another configuration, measure.run.pilot), one build, a budget to take the
    cap from, and a run begun afresh."""
    if exp.schedule != Schedule.AUTO or choice.cores is None or env.backend != "cpu":
        return False
    return env.threads == 1 and builds == 1 and not resumed and exp.budget_s is not None


def cache_weighed(choice: ScheduleChoice, schedule: str, line: str, env: Env) -> ScheduleChoice:
    """The schedule a weighing kept, cached as the next run's prior (in the pilot's place)."""
    weighed = replace(
        choice, schedule=Schedule(schedule), reason=f"weighed on a run's first rounds: {line}"
    )
    write_cached(schedule_cache_path(env, env.threads), weighed)
    return weighed


STALE_FACTOR = 2.0  # a run's rows this many times the pilot's spread: the machine is measured again


def stale_machine_line(
    planner: RunPlanner, schedule: ScheduleChoice, env: Env, threads: int
) -> str | None:
    """Where this run's rows scattered STALE_FACTOR times what the cached schedule pilot measured,
    the machine has changed since its threads and schedule were chosen: both caches are dropped, so
    the next run measures them again, and the line says so."""
    probe = next((p for p in schedule.probes if p.schedule == schedule.schedule), None)
    spread = planner.run_spread()
    if probe is None or spread is None or spread < STALE_FACTOR * probe.wall_sd:
        return None
    for path in (threads_cache_path(env), schedule_cache_path(env, threads)):
        path.unlink(missing_ok=True)
    return (
        f"this run's rows scattered {100 * spread:.1f}% a round, {spread / probe.wall_sd:.1f}x "
        f"the {100 * probe.wall_sd:.1f}% the cached pilot measured: the machine has changed since "
        "its BLAS threads and schedule were chosen; the next run measures them again"
    )
