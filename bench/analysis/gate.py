"""The regression gate's verdicts (`fusebench check`): exit 0 every row within the limit, 1
something regressed, 2 bad input, 3 cannot tell (no row regressed, but some row's interval straddles
the limit).

Three outcomes, never a silent pass (Pinpoint's rule, with fusebench's intervals): a row whose whole
interval lies beyond the limit regressed; one whose whole interval lies inside it is within the
limit; one whose interval reaches across the limit is "cannot tell", with the rounds that would
settle it at the noise and pace the run showed (`Settle`). "passed" means every row was within the
limit.

The checks, each used when its input is there:
- Against the reference build of a `run --against` file (the CI gate): every variant and metric, and
  all variants pooled, paired round by round across the builds (stats.compare_builds), Holm across
  the table. Nothing stored is needed and the machine does not matter, since both builds ran on it
  in the same job. A row also fails when the current build stalls (analysis.inference, "Stalls":
  significantly more outlier rounds against it than against the reference), whatever its Δ: a path
  that sometimes re-traces or falls back is a regression the mean can hide.
- Against a remembered run (`--baseline NAME`: a run the history holds under a name given with
  `fusebench history add --name`, on this machine; or a results file, as `baseline save` wrote
  them), cell by cell (model x size x workload x variant x metric):
  - tok/s: the ratio of medians current/baseline with a bootstrap CI, unpaired, since the runs share
    no rounds. This is information, never a failure, unless the baseline comes from this machine
    fingerprint and a calibration of it says what it can resolve: run-to-run tok/s on a shared VM
    moves by tens of percent;
  - speedup: for each comparison the experiment declares, the per-round speedup new/baseline (paired
    within a round, so load that slows a whole run cancels) against the remembered run's; this
    catches a fusion that stops paying off.
  A cell fails only when its whole CI lies beyond the allowed slowdown; a point estimate alone never
  fails. Cells in only one of the files are listed as missing or new, never failed. The baseline
  must come from the same machine fingerprint (backend, device, BLAS, CPU model) unless
  --allow-other-machine.
- A fusion's speedup against the history: the speedups of the runs of the same experiment on this
  machine that the history holds (`history add`, `calibrate`), from 10 runs on
  (fusebench.analysis.speedups).
- The expectations the experiment declares (`expect:` in its YAML, read back from the results' run
  header):
  "new no more than X% slower than baseline on a metric" (paired rounds, stats.compare), and "all
  variants correct".
- Without any check of speed (a plain run: ungated_speed): its correctness records, and a note that
  speed was not gated and how to gate it.

Noise: `fusebench calibrate` stores this machine's A/A noise per metric in
results/baselines/noise-<machine>.json; check picks it up by itself (or takes --noise). A cell then
fails only for a slowdown beyond both the requested threshold and the calibrated minimum detectable
effect, and the Limit column says which of the two bound.

Every finding is typed (Check, Status, Limit and its Bound, the interval's Verdict); how each reads,
in a table or in JSON, is fusebench.present.gate's choice.

Why one long module: the five checks above share one `Finding`, one limit and one three-outcome
verdict; apart, the verdict would be written five times. What the check reads (the results, the
noise file, the remembered run, the history) commands.gate_session reads: this module opens no
file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.calibration import Noise, PastSpeedups
from ..core.experiment import DEFAULT_MARGIN_PCT, Experiment
from ..core.fileformat import Clock, Column, ResultsError
from ..core.fingerprint import Fingerprint
from ..core.history import HistoryPoint, Series
from ..core.results import (
    Results,
    require_timed_trials,
)
from ..core.spec import parse_experiment
from . import stats
from .allocation import allocations
from .inference import STALLS_NEW, Verdict, interval_verdict, slower_beyond
from .placement import summarize_placement
from .speedups import MIN_RUNS, expected, prediction_pct, sd_pct, speedup
from .stats import SEED, ComparisonRow, Stalls
from .stopping import Goal
from .study import CorrectnessCheck, cell_labels, correctness_checks, current_build, ordered_cells

# fewer values a side give a bootstrap CI that proves nothing, so such a cell never fails
MIN_VALUES_FOR_CI = 3


class Check(StrEnum):
    """The kinds of check: tok/s and speedup against the remembered run, the experiment's
    expectations, correctness, the current build against the reference build, and a speedup against
    the history's runs."""

    TPS = "tps"
    SPEEDUP = "speedup"
    EXPECT = "expect"
    CORRECT = "correct"
    BUILD = "build"
    HISTORY = "history"
    CONTROL = "control"  # run --against's control arm: identical builds in two places


# The checks that gate speed; without one, a check passes on correctness alone, and says so.
SPEED_CHECKS = (Check.TPS, Check.SPEEDUP, Check.EXPECT, Check.BUILD, Check.HISTORY)
# The checks whose baseline and current values are speedups (new / baseline), not tok/s.
RATIO_CHECKS = (Check.SPEEDUP, Check.HISTORY)
# Which calibrated noise band bounds each kind of check (see fusebench.analysis.noise).
NOISE_SCOPE = {
    Check.TPS: "run_to_run_tps",
    Check.SPEEDUP: "run_to_run_speedup",
    Check.EXPECT: "within_run",
}


class Status(StrEnum):
    """What the gate made of one row."""

    REGRESSED = "regressed"  # the whole interval lies beyond the limit
    STALLS = "stalls"  # the current build stalls where the reference does not (stall_failure)
    NO_DATA = "no data"  # nothing to judge an expectation (or correctness) on
    INCORRECT = "incorrect"
    CORRECT = "correct"
    WITHIN_LIMIT = "within limit"  # `Finding.verdict` says what the interval does show
    # tok/s beyond the limit that cannot fail here (Finding.note says why)
    INFORMATION = "slower, information only"
    NEW = "new"  # not in the baseline
    MISSING = "missing"  # not in the current results
    TOO_FEW_VALUES = "too few values"  # fewer than MIN_VALUES_FOR_CI values for a CI
    NEEDS_HISTORY = "needs more stored runs"  # fewer than speedups.MIN_RUNS runs in the history
    WITHIN_HISTORY = "within history"
    # the interval reaches across the limit: neither within it nor beyond it
    CANNOT_TELL = "cannot tell"
    # the control arm: no difference seen between identical builds (the interval holds 0), or one
    SETUP_ALIKE = "identical builds: no difference seen"
    SETUP_DIFFERS = "identical builds read apart"


FAILING = frozenset({Status.REGRESSED, Status.STALLS, Status.NO_DATA, Status.INCORRECT})
# exit 3: the gate could not see (SETUP_DIFFERS: its setup reads a difference between identical
# builds, so no verdict on the code stands)
UNDECIDED = frozenset({Status.CANNOT_TELL, Status.TOO_FEW_VALUES, Status.SETUP_DIFFERS})
EXIT_PASSED, EXIT_FAILED, EXIT_CANNOT_TELL = 0, 1, 3


class CheckError(ResultsError):
    """Bad input to the check (nothing to check, a bad threshold); the message is one line."""


class Bound(StrEnum):
    """What set a limit."""

    THRESHOLD = "threshold"  # the requested --max-regression
    NOISE = "noise"  # the calibrated minimum detectable effect
    HISTORY = "history"  # the prediction bound of the history's speedups


@dataclass(frozen=True)
class Limit:
    """The slowdown a cell may show before it fails, and what set it."""

    pct: float
    bound: Bound
    # the calibrated MDE: a CI wholly inside ±noise_pct reads "no change", whichever bound won
    noise_pct: float = 0.0


def limit_for(threshold_pct: float, noise: Noise | None, check: Check, metric: str) -> Limit:
    """The larger of the threshold and the calibrated MDE: a smaller slowdown cannot be told from
    noise."""
    band = noise.band(NOISE_SCOPE[check], metric) if noise else None
    mde = band.mde_pct if band else 0.0
    if mde > threshold_pct:
        return Limit(mde, Bound.NOISE, mde)
    return Limit(threshold_pct, Bound.THRESHOLD, mde)


@dataclass(frozen=True)
class Finding:
    """One row of the gate: a check of one cell, variant and metric, and what it found."""

    check: Check
    cell: str  # the cell's label (cell_names), "" where a row covers no one cell
    variant: str
    metric: str
    status: Status = Status.WITHIN_LIMIT
    # the reference value: the remembered run's median, or the baseline variant's
    baseline: float = math.nan
    current: float = math.nan
    ci: stats.RatioCI | None = None
    limit: Limit | None = None
    # within the limit: what the interval shows (faster, no change, ...)
    verdict: Verdict | None = None
    note: str = ""  # the facts behind the status, for a reader
    model_key: str = ""  # which model, for re-measuring the cell (check --confirm)
    # paired rows only: the stall rule's figures (analysis.inference, "Stalls")
    stalls: Stalls | None = None
    settle: Settle | None = None  # cannot tell: what would settle it
    clock: Clock = Clock.WALL  # paired rows: the clock Δ and the interval are on (analysis.clocks)

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    @property
    def undecided(self) -> bool:
        return self.status in UNDECIDED


@dataclass(frozen=True)
class Settle:
    """What would settle an undecided paired row: the rounds its interval would need at this run's
    estimate and spread (None: none would, the estimate sits on the limit), and their time at the
    run's pace (None: unknown)."""

    rounds: int | None
    seconds: float | None


def stall_failure(finding: Finding) -> Finding:
    """The A/B gate: the current build's variant stalls where the reference's does not. That fails
    even when Δ over all rounds stays within the limit: a path that sometimes falls back or
    re-traces is a regression in itself."""
    if finding.stalls is None or finding.stalls.arm != STALLS_NEW or finding.failed:
        return finding
    return replace(finding, status=Status.STALLS)


@dataclass(frozen=True)
class Median:
    """One cell's median over the timed rounds of a variant's tok/s, or (`speedup`) of a
    comparison's per-round speedup, whose variant reads "new/baseline"."""

    cell: str  # the cell's label (cell_names)
    speedup: bool
    figures: stats.CellSummary


@dataclass(frozen=True)
class GateOutcome:
    """What `fusebench check` decided: its findings, worst first, its notes, and the current
    results' figures (for github-action-benchmark)."""

    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    medians: tuple[Median, ...]

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.failed]

    @property
    def undecided(self) -> list[Finding]:
        return [f for f in self.findings if f.undecided]

    @property
    def exit_code(self) -> int:
        if self.failures:
            return EXIT_FAILED
        return EXIT_CANNOT_TELL if self.undecided else EXIT_PASSED


# --- findings -------------------------------------------------------------------------------------


def judge(base: Finding, ci: stats.RatioCI | None, n_baseline: int, n_current: int) -> Finding:
    """Fill in a finding's CI and status: a CI wholly beyond the limit fails, one wholly inside
    passes, one across the limit cannot tell."""
    if n_baseline == 0:
        return replace(base, status=Status.NEW, note="not in the baseline")
    if n_current == 0:
        return replace(base, status=Status.MISSING, note="not in the current results")
    if ci.n < MIN_VALUES_FOR_CI:
        return replace(
            base,
            ci=ci,
            status=Status.TOO_FEW_VALUES,
            note=f"{ci.n} values; {MIN_VALUES_FOR_CI} needed for a CI",
        )
    if slower_beyond(ci, base.limit.pct):
        return replace(base, ci=ci, status=Status.REGRESSED)
    if ci.low < 1.0 - base.limit.pct / 100.0:
        return replace(base, ci=ci, status=Status.CANNOT_TELL)
    words = interval_verdict(
        ci.low, ci.high, ci.n, margin_pct=max(base.limit.noise_pct, DEFAULT_MARGIN_PCT)
    )
    return replace(base, ci=ci, status=Status.WITHIN_LIMIT, verdict=words)


def _unpaired_ci(row: Any, n: int) -> stats.RatioCI | None:
    """A compare_runs row's interval."""
    if not math.isfinite(row.ratio):
        return None
    return stats.RatioCI(ratio=row.ratio, low=row.low, high=row.high, n=n)


def baseline_findings(
    current: pd.DataFrame,
    baseline: pd.DataFrame,
    comparisons: Sequence[tuple[str, str]],
    threshold_pct: float,
    noise: Noise | None,
    tps_information: str = "",
) -> list[Finding]:
    """Each cell's tok/s, and each comparison's speedup, against the stored baseline. When
    `tps_information` says why (no calibration on this machine, another machine), tok/s is
    information: its finding is shown, never failed."""
    labels = cell_names([current, baseline])
    findings = []
    tables = [(Check.TPS, stats.compare_runs(baseline, current, seed=SEED))]
    for pair in comparisons:
        speedups = stats.compare_runs(
            stats.paired_speedups(baseline, *pair), stats.paired_speedups(current, *pair), seed=SEED
        )
        tables.append((Check.SPEEDUP, speedups))
    for check, table in tables:
        for row in table.itertuples():
            base = Finding(
                check,
                labels[row.model_key, row.size, row.workload],
                row.variant,
                row.metric,
                baseline=row.baseline_median,
                current=row.new_median,
                limit=limit_for(threshold_pct, noise, check, row.metric),
            )
            n = min(row.n_baseline, row.n_new)
            finding = judge(base, _unpaired_ci(row, n), row.n_baseline, row.n_new)
            if check == Check.TPS and tps_information and (finding.failed or finding.undecided):
                shows = (
                    None
                    if finding.failed
                    else interval_verdict(finding.ci.low, finding.ci.high, finding.ci.n)
                )
                finding = replace(
                    finding, status=Status.INFORMATION, note=tps_information, verdict=shows
                )
            findings.append(finding)
    return findings


def tps_information(
    noise: Noise | None, baseline_machine: Fingerprint, machine: Fingerprint
) -> str:
    """Why absolute tok/s against a stored baseline cannot fail here, or "" when it can: the same
    machine fingerprint, and a calibration of it, whose noise band then sets the limit (see
    limit_for)."""
    if baseline_machine != machine:
        return "the baseline comes from another machine"
    if (
        noise is None
        or noise.fingerprint != machine
        or noise.band(NOISE_SCOPE[Check.TPS], "prefill") is None
    ):
        return (
            "no noise calibration of this machine says what "
            "tok/s it can resolve (fusebench calibrate)"
        )
    return ""


def history_findings(
    current: Sequence[HistoryPoint],
    past: Sequence[PastSpeedups],
    tolerance_pct: float,
    labels: dict[tuple[str, str, str], str],
) -> list[Finding]:
    """Each comparison's speedup in this run (its COMPARISON points, as the history would store
    them) against the history's runs (fusebench.analysis.speedups): it fails when it falls below
    their geometric mean by more than max(tolerance, the prediction bound, Bonferroni over the rows
    gated), and only from MIN_RUNS stored runs on."""
    stored = {p.key: p for p in past}
    measured = [
        (point, stored.get((point.of.model_key, point.of.workload, point.of.name, point.of.metric)))
        for point in current
        if point.of.series == Series.COMPARISON
    ]
    # Bonferroni over these rows
    gated = sum(1 for _, past in measured if past and past.runs >= MIN_RUNS)
    findings = []
    for point, past in measured:
        if past is None:
            continue
        now = speedup(point)
        base = Finding(
            Check.HISTORY,
            labels[point.of.model_key, point.of.size, point.of.workload],
            point.of.name,
            point.of.metric,
            baseline=expected(past),
            current=now,
        )
        delta_pct = (now / expected(past) - 1.0) * 100.0
        facts = f"Δ {delta_pct:+.1f}% from the mean of {past.runs} runs (SD {sd_pct(past):.1f}%)"
        if past.runs < MIN_RUNS:
            findings.append(
                replace(
                    base,
                    status=Status.NEEDS_HISTORY,
                    note=f"{facts}; add runs: fusebench history add, or calibrate",
                )
            )
            continue
        bound = prediction_pct(past, rows=gated)
        limit = (
            Limit(bound, Bound.HISTORY)
            if bound > tolerance_pct
            else Limit(tolerance_pct, Bound.THRESHOLD)
        )
        status = Status.REGRESSED if delta_pct < -limit.pct else Status.WITHIN_HISTORY
        findings.append(replace(base, limit=limit, status=status, note=facts))
    return findings


def expectation_findings(
    exp: Experiment, trials: pd.DataFrame, correctness: pd.DataFrame, noise: Noise | None
) -> list[Finding]:
    findings = []
    labels = cell_names([trials, correctness])
    for expectation in exp.expect:
        if expectation.kind == "all_correct":
            findings += correctness_findings(correctness_checks(correctness), labels)
            continue
        pair, metric = expectation.comparison, expectation.metric
        limit = limit_for(expectation.max_slowdown_pct, noise, Check.EXPECT, metric)
        variant = f"{pair.new} vs {pair.baseline}"
        table = (
            []
            if trials.empty
            else stats.compare(trials, pair.baseline, pair.new, metric, margin_pct=exp.margin_pct)
        )
        paired = [row for row in table if row.n_pairs > 0]
        if not paired:
            findings.append(
                Finding(
                    Check.EXPECT,
                    "",
                    variant,
                    metric,
                    status=Status.NO_DATA,
                    limit=limit,
                    note=f"no round ran both {pair.baseline} and {pair.new}",
                )
            )
            continue
        pace = stats.round_seconds(trials)
        for row in paired:
            base = Finding(
                Check.EXPECT,
                labels[row.model_key, row.size, row.workload],
                variant,
                metric,
                baseline=row.baseline_gmean,
                current=row.new_gmean,
                limit=limit,
                stalls=row.stalls,
            )
            findings.append(
                with_settle(judge(base, row.interval, row.n_pairs, row.n_pairs), row, pace)
            )
    return findings


def correctness_findings(
    checks: Sequence[CorrectnessCheck], labels: dict[tuple[str, str, str], str]
) -> list[Finding]:
    """A failing variant names its cell; an all-clear is one line; no records at all cannot prove
    anything."""
    if not checks:
        return [
            Finding(
                Check.CORRECT,
                "",
                "",
                "",
                status=Status.NO_DATA,
                note="no correctness records in the results",
            )
        ]
    failing = [c for c in checks if not c.passed]
    if not failing:
        return [
            Finding(
                Check.CORRECT,
                "",
                "every variant",
                "",
                status=Status.CORRECT,
                note=f"{len(checks)} correctness checks passed",
            )
        ]
    return [
        Finding(
            Check.CORRECT,
            labels[c.model_key, c.size, c.workload],
            c.variant,
            "",
            status=Status.INCORRECT,
            note=f"max |logit err| {c.max_abs_err:.3g} vs atol {c.atol:g} against {c.reference}; "
            f"{c.tokens_agree}/{c.tokens_checked} greedy tokens agree",
        )
        for c in failing
    ]


def cell_names(frames: Sequence[pd.DataFrame]) -> dict[tuple[str, str, str], str]:
    """(model_key, size, workload) -> "E2B (2/35 layers) · pp128 tg4 b1", the model key added only
    when sizes clash."""
    names = cell_labels(ordered_cells(frames))
    labels = {}
    for frame in frames:
        if not frame.empty:
            for key, size, workload in zip(
                frame[Column.MODEL_KEY], frame[Column.SIZE], frame[Column.WORKLOAD], strict=True
            ):
                labels[key, size, workload] = f"{names[key, size]} · {workload}"
    return labels


def worst_first(findings: list[Finding]) -> list[Finding]:
    """Failures first, then by Δ, most negative first; rows without a Δ (missing, new, correctness)
    last."""
    return sorted(
        findings, key=lambda f: (not f.failed, f.ci is None, f.ci.delta_pct if f.ci else 0.0)
    )


def medians(trials: pd.DataFrame, comparisons: Sequence[tuple[str, str]]) -> list[Median]:
    """Each cell's median tok/s per variant, then its median speedup per comparison
    (github-action-benchmark's figures)."""
    timed = stats.timed_trials(trials)
    labels = cell_names([timed])
    tables = [(stats.summaries(timed), False)]
    tables += [(stats.summaries(stats.paired_speedups(timed, *pair)), True) for pair in comparisons]
    return [
        Median(labels[s.model_key, s.size, s.workload], speedup, s)
        for table, speedup in tables
        for s in table
    ]


# --- inputs ---------------------------------------------------------------------------------------


def experiments_of(results: Results, path: Path) -> list[tuple[Experiment, set[str]]]:
    """The experiments in the run headers (validated again, as the YAML schema demands), each with
    its run ids."""
    # content -> (the file it was read from, the runs)
    by_content: dict[str, tuple[str, set[str]]] = {}
    for run_id, run in results.headers.items():
        if run.experiment and run.experiment.content:
            file = run.experiment.file or "experiment"
            by_content.setdefault(run.experiment.content, (file, set()))[1].add(run_id)
    return [
        (parse_experiment(content, f"{path} (run header: {file})", stored=True), run_ids)
        for content, (file, run_ids) in by_content.items()
    ]


def build_findings(
    results: Results, trials: pd.DataFrame, path: Path, max_regression: float, notes: list[str]
) -> list[Finding]:
    """`run --against`: every variant and metric of the current build against the reference build,
    paired round by round (both ran each round back to back), Holm across the table. A cell that
    failed in either build leaves nothing to compare: that is bad input (exit 2), never a pass."""
    errors = results.of_kind("error")
    if errors:
        raise CheckError(
            f"{path}: cannot compare the builds: "
            f"{errors[0].get('cell', '?')}: {errors[0].get('reason', '?')}"
        )
    builds = next(iter(results.headers.values())).builds
    notes.append(
        "builds: "
        + "; ".join(
            f"{name} {b.label or b.short_commit}" + (" (dirty)" if b.dirty else "")
            for name, b in builds.items()
        )
    )
    labels = cell_names([trials])
    limit = Limit(max_regression, Bound.THRESHOLD)
    pace = stats.round_seconds(trials)
    control = [_control_finding(row, labels) for row in stats.compare_control(trials)]
    if not control:
        notes.append(
            "no control arm: this run did not measure what its setup reads between identical "
            "builds (run --against without --no-control, sequential rounds, measures it)"
        )
    rows = stats.compare_builds(trials)
    lows = [row.interval.low for row in rows if row.interval and math.isfinite(row.interval.low)]
    if lows:
        notes.append(
            f"tightest limit: {max(0.0, (1 - min(lows)) * 100):.1f}% (every row's interval lies "
            "above it: a --max-regression below it could not pass this run)"
        )
    notes += allocation_notes(results, trials, pace, len(rows))
    placed = summarize_placement(results.worker_records())
    if placed is not None:
        notes.append(
            "placement: the builds' workers started alike, in places that rotated"
            if placed.alike
            else "placement differed between the builds in "
            + ", ".join(d.field for d in placed.differences)
            + ": a Δ may be the place's (fusebench report names the values)"
        )
    return control + [stall_failure(_build_finding(row, labels, limit, pace)) for row in rows]


def allocation_notes(
    results: Results, trials: pd.DataFrame, pace: dict[tuple[str, str], float], family: int
) -> list[str]:
    """One cell's pooled rows: the scatter within and between its worker pairs, and the rounds a
    pair that would have narrowed the interval most in the same time (analysis.allocation), at
    the Holm level of the family's first row."""
    if len(pace) != 1 or not family:
        return []
    fresh_s = sum(spent.phases.get("fresh pairs", 0.0) for spent in results.time_spent())
    found = allocations(trials, fresh_s, next(iter(pace.values())), stats.ALPHA / family)
    notes = []
    for a in found:
        c = a.measured
        measured = (
            f"pairs ({stats.ALL_VARIANTS}, {a.metric}): a round scatters {c.within:.2%} within "
            f"a pair, a pair's own offset {c.between:.2%} between {c.pairs} pairs, a fresh pair "
            f"cost {a.pair_cost:.1f} rounds"
        )
        if a.best != a.rounds_per_pair and a.narrower < 0.9:
            notes.append(
                f"{measured}: {a.best} round(s) a pair (worker_rounds: {a.best}) would have "
                f"given an interval about {1 - a.narrower:.0%} narrower in the same time (this "
                f"run: {a.rounds_per_pair})"
            )
        else:
            notes.append(f"{measured}: {a.rounds_per_pair} rounds a pair were about the best")
    return notes


def _control_finding(row: ComparisonRow, labels: dict[tuple[str, str, str], str]) -> Finding:
    """The control arm's row: identical code in two places. Its interval holding 0 qualifies the
    setup; one that excludes 0 is a difference the setup makes (placement, order), which any
    verdict on the code would carry: the gate cannot tell then, whatever the code's rows say."""
    ci = row.interval
    apart = ci is not None and (ci.low > 1.0 or ci.high < 1.0)
    return Finding(
        Check.CONTROL,
        labels[row.model_key, row.size, row.workload],
        row.variant,
        row.metric,
        status=Status.SETUP_DIFFERS if apart else Status.SETUP_ALIKE,
        baseline=row.baseline_gmean,
        current=row.new_gmean,
        ci=ci,
        model_key=row.model_key,
        clock=row.clock,
        note="the reference's code in another place, against the reference",
    )


def _build_finding(
    row: ComparisonRow,
    labels: dict[tuple[str, str, str], str],
    limit: Limit,
    pace: dict[tuple[str, str], float],
) -> Finding:
    base = Finding(
        Check.BUILD,
        labels[row.model_key, row.size, row.workload],
        row.variant,
        row.metric,
        baseline=row.baseline_gmean,
        current=row.new_gmean,
        limit=limit,
        model_key=row.model_key,
        stalls=row.stalls,
        clock=row.clock,
        note=f"on the wall clock: {row.clock_note}" if row.clock_note else "",
    )
    return with_settle(judge(base, row.interval, row.n_pairs, row.n_pairs), row, pace)


def with_settle(
    finding: Finding, row: ComparisonRow, pace: dict[tuple[str, str], float]
) -> Finding:
    """An undecided paired row with what would settle it: rounds at its estimate and spread, and
    their time at the cell's pace in this run."""
    if finding.status is not Status.CANNOT_TELL:
        return finding
    rounds = row.rounds_to_decide(Goal(DEFAULT_MARGIN_PCT, limit_pct=finding.limit.pct))
    seconds_a_round = pace.get((row.model_key, row.workload))
    more = (
        None
        if rounds is None or seconds_a_round is None
        else (rounds - row.n_pairs) * seconds_a_round
    )
    return replace(finding, settle=Settle(rounds, more))


def ungated_speed(
    results: Results, path: Path, findings: list[Finding], notes: list[str]
) -> list[Finding]:
    """A plain run (no reference build, no baseline, no history, no slowdown expectation):
    `fusebench run` suggests check after every run, so it checks what such a file can show
    (correctness, besides any expect: entries) and says in one line how speed would be gated. A file
    without timed trials holds nothing to check: exit 2."""
    require_timed_trials(results, path)
    notes.append(
        "speed not gated (no reference build, baseline or history to compare with): gate it with "
        "run --against REF, or check --baseline NAME"
    )
    if any(f.check == Check.CORRECT for f in findings):
        return []  # expect: all_correct already judged them
    correctness = current_build(results.frame("correctness"))
    if correctness.empty:
        raise CheckError(
            f"{path}: nothing to check: no correctness records, "
            "and speed needs --baseline NAME or a run --against file"
        )
    return correctness_findings(correctness_checks(correctness), cell_names([correctness]))
