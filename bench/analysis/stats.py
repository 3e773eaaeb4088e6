"""Statistics shared by the report and the regression check.

All throughput metrics (tokens/s) are bigger-is-better, so a ratio new/baseline above 1 means
faster. Everything here is pure numpy/scipy/pandas so it runs (and is tested) without mlx.

The sample-level functions (summarize, ...) work on arrays; `summaries` and `compare` apply them to
the trial records of a results file (`Results.frame("trial")`), so the report and the check compute
every number the same way. What they return is typed rows (CellSummary, ComparisonRow, Latency,
...), the words for a verdict left to fusebench.present; frames stay inside for the computing (and
summary.csv's `summary_table`).

Why one long module: it is the one place a report's and a check's numbers come from (summaries,
paired comparisons, the whole table's Holm family, latency, the CSV frames), all on the same frame
columns through the one paired inference (analysis.inference); split, the two readers could drift
apart on a number.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import special

from ..core.cell import CONTROL_BUILD, CURRENT_BUILD, REFERENCE_BUILD
from ..core.experiment import DEFAULT_MARGIN_PCT, Trials
from ..core.fileformat import (
    CPU_CLOCK_COLUMNS,
    METRIC_COLUMNS,
    METRICS,
    Clock,
    Column,
    cpu_clock_tps,
)
from .clocks import clocked_estimate
from .inference import (
    STALLS_BASELINE,
    Adjusted,
    PairedEstimate,
    RatioInterval,
    RoundsMean,
    Unit,
    Verdict,
    adjust,
)
from .inference import verdict as inference_verdict
from .stopping import Goal, Row, decision_room

# Every bootstrap is seeded with this, so a report or a check rebuilt from the same results gives
# the same numbers.
SEED = 0
# The family-wise error rate of one table's verdicts, and the equivalence margin of "no change"
# (experiments may set their own: `margin_pct`).
ALPHA = 0.05


__all__ = [
    "ALL_VARIANTS",
    "CELL_KEYS",
    "METRICS",
    "METRIC_COLUMNS",
    "RUN_CELL_KEYS",
    "RUN_COMPARE_COLUMNS",
    "SUMMARY_COLUMNS",
    "CellSummary",
    "ComparisonRow",
    "Latency",
    "RatioCI",
    "Stalls",
    "Summary",
    "TrialValue",
    "bootstrap_ratio_of_medians_ci",
    "compare",
    "compare_builds",
    "compare_runs",
    "every_variant",
    "latencies",
    "paired_speedups",
    "summaries",
    "summarize",
    "summary_table",
    "timed_trials",
    "trial_values",
]


def _as_1d(values: ArrayLike) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).ravel()


def _drop_nan(x: np.ndarray) -> np.ndarray:
    return x[~np.isnan(x)]


@dataclass(frozen=True)
class Summary:
    """Robust summary of one sample; quartiles use numpy's default linear interpolation."""

    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    cv: float
    min: float
    max: float
    mean: float
    gmean: float  # geometric mean: what the delta tables' Baseline and New columns show


def summarize(values: ArrayLike) -> Summary:
    """Summarize a sample (NaNs dropped). Raises ValueError if nothing is left.

    cv is the sample std (ddof=1) over the mean; 0.0 when n < 2, NaN when the mean is 0.
    """
    x = _drop_nan(_as_1d(values))
    if x.size == 0:
        raise ValueError("summarize() needs at least one non-NaN value")
    q1, median, q3 = (float(q) for q in np.percentile(x, [25, 50, 75]))
    mean = float(np.mean(x))
    if x.size < 2:
        cv = 0.0
    elif mean == 0.0:
        cv = math.nan
    else:
        cv = float(np.std(x, ddof=1) / mean)
    return Summary(
        n=int(x.size),
        median=median,
        q1=q1,
        q3=q3,
        iqr=q3 - q1,
        cv=cv,
        min=float(np.min(x)),
        max=float(np.max(x)),
        mean=mean,
        gmean=float(np.exp(np.mean(np.log(x)))) if (x > 0).all() else math.nan,
    )


@dataclass(frozen=True)
class RatioCI(RatioInterval):
    """Median ratio new/baseline with a bootstrap confidence interval [low, high] over n ratios."""

    ratio: float
    low: float
    high: float
    n: int


# --- tables of trial records ----------------------------------------------------------------------

# What identifies one measured cell on one machine; machines are never pooled.
CELL_KEYS = (Column.MACHINE, Column.SIZE, Column.MODEL_KEY, Column.WORKLOAD)
RowKey = tuple[str, str, str, str]  # a build table's row: model_key, workload, variant, metric
_PAIR_KEYS = (Column.RUN_ID, Column.CELL, "pair")
ALL_VARIANTS = "all variants"  # compare_builds' pooled row


@dataclass(frozen=True)
class Stalls:
    """A paired row's stall figures (analysis.inference, "Stalls"): the arm the rule flags
    (STALLS_NEW, STALLS_BASELINE or None), whether Δ is over all rounds, the outlier rounds against
    each arm, the sign test of their directions, and both candidate Δs with their own (unadjusted)
    95% intervals, so a table can show the one it did not choose beside the one it did."""

    arm: str | None
    over_all_rounds: bool
    rounds: int  # every valid round
    against_new: int
    against_baseline: int
    sign_p: float
    all_rounds: RatioCI
    trimmed: RatioCI

    @property
    def against_arm(self) -> int:
        """The outlier rounds against the arm the rule flags."""
        return self.against_baseline if self.arm == STALLS_BASELINE else self.against_new


@dataclass(frozen=True)
class ComparisonRow:
    """One row of `compare` (or `compare_builds`): new against baseline in one cell and metric,
    paired round by round. Without a paired round the figures are NaN (counts 0) and verdict and
    stalls are None.

    baseline_gmean / new_gmean are the geometric means of the rounds Δ is over, so
    new_gmean / baseline_gmean − 1 = delta_pct on the wall clock; low / high are the row's own 95%
    interval (a confidence sequence, analysis.sequential), adj_low / adj_high the Holm-adjusted one
    the verdict is dual to, and half_width_pct that interval's half-width, the smallest effect the
    row could have detected. `clock` is the clock Δ and the intervals are on (analysis.clocks): on
    the CPU clock the gmeans stay wall tok/s; `clock_note` says why a row of a run on the CPU clock
    is on the wall clock.
    """

    machine: str
    size: str
    model_key: str
    workload: str
    metric: str
    # the variants compared (for compare_builds, the builds: "reference" and "current")
    baseline: str
    new: str
    variant: str = ""  # compare_builds: the variant compared across the builds, or ALL_VARIANTS
    n_pairs: int = 0
    excluded: int = 0  # rounds the outlier rule left out of Δ
    baseline_gmean: float = math.nan
    new_gmean: float = math.nan
    ratio: float = math.nan
    low: float = math.nan
    high: float = math.nan
    p_value: float = math.nan
    p_holm: float = math.nan
    adj_low: float = math.nan
    adj_high: float = math.nan
    verdict: Verdict | None = None
    stalls: Stalls | None = None
    mean_log: float = math.nan  # the estimate behind Δ, for forecasting the rounds a decision needs
    # the worker pairs, where they were the fixed-n interval's unit (analysis.inference.Unit.PAIR;
    # a confidence sequence keeps its n rounds, as its forecast does)
    pair_unit: int | None = None
    sd_log: float = math.nan
    level: float = math.nan  # the Holm level the adjusted interval is at
    clock: Clock = Clock.WALL
    clock_note: str = ""

    @property
    def delta_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    def rounds_to_decide(self, goal: Goal) -> int | None:
        """The rounds at which this row would be decided for `goal`, were its estimate and spread to
        stay (analysis.stopping); None without an interval. Where the pairs were the unit, more
        pairs of this run's rounds a pair, on their B - 1 degrees of freedom."""
        if self.n_pairs < 2 or not math.isfinite(self.level):
            return None
        alpha = 1.0 - self.level
        if self.pair_unit is None:
            return Row(self.mean_log, self.sd_log, self.n_pairs, alpha, goal).rounds_to_decide()
        per_pair = self.n_pairs / self.pair_unit
        for pairs in range(self.pair_unit + 1, 10_000):
            rounds = math.ceil(pairs * per_pair)
            t = float(special.stdtrit(pairs - 1, 1.0 - alpha / 2.0))
            half = t * self.sd_log / math.sqrt(rounds)
            if decision_room(self.mean_log, goal) >= half:
                return rounds
        return None

    @property
    def half_width_pct(self) -> float:
        return (self.adj_high - self.adj_low) / 2.0 * 100.0

    @property
    def interval(self) -> RatioCI | None:
        """The Holm-adjusted interval, or None without a paired round."""
        return (
            RatioCI(self.ratio, self.adj_low, self.adj_high, self.n_pairs) if self.n_pairs else None
        )

    @property
    def over_all_rounds(self) -> bool:
        """Whether the stall rule took Δ over all rounds (module inference, "Stalls")."""
        return self.stalls is not None and self.stalls.over_all_rounds


SUMMARY_COLUMNS = (
    *CELL_KEYS,
    "metric",
    "variant",
    "n",
    "median",
    "q1",
    "q3",
    "iqr",
    "cv",
    "min",
    "max",
    "mean",
    "gmean",
)


def timed_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials that count: warmups are excluded from every statistic."""
    if trials.empty:
        return trials
    timed = trials[~trials[Column.WARMUP].astype(bool)]
    # Which worker processes ran a round (run --against starts a fresh pair every worker_rounds);
    # files written before it ran each cell in one process per build.
    process = timed[Column.PROCESS].fillna(0) if Column.PROCESS in timed else 0
    on_cpu_clock = {
        derived: cpu_clock_tps(
            *(pd.to_numeric(timed[c], errors="coerce") for c in (tps, wall_s, cpu_s))
        )
        for tps, wall_s, cpu_s, derived in CPU_CLOCK_COLUMNS.values()
        if cpu_s in timed
    }
    return timed.assign(process=process, **on_cpu_clock)


@dataclass(frozen=True)
class CellSummary:
    """A cell's metric for one variant, summarized over its timed rounds."""

    machine: str
    size: str
    model_key: str
    workload: str
    variant: str
    metric: str
    summary: Summary


def summaries(trials: pd.DataFrame, metrics: Sequence[str] = METRICS) -> list[CellSummary]:
    """One per machine x size x model x workload x variant x metric: n, median, quartiles, IQR, CV.

    Warmup trials are dropped; so are cells where a metric has no value (gen with gen_tokens == 1).
    """
    columns = [_metric_column(m) for m in metrics]
    timed = timed_trials(trials)
    found = []
    if not timed.empty:
        _require_columns(timed, [*CELL_KEYS, "variant", *columns])
        for keys, group in timed.groupby([*CELL_KEYS, Column.VARIANT], sort=False, dropna=False):
            for metric, column in zip(metrics, columns, strict=True):
                values = group[column].to_numpy(dtype=np.float64)
                if not np.isnan(values).all():
                    found.append(CellSummary(*keys, metric=metric, summary=summarize(values)))
    return found


def summary_table(trials: pd.DataFrame, metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """`summaries` as a table with SUMMARY_COLUMNS, one row each (summary.csv)."""
    rows = [{**vars(s), **vars(s.summary)} for s in summaries(trials, metrics)]
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def compare(
    trials: pd.DataFrame,
    baseline: str,
    new: str,
    metric: str | Sequence[str],
    *,
    alpha: float = ALPHA,
    margin_pct: float = DEFAULT_MARGIN_PCT,
) -> list[ComparisonRow]:
    """Compare two variants cell by cell, with analysis.inference's paired method: one row per
    machine x size x model x workload x metric, one Holm family (compare_table: several).

    - Pairing: within each (run_id, cell, round), the log ratio new/baseline. Δ is exp(mean log
      ratio) − 1, and baseline_gmean / new_gmean are the geometric means of the kept rounds, so
      new_gmean / baseline_gmean − 1 = Δ. `excluded` counts rounds the outlier rule set aside.
      Warmups are excluded.
    - Stalls: when the stall rule takes Δ over all rounds (`over_all_rounds`), Δ, the intervals,
      Holm and the verdict use every round and `excluded` is 0; `stalls.arm` names the arm
      ("new" / "baseline") a significant share of the exclusions went against, and `stalls.trimmed`
      keeps the trimmed Δ to show beside it.
    - verdict: faster, slower, no change (within ±margin_pct), inconclusive, or needs more rounds
      (None without any pair), with the figure its wording states.
    - A/A (baseline == new): a variant cannot be paired with its own trial, so even rounds play
      baseline and odd rounds new, pairing round 2k with 2k+1; the spread then measures
      round-to-round noise.
    `metric` is "prefill", "gen", or a list of them.
    """
    return compare_table(trials, [(baseline, new)], metric, alpha=alpha, margin_pct=margin_pct)[
        (baseline, new)
    ]


def compare_table(
    trials: pd.DataFrame,
    pairs: Sequence[tuple[str, str]],
    metric: str | Sequence[str],
    *,
    alpha: float = ALPHA,
    margin_pct: float = DEFAULT_MARGIN_PCT,
) -> dict[tuple[str, str], list[ComparisonRow]]:
    """Several comparisons shown as one table (the main job's first screen: every size, metric
    and comparison of one machine and workload), compare()'s rows for each pair, with one Holm
    family across all of them: the table's verdicts together keep the 5% family-wise error."""
    metrics = [metric] if isinstance(metric, str) else list(metric)
    rows = {pair: _paired_rows(trials, *pair, metrics) for pair in dict.fromkeys(pairs)}
    return _judge(rows, alpha=alpha, margin_pct=margin_pct)


def compare_builds(
    trials: pd.DataFrame,
    *,
    alpha: float = ALPHA,
    margin_pct: float = DEFAULT_MARGIN_PCT,
    family: Collection[RowKey] | None = None,
) -> list[ComparisonRow]:
    """`run --against`: every variant's current build against the reference build, paired round by
    round (both builds ran each round back to back on the same prompt), and all variants pooled
    (`every_variant`). One table, one Holm family: compare()'s rows, with baseline "reference", new
    "current" and `variant` naming the variant compared across the builds, or ALL_VARIANTS.
    `family`: only these rows (model_key, workload, variant, metric), where a decision reads no
    other (a bisect's search step)."""
    rows = _build_rows(trials, (REFERENCE_BUILD, CURRENT_BUILD), pooled_only=False)
    if family is not None:
        rows = [row for row in rows if _row_key(row) in family]
    pair = (REFERENCE_BUILD, CURRENT_BUILD)
    return _judge({pair: rows}, alpha=alpha, margin_pct=margin_pct)[pair]


def compare_control(
    trials: pd.DataFrame, *, alpha: float = ALPHA, margin_pct: float = DEFAULT_MARGIN_PCT
) -> list[ComparisonRow]:
    """`run --against`'s control arm: the control build (the reference's code in a place of its
    own) against the reference, pooled over the variants it ran in each round (one a worker pair
    since 2026-12-07, every variant before), per cell and metric, a Holm family of its own. Both
    run identical code, so an interval that excludes 0 is what the setup reads between identical
    builds, not a finding about code. No rows for a run without the control arm."""
    builds = trials.get(Column.BUILD, ())
    if CONTROL_BUILD not in set(builds):
        return []
    pair = (REFERENCE_BUILD, CONTROL_BUILD)
    rows = _build_rows(_control_rounds(trials), pair, pooled_only=True)
    return _judge({pair: rows}, alpha=alpha, margin_pct=margin_pct)[pair]


def _control_rounds(trials: pd.DataFrame) -> pd.DataFrame:
    """The reference's and the control's timed trials of the variants the control ran, each as
    the round's one variant (ALL_VARIANTS) once pooled: the rows compare_control judges."""
    timed = timed_trials(trials)
    rounds = [key for key in ("run_id", "cell", "process", "round") if key in timed]
    control = timed[timed[Column.BUILD] == CONTROL_BUILD]
    ran = control[[*rounds, Column.VARIANT]].drop_duplicates()
    reference = timed[timed[Column.BUILD] == REFERENCE_BUILD].merge(ran)
    both = pd.concat([reference, control], ignore_index=True)
    variants = both.groupby(rounds)[Column.VARIANT].nunique()
    pooled = every_variant(both, int(variants.max())) if not both.empty else both
    return pooled.assign(**{Column.VARIANT: ALL_VARIANTS})


def _build_rows(
    trials: pd.DataFrame, builds: tuple[str, str], *, pooled_only: bool
) -> list[_Paired]:
    """The paired rows of `builds` (baseline, new) per variant and all variants pooled (or, with
    `pooled_only`, the pooled rows alone, or the one variant's where a run has one)."""
    timed = timed_trials(trials)
    rows: list[_Paired] = []
    if timed.empty or Column.BUILD not in timed:
        return rows
    variants = list(dict.fromkeys(timed[Column.VARIANT]))
    sides = [(variant, timed[timed[Column.VARIANT] == variant]) for variant in variants]
    if len(variants) > 1:
        pooled = (ALL_VARIANTS, every_variant(timed, len(variants)))
        sides = [pooled] if pooled_only else [*sides, pooled]
    for variant, mine in sides:
        more = _paired_rows(mine.assign(variant=mine[Column.BUILD]), *builds, METRICS)
        rows += [dataclasses.replace(row, variant=variant) for row in more]
    return rows


def _row_key(row: _Paired) -> RowKey:
    return row.cell[Column.MODEL_KEY], row.cell[Column.WORKLOAD], row.variant, row.metric


def round_seconds(trials: pd.DataFrame) -> dict[tuple[str, str], float]:
    """Each cell's (model_key, workload) median time a timed round's trials took, every variant and
    build of the round together: the pace at which more rounds would come (the worker's own overhead
    aside)."""
    timed = timed_trials(trials)
    if timed.empty or not {"prefill_s", "gen_s"} <= set(timed.columns):
        return {}
    spent = timed.assign(
        spent=timed[Column.PREFILL_S].fillna(0.0) + timed[Column.GEN_S].fillna(0.0)
    )
    per_round = spent.groupby(
        [Column.MODEL_KEY, Column.WORKLOAD, Column.RUN_ID, Column.ROUND], sort=False
    )["spent"].sum()
    medians = per_round.groupby(level=[Column.MODEL_KEY, Column.WORKLOAD], sort=False).median()
    return {key: float(value) for key, value in medians.items()}


def every_variant(timed: pd.DataFrame, n_variants: int) -> pd.DataFrame:
    """Each build's geometric mean over the variants, per cell and round, only in rounds where every
    variant ran.

    A change to shared code (the model, the worker, mlx) moves every variant alike; pooling the
    variants' paired ratios averages their independent trial noise, so such a change is seen with
    about √(variants) fewer rounds. The geometric mean of the builds' values is the geometric mean
    of the variants' current/reference ratios.
    """
    keys = [*CELL_KEYS, "run_id", "cell", "round", "process", "build"]
    keys += [c for c in (Column.TRIALS, Column.CLOCK) if c in timed]
    cpu_columns = [c[3] for c in CPU_CLOCK_COLUMNS.values() if c[3] in timed]
    columns = [*METRIC_COLUMNS.values(), *cpu_columns]
    logs = timed[[*keys, "variant"]].assign(
        **{c: np.log(timed[c].astype(np.float64)) for c in columns}
    )
    grouped = logs.groupby(keys, sort=False, dropna=False)
    pooled = grouped[columns].mean().apply(np.exp)
    # a round's CPU-clock value pools every variant or is missing (analysis.clocks then keeps the
    # row on the wall clock)
    counts = grouped[cpu_columns].count()
    pooled[cpu_columns] = pooled[cpu_columns].where(counts == n_variants)
    complete = grouped[Column.VARIANT].nunique() == n_variants
    return pooled[complete].reset_index().assign(warmup=False)


@dataclass(frozen=True)
class _Paired:
    """A compare() row before Holm: its cell and metric, and the paired estimate (None without a
    paired round)."""

    cell: dict[str, str]  # CELL_KEYS -> value
    metric: str
    estimate: PairedEstimate | None
    clock: Clock = Clock.WALL
    clock_note: str = ""
    variant: str = ""


def _paired_rows(
    trials: pd.DataFrame, baseline: str, new: str, metrics: Sequence[str]
) -> list[_Paired]:
    """compare()'s rows before Holm: per cell and metric, the paired estimate of new against
    baseline, on the clock of the run (analysis.clocks)."""
    columns = [_metric_column(m) for m in metrics]
    timed = timed_trials(trials)
    rows = []
    if not timed.empty:
        _require_columns(timed, [*CELL_KEYS, "run_id", "cell", "round", "variant", *columns])
        for keys, group in timed.groupby(list(CELL_KEYS), sort=False, dropna=False):
            for metric_name, column in zip(metrics, columns, strict=True):
                cpu_column = CPU_CLOCK_COLUMNS[metric_name][3]
                base_side, new_side = _sides(group, baseline, new, column, cpu_column)
                if base_side.empty and new_side.empty:
                    continue
                pairs = base_side.merge(
                    new_side, on=[*_PAIR_KEYS, "process"], suffixes=("_baseline", "_new")
                )
                cell = dict(zip(CELL_KEYS, keys, strict=True))
                rows.append(_Paired(cell, metric_name, *_estimate(pairs, group)))
    return rows


def _estimate(pairs: pd.DataFrame, group: pd.DataFrame) -> tuple[PairedEstimate | None, Clock, str]:
    """A row's paired estimate on its run's clock, the clock, and why it left the run's clock."""
    if pairs.empty:
        return None, Clock.WALL, ""
    sides = [
        pairs[f"{value}_{arm}"].to_numpy(np.float64)
        for value in ("value", "cpu")
        for arm in ("baseline", "new")
    ]
    # A round's processes: its run and its pair of workers (different runs never share one).
    processes = list(zip(pairs[Column.RUN_ID], pairs[Column.PROCESS], strict=True))
    clocked = clocked_estimate(
        *sides, _clock(group), processes=processes, fixed_rounds=fixed_rounds(group)
    )
    return clocked.estimate, clocked.clock, clocked.note


def _clock(trials: pd.DataFrame) -> Clock:
    """The clock these trials' runs chose: the CPU clock only when every run chose it."""
    if Column.CLOCK in trials and (trials[Column.CLOCK] == Clock.CPU).all():
        return Clock.CPU
    return Clock.WALL


def fixed_rounds(trials: pd.DataFrame) -> bool:
    """Whether these trials' rounds were fixed before anyone looked: one run, whose header says
    its round count was set in advance (core.experiment.Trials). Rounds pooled from several runs
    (check --confirm, bisect) were added on the data, and so were a trials: auto run's."""
    if Column.TRIALS not in trials or trials[Column.RUN_ID].nunique() != 1:
        return False
    return not trials[Column.TRIALS].map(lambda rule: Trials(rule).adaptive).any()


def _judge(
    rows: dict[tuple[str, str], list[_Paired]], *, alpha: float, margin_pct: float
) -> dict[tuple[str, str], list[ComparisonRow]]:
    """Holm across every pair's rows that have an estimate (one family), then each row's
    verdict."""
    estimates = [row.estimate for found in rows.values() for row in found if row.estimate]
    adjusted = iter(adjust(estimates, alpha=alpha))
    return {
        (baseline, new): [
            _comparison(
                row,
                baseline,
                new,
                next(adjusted) if row.estimate else None,
                alpha=alpha,
                margin_pct=margin_pct,
            )
            for row in found
        ]
        for (baseline, new), found in rows.items()
    }


def _comparison(
    row: _Paired,
    baseline: str,
    new: str,
    adjusted: Adjusted | None,
    *,
    alpha: float,
    margin_pct: float,
) -> ComparisonRow:
    keys = ComparisonRow(
        **row.cell, metric=row.metric, baseline=baseline, new=new, variant=row.variant
    )
    est = row.estimate
    if est is None or adjusted is None:
        return keys
    return dataclasses.replace(
        keys,
        n_pairs=est.n,
        excluded=est.excluded,
        baseline_gmean=est.baseline_gmean,
        new_gmean=est.new_gmean,
        ratio=est.ratio,
        low=est.low,
        high=est.high,
        p_value=est.p_value,
        p_holm=adjusted.p_holm,
        adj_low=adjusted.low,
        adj_high=adjusted.high,
        mean_log=est.mean_log,
        sd_log=est.sd_log,
        pair_unit=est.processes if est.unit == Unit.PAIR and est.fixed_rounds else None,
        level=adjusted.level,
        verdict=inference_verdict(adjusted, margin_pct=margin_pct, alpha=alpha),
        stalls=_stalls(est),
        clock=row.clock,
        clock_note=row.clock_note,
    )


def _metric_column(metric: str) -> str:
    if metric not in METRIC_COLUMNS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRIC_COLUMNS)}")
    return METRIC_COLUMNS[metric]


def _require_columns(frame: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"trial records lack column(s): {', '.join(missing)}")


def _sides(
    group: pd.DataFrame, baseline: str, new: str, column: str, cpu_column: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each side's values keyed by (run_id, cell, pair), one value per key (the median if a round
    repeats): `value` on the wall clock, `cpu` on the CPU clock (NaN where not recorded)."""

    def side(rows: pd.DataFrame, pair: pd.Series) -> pd.DataFrame:
        cpu = rows[cpu_column].astype(np.float64) if cpu_column in rows else math.nan
        keyed = rows.assign(pair=pair, value=rows[column].astype(np.float64), cpu=cpu).dropna(
            subset=["value"]
        )
        grouped = keyed.groupby([*_PAIR_KEYS, Column.PROCESS], sort=False)
        return grouped[["value", "cpu"]].median().reset_index()

    if baseline == new:
        rows = group[group[Column.VARIANT] == baseline]
        even = rows[Column.ROUND] % 2 == 0
        return side(rows[even], rows[Column.ROUND][even] // 2), side(
            rows[~even], rows[Column.ROUND][~even] // 2
        )
    base_rows, new_rows = (
        group[group[Column.VARIANT] == baseline],
        group[group[Column.VARIANT] == new],
    )
    return side(base_rows, base_rows[Column.ROUND]), side(new_rows, new_rows[Column.ROUND])


def _stalls(est: PairedEstimate) -> Stalls | None:
    """A row's stall figures; an estimate built by hand (tests) has none."""
    if est.trimmed is None or est.all_rounds is None:
        return None
    return Stalls(
        arm=est.stalls,
        over_all_rounds=est.over_all_rounds,
        rounds=est.all_rounds.n,
        against_new=est.excluded_new,
        against_baseline=est.excluded_baseline,
        sign_p=est.sign_p,
        all_rounds=_ratio_ci(est.all_rounds),
        trimmed=_ratio_ci(est.trimmed),
    )


def _ratio_ci(mean: RoundsMean) -> RatioCI:
    return RatioCI(mean.ratio, mean.low, mean.high, mean.n)


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if values.size else math.nan


def bootstrap_ratio_of_medians_ci(
    baseline_values: ArrayLike,
    new_values: ArrayLike,
    seed: int = 0,
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
) -> RatioCI:
    """median(new) / median(baseline) with a percentile-bootstrap CI, for two samples that are NOT
    paired.

    Two separate runs (a stored baseline and today's run) share no rounds, so each side is resampled
    on its own; the CI then carries both sides' spread. NaNs are dropped. `n` is the smaller side.
    With a single value on either side the CI is degenerate (callers should treat it as unproven);
    an empty side or a zero baseline median raises ValueError.
    """
    b, n = _drop_nan(_as_1d(baseline_values)), _drop_nan(_as_1d(new_values))
    if b.size == 0 or n.size == 0:
        raise ValueError("bootstrap_ratio_of_medians_ci() needs at least one value on each side")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if np.median(b) == 0.0:
        raise ValueError("the baseline median is 0; a ratio to it is undefined")
    ratio = float(np.median(n) / np.median(b))
    if b.size == 1 or n.size == 1:
        return RatioCI(ratio=ratio, low=ratio, high=ratio, n=1)
    rng = np.random.default_rng(seed)
    base_medians = np.median(b[rng.integers(0, b.size, size=(resamples, b.size))], axis=1)
    new_medians = np.median(n[rng.integers(0, n.size, size=(resamples, n.size))], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(new_medians / base_medians, [alpha, 1.0 - alpha])
    return RatioCI(ratio=ratio, low=float(low), high=float(high), n=int(min(b.size, n.size)))


# --- one run against another (unpaired) -----------------------------------------------------------

# A cell of one run matched with the same cell of another. No machine column: a stored baseline
# comes from another host name (a CI runner's changes every time); whether the machines match is the
# caller's fingerprint check.
RUN_CELL_KEYS = (Column.MODEL_KEY, Column.SIZE, Column.WORKLOAD, Column.VARIANT)
RUN_COMPARE_COLUMNS = (
    *RUN_CELL_KEYS,
    "metric",
    "baseline_median",
    "new_median",
    "n_baseline",
    "n_new",
    "ratio",
    "low",
    "high",
    "delta_pct",
)


def compare_runs(
    baseline_trials: pd.DataFrame,
    new_trials: pd.DataFrame,
    metrics: Sequence[str] = METRICS,
    *,
    seed: int = 0,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Each model x size x workload x variant x metric of `new_trials` against the same cell of
    `baseline_trials`.

    The two sides come from different runs, so nothing pairs them: the ratio is
    median(new) / median(baseline) of the timed trials, with bootstrap_ratio_of_medians_ci's CI
    (seeded). A cell found on one side only gets a row with n = 0 on the other and NaN ratio, so
    callers can list it as missing or new. Rows: the baseline's cells in order, then cells only the
    new side has.
    """
    base, new = (
        _values_by_run_cell(baseline_trials, metrics),
        _values_by_run_cell(new_trials, metrics),
    )
    rows = []
    for key in dict.fromkeys([*base, *new]):
        b, n = base.get(key, np.array([])), new.get(key, np.array([]))
        ci = (
            bootstrap_ratio_of_medians_ci(b, n, seed, confidence=confidence)
            if b.size and n.size
            else None
        )
        rows.append(
            {
                **dict(zip((*RUN_CELL_KEYS, "metric"), key, strict=True)),
                "baseline_median": _median(b),
                "new_median": _median(n),
                "n_baseline": int(b.size),
                "n_new": int(n.size),
                "ratio": ci.ratio if ci else math.nan,
                "low": ci.low if ci else math.nan,
                "high": ci.high if ci else math.nan,
                "delta_pct": ci.delta_pct if ci else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=list(RUN_COMPARE_COLUMNS))


def _values_by_run_cell(trials: pd.DataFrame, metrics: Sequence[str]) -> dict[tuple, np.ndarray]:
    columns = [_metric_column(m) for m in metrics]
    timed = timed_trials(trials)
    values: dict[tuple, np.ndarray] = {}
    if timed.empty:
        return values
    _require_columns(timed, [*RUN_CELL_KEYS, *columns])
    for keys, group in timed.groupby(list(RUN_CELL_KEYS), sort=False, dropna=False):
        for metric, column in zip(metrics, columns, strict=True):
            sample = _drop_nan(group[column].to_numpy(dtype=np.float64))
            if sample.size:
                values[(*keys, metric)] = sample
    return values


def paired_speedups(trials: pd.DataFrame, baseline: str, new: str) -> pd.DataFrame:
    """Per-round speedups new/baseline as trial-like rows (variant "NEW/BASELINE"), ready for
    compare_runs.

    Both variants of a round share whatever the machine was doing at the time, so the paired ratio
    cancels load that moves the absolute tok/s of a whole run; comparing speedups across runs then
    resolves a fused path that lost ground even when the runs' absolute speeds differ. Pairs where
    either side lacks a value stay NaN.
    """
    timed = timed_trials(trials)
    columns = list(METRIC_COLUMNS.values())
    keys = ["machine", *RUN_CELL_KEYS[:-1], "run_id", "cell", "round"]
    if timed.empty:
        return pd.DataFrame(columns=[*keys, Column.VARIANT, Column.WARMUP, *columns])
    _require_columns(timed, [*keys, "variant", *columns])

    def side(variant: str) -> pd.DataFrame:
        rows = timed[timed[Column.VARIANT] == variant]
        return rows.groupby(keys, sort=False, dropna=False)[columns].median().reset_index()

    pairs = side(baseline).merge(side(new), on=keys, suffixes=("_baseline", "_new"))
    speedups = pairs[keys].assign(variant=f"{new}/{baseline}", warmup=False)
    for column in columns:
        speedups[column] = pairs[f"{column}_new"].astype(np.float64) / pairs[
            f"{column}_baseline"
        ].astype(np.float64)
    return speedups


@dataclass(frozen=True)
class Latency:
    """Latency as a user feels it, for one cell and variant, in seconds: the median time to first
    token (the prefill) and the 50th, 90th and 99th percentiles of inter-token latency over every
    decode step of the timed rounds (NaN without any), and the median first token as mlx-lm's
    stream_generate reads it (ttft_s, after queuing the first decode step), where the trials
    recorded it."""

    machine: str
    size: str
    model_key: str
    workload: str
    variant: str
    ttft_p50: float
    itl_p50: float
    itl_p90: float
    itl_p99: float
    steps: int  # the decode steps pooled
    mlx_lm_ttft_p50: float | None


def latencies(trials: pd.DataFrame) -> list[Latency]:
    """Each cell and variant's Latency; none for trials that recorded no decode steps (step_s)."""
    timed = timed_trials(trials)
    if timed.empty or Column.STEP_S not in timed:
        return []
    found = []
    for keys, group in timed.groupby([*CELL_KEYS, Column.VARIANT], sort=False, dropna=False):
        steps = np.concatenate(
            [np.asarray(s, dtype=np.float64) for s in group[Column.STEP_S] if isinstance(s, list)]
            or [np.array([])]
        )
        p50, p90, p99 = np.percentile(steps, [50, 90, 99]) if steps.size else (math.nan,) * 3
        mlx_lm = (
            pd.to_numeric(group[Column.TTFT_S], errors="coerce").median()
            if Column.TTFT_S in group
            else math.nan
        )
        found.append(
            Latency(
                *keys,
                ttft_p50=float(group[Column.PREFILL_S].median()),
                itl_p50=float(p50),
                itl_p90=float(p90),
                itl_p99=float(p99),
                steps=int(steps.size),
                mlx_lm_ttft_p50=None if math.isnan(mlx_lm) else float(mlx_lm),
            )
        )
    return found


@dataclass(frozen=True)
class TrialValue:
    """One timed trial's tok/s on one metric."""

    model_key: str
    size: str
    variant: str
    round: int
    metric: str
    tps: float


def trial_values(trials: pd.DataFrame, metrics: Sequence[str] = METRICS) -> list[TrialValue]:
    """Every timed trial's value of each metric it has."""
    timed = timed_trials(trials)
    if timed.empty:
        return []
    keys = list(
        zip(
            timed[Column.MODEL_KEY],
            timed[Column.SIZE],
            timed[Column.VARIANT],
            timed[Column.ROUND],
            strict=True,
        )
    )
    return [
        TrialValue(key, size, variant, int(round_), metric, float(value))
        for metric in metrics
        for (key, size, variant, round_), value in zip(
            keys, timed[_metric_column(metric)].astype(np.float64), strict=True
        )
        if not math.isnan(value)
    ]
