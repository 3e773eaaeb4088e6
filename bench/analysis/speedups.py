"""A fusion's speedup against the runs the history holds: how `fusebench check` gates a speedup
without a second build.

A speedup (new / baseline, paired round by round inside one run) cancels load that moves a whole
run, but it still wanders from run to run: the machine's state, the workers' heaps, which rounds the
outlier rule dropped. The history keeps every added run's speedup per cell, comparison and metric
(its COMPARISON points, analysis.history; `fusebench calibrate` adds its runs there too), and a
later run of the same experiment on the same machine fails only when its speedup falls below the
stored runs' geometric mean by more than

    limit = max(tolerance, 1 - exp(-t · SD · √(1 + 1/K)))

where SD is the standard deviation of the K stored log speedups and t the 97.5% quantile of
Student's t with K - 1 degrees of freedom. t · SD · √(1 + 1/K) is the one-sided 97.5% prediction
bound for one more run drawn like the K stored ones: √(1 + 1/K) adds the uncertainty of the
stored runs' own mean to the spread of a single run, and t (2.26 at K = 10, 2.05 at K = 30)
replaces the 2 of the rule of thumb so the bound holds at the K used. A new run's speedup is a point
estimate, and so is each stored one, so the within-run noise is already inside SD: no CI is needed
on top. A run checks several rows at once (comparisons x metrics x cells), so each row's level is
Bonferroni-adjusted to 1 - 2.5% / rows, and an unchanged run fails any row at most 2.5% of the time.
tests/test_speedups.py simulates it: an unchanged run falls below the bound in 2.5% of cases at
K = 10 and 30, and below any of 4 independent rows' bounds in at most 2.5%.

With fewer than MIN_RUNS stored runs the SD itself is too uncertain (its 95% CI at K = 5 spans
0.6-2.9 x SD), so the row is reported and never fails. This check sees what an A/B of two builds
cannot when there is only one build, but not a slowdown that hits every variant alike (the speedup
does not move): that is what `run --against` is for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from ..core.calibration import PastSpeedups
from ..core.history import HistoryPoint, HistoryRun, Series

MIN_RUNS = 10
LEVEL = 0.975  # one-sided: only a speedup that fell counts


def expected(past: PastSpeedups) -> float:
    """The geometric mean of the stored speedups."""
    return math.exp(float(np.mean(np.log(past.speedups))))


def sd_pct(past: PastSpeedups) -> float:
    """The run-to-run SD of the log speedup, in percent."""
    return 100.0 * float(np.std(np.log(past.speedups), ddof=1)) if past.runs > 1 else math.nan


def prediction_pct(past: PastSpeedups, rows: int = 1) -> float:
    """How far below `expected` an unchanged run's speedup can land, in percent: one-sided 97.5%
    for one row, Bonferroni over `rows` rows checked together (each at 1 - 2.5% / rows)."""
    if past.runs < 2:
        return math.nan
    level = 1.0 - (1.0 - LEVEL) / rows
    half = (
        float(special.stdtrit(past.runs - 1, level))
        * sd_pct(past)
        / 100.0
        * math.sqrt(1.0 + 1.0 / past.runs)
    )
    return 100.0 * (1.0 - math.exp(-half))


def past_speedups(runs: Sequence[HistoryRun], points: Sequence[HistoryPoint]) -> list[PastSpeedups]:
    """Each cell, comparison and metric's speedups over the runs, in the runs' order (their
    COMPARISON points; points of other runs are left out)."""
    order = {run.run_id: i for i, run in enumerate(runs)}
    collected: dict[tuple[str, str, str, str, str], list[tuple[int, float]]] = {}
    for point in points:
        of = point.of
        if of.series != Series.COMPARISON or point.run_id not in order:
            continue
        key = (of.model_key, of.size, of.workload, of.name, of.metric)
        collected.setdefault(key, []).append((order[point.run_id], speedup(point)))
    return [
        PastSpeedups(*key, speedups=tuple(value for _, value in sorted(values)))
        for key, values in collected.items()
    ]


def speedup(point: HistoryPoint) -> float:
    """A COMPARISON point's Δ% as the speedup new / baseline."""
    return 1.0 + point.value / 100.0
