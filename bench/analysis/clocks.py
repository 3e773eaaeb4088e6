"""Which clock a paired row's Δ and interval use: the run's (measure.run.pilot chose it by measuring
this machine before the run, so the choice never looked at the rows it decides), unless the row's
two clocks disagree.

The CPU clock leaves out time the process did not run (what a KVM hypervisor stole, what other
processes took), so on a noisy VM its rounds can scatter less. It measures the same Δ only where
the change moves wall and CPU time alike: a change that moves work onto more threads or off the
CPU would not. So a row on the CPU clock is also estimated on the wall clock, round by round, and
where a paired t test of the two Δs' difference rejects at DISAGREE_P the row falls back to the
wall clock and says so. Where the clocks agree that fires in DISAGREE_P of rows (normal rounds), so
it barely moves coverage; and the wall interval it falls back to is valid on its own.

tok/s stays the wall clock's: a row on the CPU clock keeps the wall clock's geometric means as its
Baseline and New, so New / Baseline − 1 is the wall Δ, beside the CPU clock's Δ.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtrit

from ..core.fileformat import Clock
from .inference import PairedEstimate, paired_estimate

DISAGREE_P = 0.001  # the paired t test's level at which the clocks' Δs disagree


@dataclass(frozen=True)
class Clocked:
    """A row's estimate, the clock it is on, and why it is not on the run's clock (empty when it
    is)."""

    estimate: PairedEstimate
    clock: Clock
    note: str = ""


def clocked_estimate(
    baseline: Sequence[float],
    new: Sequence[float],
    baseline_cpu: Sequence[float] | None,
    new_cpu: Sequence[float] | None,
    clock: Clock,
    **options: object,
) -> Clocked:
    """The paired estimate on `clock` (options: paired_estimate's), falling back to the wall clock
    where the CPU clock has no value for some round or its Δ disagrees with the wall clock's."""
    wall = paired_estimate(baseline, new, **options)
    if clock != Clock.CPU:
        return Clocked(wall, Clock.WALL)
    if baseline_cpu is None or new_cpu is None:
        return Clocked(wall, Clock.WALL, "no CPU seconds recorded")
    cpu_sides = np.asarray(baseline_cpu, np.float64), np.asarray(new_cpu, np.float64)
    if not all(np.isfinite(side).all() and (side > 0).all() for side in cpu_sides):
        return Clocked(wall, Clock.WALL, "CPU seconds missing in some round")
    cpu = paired_estimate(*cpu_sides, **options)
    difference = np.log(np.asarray(new, np.float64) / np.asarray(baseline, np.float64))
    difference -= np.log(cpu_sides[1] / cpu_sides[0])
    if _disagree(difference):
        return Clocked(
            wall,
            Clock.WALL,
            f"the clocks disagree (CPU Δ {100 * (cpu.ratio - 1):+.1f}%, wall Δ "
            f"{100 * (wall.ratio - 1):+.1f}%)",
        )
    return Clocked(
        dataclasses.replace(cpu, baseline_gmean=wall.baseline_gmean, new_gmean=wall.new_gmean),
        Clock.CPU,
    )


def _disagree(difference: np.ndarray) -> bool:
    """Whether the rounds' wall − CPU log ratios have a mean other than 0 (two-sided paired t test
    at DISAGREE_P)."""
    n = difference.size
    if n < 3:
        return False
    se = float(np.std(difference, ddof=1)) / math.sqrt(n)
    critical = float(stdtrit(n - 1, 1.0 - DISAGREE_P / 2.0))
    return abs(float(np.mean(difference))) > critical * se + 1e-12
