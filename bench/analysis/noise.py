"""This machine's noise from A/A comparisons (`fusebench calibrate`), so the gate knows what it can
resolve.

`fusebench calibrate` runs the experiment N times as `fusebench run` would (variants interleaved
round by round), keeping each run in results/scratch/ (or, with --from, takes runs of one experiment
already made on this machine), then compares every variant with itself in each way `fusebench check`
compares, so each of the check's limits gets a noise band measured the way the check measures:
- run_to_run_tps: each run against each other run, cell by cell, unpaired (ratio of medians,
  bootstrap CI): the check of a variant's tok/s against a remembered run (check --baseline);
- run_to_run_speedup: the same for each comparison's per-round speedup (new/baseline paired within a
  round): the check of a fusion's speedup against the remembered run's;
- within_run: inside one run, even rounds against odd rounds, paired (stats.compare's A/A): an
  expectation such as "compiled no more than 5% slower than baseline".
Nothing changed between the two sides, so every Δ seen is noise. An A/A pair has no direction, so
each is read both ways and counted as the slowdown it shows (one run twice as fast as another is the
other one 50% slower). Per scope and metric the file records:
- mde_pct, the minimum detectable effect as the gate sees it: the farthest slowdown an A/A CI lay
  wholly beyond (0 when every CI held 1). The gate fails a cell only when its whole CI lies beyond
  the limit, so a limit of at least the MDE would have kept every calibration A/A comparison green;
  a slowdown has to beat it to be told apart from this machine's run-to-run noise;
- max_aa_slowdown_pct, the largest A/A point estimate read as a slowdown, and ci_half_width_pct, the
  median A/A CI half-width: how far a point estimate wanders, and how wide the CIs are (a slowdown
  needs roughly MDE + half-width to fail reliably).
It goes to results/baselines/noise-<machine>.json with the machine fingerprint, where
`fusebench check` finds it. Every figure is a maximum or median over N runs' comparisons, so more
runs give a safer estimate. Runs made back to back share one state of the machine (say, one
neighbour's job running throughout); on a shared machine whose load changes over the day, calibrate
--from runs spread over that day, or the band comes out too narrow and the gate cries wolf.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.calibration import Band, Noise, PastSpeedups
from ..core.experiment import Experiment
from ..core.fileformat import Column, ResultsError, utc_now
from ..core.fingerprint import Fingerprint
from ..core.header import StoredExperiment
from ..core.history import HistoryPoint, HistoryRun, PointKey, Series
from . import stats
from .history import Entry
from .stats import SEED

NOISE_DIR = Path("results/baselines")  # where noise files have always been
UNKNOWN_COMMIT = "?"
SCOPES = ("run_to_run_tps", "run_to_run_speedup", "within_run")


class NoiseFileError(ResultsError):
    """A noise file that cannot be used; the message names it."""


def default_noise_path(machine: Fingerprint) -> Path:
    return NOISE_DIR / f"noise-{machine.slug}.json"


# --- A/A comparisons ------------------------------------------------------------------------------


def aa_comparisons(runs: list[pd.DataFrame], comparisons: list[tuple[str, str]]) -> pd.DataFrame:
    """Every A/A comparison of the runs' trials: one row per scope x run(s) x cell x variant x
    metric."""
    rows = []
    for (i, a), (j, b) in itertools.combinations(enumerate(runs, start=1), 2):
        pairs = [("run_to_run_tps", a, b)]
        for c in comparisons:
            pairs.append(
                ("run_to_run_speedup", stats.paired_speedups(a, *c), stats.paired_speedups(b, *c))
            )
        for scope, first, second in pairs:
            for row in stats.compare_runs(first, second, seed=SEED).itertuples():
                if row.n_baseline and row.n_new:
                    rows.append(_aa_row(scope, f"{i}-{j}", row, row.variant))
    for i, trials in enumerate(runs, start=1):
        for variant in trials[Column.VARIANT].unique():
            for row in stats.compare(trials, variant, variant, stats.METRICS):
                if row.n_pairs:
                    rows.append(_aa_row("within_run", str(i), row, variant))
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class AAComparison:
    """One A/A comparison: a variant against itself in one scope (SCOPES), cell and metric, as Δ%
    with its CI."""

    scope: str
    runs: str  # the run compared within ("3"), or the two compared ("1-3")
    model_key: str
    size: str
    workload: str
    variant: str
    metric: str
    delta_pct: float
    low_pct: float
    high_pct: float


def _aa_row(scope: str, runs: str, row: Any, variant: str) -> AAComparison:
    """A compare_runs or compare row (ratio, low, high) as an A/A comparison."""
    return AAComparison(
        scope,
        runs,
        row.model_key,
        row.size,
        row.workload,
        variant,
        row.metric,
        (row.ratio - 1) * 100,
        (row.low - 1) * 100,
        (row.high - 1) * 100,
    )


def noise_bands(aa: pd.DataFrame) -> dict[str, dict[str, Band]]:
    bands: dict[str, dict[str, Band]] = {}
    for (scope, metric), group in aa.groupby(["scope", "metric"], sort=False):
        half_widths = (group["high_pct"] - group["low_pct"]) / 2
        ratio, low, high = (
            1 + group[column] / 100 for column in ("delta_pct", "low_pct", "high_pct")
        )
        # Read both ways, a CI [low, high] is [1/high, 1/low]: the slowdown it proves is the larger
        # of 1 - high and 1 - 1/low, or none when it holds 1.
        proven = np.maximum(0.0, np.maximum(1 - high, 1 - 1 / low)) * 100
        bands.setdefault(scope, {})[metric] = Band(
            mde_pct=round(float(proven.max()), 2),
            max_aa_slowdown_pct=round(float(((1 - np.minimum(ratio, 1 / ratio)) * 100).max()), 2),
            ci_half_width_pct=round(float(np.median(half_widths)), 2),
            comparisons=len(group),
        )
    return bands


# --- the noise file -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """What calibrate measured: the runs' machine and their A/A comparisons."""

    machine: Fingerprint
    aa: pd.DataFrame


def noise_record(exp: Experiment, sources: list[Path], calibration: Calibration) -> Noise:
    return Noise(
        fingerprint=calibration.machine,
        experiment=StoredExperiment(name=exp.name, file=exp.file, sha256=exp.sha256),
        runs=len(sources),
        results=tuple(str(p) for p in sources),
        created_at=utc_now(),
        bands=noise_bands(calibration.aa),
    )


# --- runs already made ----------------------------------------------------------------------------


# --- noise files written before the history held the calibration runs ----------------------------


def noise_entries(noise: Noise, path: Path, added_at: str) -> list[Entry]:
    """An old noise file's (at `path`) stored speedups as history runs, one per calibration run
    (the i-th speedup of every row): each run's COMPARISON points, without the interval, rates or
    trials the file never kept (rounds 0), at an unknown commit. Their ids come from the
    speedups, so adding the file twice changes nothing."""
    if not noise.speedup_history:
        raise NoiseFileError(
            f"{path}: no speedups to add (a noise file holds its A/A bands only since "
            "calibrate adds its runs to the history)"
        )
    digest = hashlib.sha256(repr(noise.speedup_history).encode()).hexdigest()[:12]
    machine = str(noise.fingerprint)
    found = []
    for i in range(max((past.runs for past in noise.speedup_history), default=0)):
        run_id = f"noise-{digest}-{i + 1:02d}"
        run = HistoryRun(
            run_id, machine, machine, noise.experiment.name, UNKNOWN_COMMIT, None, None, None,
            str(path), added_at,
        )  # fmt: skip
        points = [_old_point(run_id, machine, past, i) for past in noise.speedup_history]
        found.append(Entry(run, [p for p in points if p is not None], []))
    return found


def _old_point(run_id: str, machine: str, past: PastSpeedups, i: int) -> HistoryPoint | None:
    if i >= past.runs:
        return None
    new, baseline = past.comparison.split("/", 1)  # the file named a comparison "new/baseline"
    delta_pct = (past.speedups[i] - 1.0) * 100.0
    of = PointKey(
        Series.COMPARISON, past.model_key, past.size, past.workload, f"{new} vs {baseline}",
        past.metric,
    )  # fmt: skip
    return HistoryPoint(run_id, machine, of, delta_pct, delta_pct, delta_pct, 0)
