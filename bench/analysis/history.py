"""Continuous benchmarking: a results file's figures as history points, and a history read back as
series over commits, with their steps (analysis.changepoints) and the drift since an anchor.

A run gives three kinds of point (core.history.Series), each with its 95% interval: every variant's
tok/s (the geometric mean of its timed rounds, with a t interval on the log scale), every planned
comparison's Δ (analysis.stats.compare, the row's own confidence sequence), and with a reference
build, every variant's Δ against it (stats.compare_builds). A series holds one machine's points
for one experiment, cell, kind, name and metric (and for builds, one reference: the parent, or a
fixed anchor), so one machine is never pooled with another, nor an A/B against the parent with one
against a release. Several runs of one commit are pooled by inverse variance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from ..core.fileformat import METRIC_COLUMNS, METRICS, Column, Record
from ..core.fingerprint import fingerprint
from ..core.history import HistoryPoint, HistoryRun, PointKey, Series
from ..core.results import Results
from . import stats
from .changepoints import Steps, find_steps, log_point
from .study import build_study

# What a history knows of a commit beyond its hash: its parent and date (from git, where added).
Describe = Callable[[str], tuple[str | None, str | None]]
PARENT = "parent"


@dataclass(frozen=True)
class Entry:
    """One run ready for the store: the run, its points, and its header and timed trials (what
    `check --baseline` compares with)."""

    run: HistoryRun
    points: list[HistoryPoint]
    records: list[Record]


def entries(results: Results, source: str, describe: Describe, added_at: str) -> list[Entry]:
    """Every run of a results file as history entries (runs without timed trials give none)."""
    study = build_study(results)
    found = []
    for run_id, info in study.runs.items():
        timed = study.timed[study.timed[Column.RUN_ID] == run_id] if not study.timed.empty else None
        if timed is None or timed.empty or info.experiment is None:
            continue
        machine = str(fingerprint(info.env))
        current, reference = info.builds.get("current"), info.builds.get("reference")
        commit = (current.commit if current else None) or info.env.commit or "?"
        parent, date = describe(commit)
        against = reference.commit if reference else None
        run = HistoryRun(
            run_id, machine, info.env.machine, info.experiment.name, commit, parent, date,
            against, source, added_at,
        )  # fmt: skip
        builds = _run_builds(study.build_trials, run_id)
        points = [
            *_rates(timed),
            *_comparisons(timed, study.planned, study.margin_pct),
            *_builds(builds, study.margin_pct),
        ]
        points = [replace(p, run_id=run_id, machine=machine) for p in points]
        found.append(Entry(run, points, _kept_records(results, run_id)))
    return found


def _kept_records(results: Results, run_id: str) -> list[Record]:
    """The run's header(s) and timed trials, of both builds: what a stored baseline held."""
    return [
        r
        for r in results.records
        if r.get(Column.RUN_ID) == run_id
        and (r["kind"] == "run" or (r["kind"] == "trial" and not r.get(Column.WARMUP)))
    ]


def _run_builds(build_trials: pd.DataFrame, run_id: str) -> pd.DataFrame:
    if build_trials.empty:
        return build_trials
    return build_trials[build_trials[Column.RUN_ID] == run_id]


def _point(series: Series, cell: tuple[str, str, str], name: str, metric: str) -> HistoryPoint:
    model_key, size, workload = cell
    of = PointKey(series, model_key, size, workload, name, metric)
    return HistoryPoint("", "", of, 0.0, 0.0, 0.0, 0)


def _rates(timed: pd.DataFrame) -> list[HistoryPoint]:
    """Each variant's geometric-mean tok/s with a 95% t interval of the log rates."""
    found = []
    keys = [Column.MODEL_KEY, Column.SIZE, Column.WORKLOAD, Column.VARIANT]
    for (model_key, size, workload, variant), rows in timed.groupby(keys, sort=False):
        for metric in METRICS:
            logs = np.log(pd.to_numeric(rows[METRIC_COLUMNS[metric]], errors="coerce").dropna())
            logs = logs[np.isfinite(logs)]
            if len(logs) < 2:
                continue
            mean, half = float(logs.mean()), _t_half(logs.to_numpy())
            point = _point(Series.RATE, (model_key, size, workload), variant, metric)
            found.append(
                replace(
                    point,
                    value=math.exp(mean),
                    low=math.exp(mean - half),
                    high=math.exp(mean + half),
                    rounds=len(logs),
                )
            )
    return found


def _t_half(logs: np.ndarray) -> float:
    return float(stdtrit(len(logs) - 1, 0.975) * logs.std(ddof=1) / math.sqrt(len(logs)))


def _comparisons(
    timed: pd.DataFrame, planned: Sequence[tuple[str, str]], margin_pct: float
) -> list[HistoryPoint]:
    rows = [
        row
        for baseline, new in planned
        for row in stats.compare(timed, baseline, new, METRICS, margin_pct=margin_pct)
    ]
    return _measured(
        [_delta(Series.COMPARISON, f"{row.new} vs {row.baseline}", row) for row in rows]
    )


def _builds(build_trials: pd.DataFrame, margin_pct: float) -> list[HistoryPoint]:
    if build_trials.empty:
        return []
    rows = stats.compare_builds(build_trials, margin_pct=margin_pct)
    return _measured([_delta(Series.BUILD, row.variant, row) for row in rows])


def _measured(points: list[HistoryPoint]) -> list[HistoryPoint]:
    """The points with a figure and an interval: a variant missing from a run, or one paired round,
    gives neither, and is not a point of the series."""
    return [p for p in points if all(map(math.isfinite, (p.value, p.low, p.high)))]


def _delta(series: Series, name: str, row: stats.ComparisonRow) -> HistoryPoint:
    """A Δ row as a point, with the fixed-n Student t interval of its paired rounds (the spread of
    its processes included): the row's confidence sequence is built to be stopped on at any round,
    which a point of a finished run is not, and it is several times wider at a handful of rounds.
    What runs scatter beyond these intervals, analysis.changepoints estimates (τ²)."""
    point = _point(series, (row.model_key, row.size, row.workload), name, row.metric)
    low, high = _t_interval(row)
    return replace(
        point,
        value=row.delta_pct,
        low=low,
        high=high,
        rounds=row.n_pairs,
        verdict=row.verdict.word.value if row.verdict else None,
    )


def _t_interval(row: stats.ComparisonRow) -> tuple[float, float]:
    if row.n_pairs < 2 or not math.isfinite(row.sd_log):
        return math.nan, math.nan
    half = stdtrit(row.n_pairs - 1, 0.975) * row.sd_log / math.sqrt(row.n_pairs)
    return math.expm1(row.mean_log - half) * 100.0, math.expm1(row.mean_log + half) * 100.0


# --- reading a history back -----------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesKey:
    """A series of the history: one point key on one machine and experiment (and a BUILD series'
    reference)."""

    machine: str
    machine_label: str
    experiment: str
    of: PointKey
    against: str | None = None  # BUILD series: PARENT, or the anchor commit

    @property
    def label(self) -> str:
        of = self.of
        what = {
            Series.RATE: f"{of.name} tok/s",
            Series.COMPARISON: f"{of.name} Δ",
            Series.BUILD: f"{of.name} Δ {self.since}",
        }[of.series]
        return f"{of.size} {of.workload} {of.metric}: {what}"

    @property
    def since(self) -> str:
        return "vs parent" if self.against == PARENT else f"since {str(self.against)[:12]}"


@dataclass(frozen=True)
class CommitPoint:
    """One commit's figure in a series: its runs pooled by inverse variance."""

    commit: str
    date: str | None
    run_ids: tuple[str, ...]
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class HistorySeries:
    key: SeriesKey
    points: tuple[CommitPoint, ...]
    steps: Steps

    def spike_commits(self) -> list[str]:
        return [self.points[i].commit for i in self.steps.spikes]


def read_series(runs: Sequence[HistoryRun], points: Sequence[HistoryPoint]) -> list[HistorySeries]:
    """Every series of the history, points in commit order (the commits' dates, then when each was
    added), with its steps."""
    order = {run.run_id: i for i, run in enumerate(_ordered(runs))}
    by_run = {run.run_id: run for run in runs}
    grouped: dict[SeriesKey, list[HistoryPoint]] = {}
    for point in points:
        run = by_run.get(point.run_id)
        for key in _keys(run, point) if run is not None else ():
            grouped.setdefault(key, []).append(point)
    found = []
    for key, mine in grouped.items():
        mine.sort(key=lambda p: order[p.run_id])
        delta = key.of.series != Series.RATE
        pooled = _by_commit(mine, by_run, delta)
        found.append(HistorySeries(key, tuple(pooled), _steps(pooled, delta)))
    return found


def _ordered(runs: Sequence[HistoryRun]) -> list[HistoryRun]:
    return sorted(runs, key=lambda r: (r.commit_date or "", r.added_at))


def _keys(run: HistoryRun, point: HistoryPoint) -> list[SeriesKey]:
    """The series a point belongs to: a build point to the one since its reference commit, and to
    the one against the parent as well where that commit is the run's parent (a first commit after
    the anchor is both)."""
    key = SeriesKey(run.machine, run.machine_label, run.experiment, point.of)
    if point.of.series != Series.BUILD:
        return [key]
    keys = [replace(key, against=run.against)]
    if run.against and run.against == run.parent:
        keys.append(replace(key, against=PARENT))
    return keys


def _by_commit(
    points: list[HistoryPoint], runs: dict[str, HistoryRun], delta: bool
) -> list[CommitPoint]:
    commits: dict[str, list[HistoryPoint]] = {}
    for point in points:
        commits.setdefault(runs[point.run_id].commit, []).append(point)
    return [
        _pool(commit, mine, runs[mine[0].run_id].commit_date, delta)
        for commit, mine in commits.items()
    ]


def _pool(commit: str, points: list[HistoryPoint], date: str | None, delta: bool) -> CommitPoint:
    logs = [log_point(*_ratio(p, delta)) for p in points]
    weights = [1.0 / se**2 if math.isfinite(se) and se > 0 else 0.0 for _, se in logs]
    if sum(weights) == 0:
        mean, half = float(np.mean([y for y, _ in logs])), math.inf
    else:
        mean = sum(w * y for w, (y, _) in zip(weights, logs, strict=True)) / sum(weights)
        half = 1.959963984540054 / math.sqrt(sum(weights))
    value, low, high = (math.exp(mean + d) for d in (0.0, -half, half))
    if delta:
        value, low, high = ((v - 1.0) * 100.0 for v in (value, low, high))
    return CommitPoint(commit, date, tuple(p.run_id for p in points), value, low, high)


def _ratio(point: HistoryPoint | CommitPoint, delta: bool) -> tuple[float, float, float]:
    """A point as a positive figure with its interval: a rate as it is, a Δ as 1 + Δ."""
    if not delta:
        return point.value, point.low, point.high
    return tuple(1.0 + v / 100.0 for v in (point.value, point.low, point.high))  # type: ignore[return-value]


def _steps(points: Sequence[CommitPoint], delta: bool) -> Steps:
    logs = [log_point(*_ratio(p, delta)) for p in points]
    return find_steps([y for y, _ in logs], [se for _, se in logs])


# --- drift since an anchor ------------------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    """Where a BUILD series against a fixed anchor stands at its latest commit."""

    key: SeriesKey
    latest: CommitPoint

    def outcome(self, limit_pct: float) -> str:
        """ "failed" if the whole interval is slower than −limit, "passed" if all of it is above,
        else "cannot tell" (the gate's three outcomes)."""
        if self.latest.high < -limit_pct:
            return "failed"
        if self.latest.low > -limit_pct:
            return "passed"
        return "cannot tell"


def drifts(series: Sequence[HistorySeries], anchor: str | None = None) -> list[Drift]:
    """The latest figure of every BUILD series against an anchor (the given commit, or any fixed
    reference that is not the parent)."""
    return [
        Drift(s.key, s.points[-1])
        for s in series
        if s.key.of.series == Series.BUILD
        and s.key.against not in (None, PARENT)
        and (anchor is None or str(s.key.against).startswith(anchor))
        and s.points
    ]
