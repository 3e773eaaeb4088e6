"""The regression gate's verdicts (`fusebench check`): exit 0 nothing regressed, 1 something did, 2 bad input.

The checks, each used when its input is there:
- Against the reference build of a `run --against` file (the CI gate): every variant and metric, and all variants
  pooled, paired round by round across the builds (stats.compare_builds), Holm across the table. Nothing stored is
  needed and the machine does not matter, since both builds ran on it in the same job. A row also fails when the
  current build stalls (analysis.inference, "Stalls": significantly more outlier rounds against it than against the
  reference), whatever its Δ: a path that sometimes re-traces or falls back is a regression the mean can hide.
- Against a stored baseline (`fusebench baseline save`), cell by cell (model x size x workload x variant x metric):
  - tok/s: the ratio of medians current/baseline with a bootstrap CI, unpaired, since the runs share no rounds. This
    is information, never a failure, unless the baseline comes from this machine fingerprint and a calibration of it
    says what it can resolve: run-to-run tok/s on a shared VM moves by tens of percent;
  - speedup: for each comparison the experiment declares, the per-round speedup new/baseline (paired within a round,
    so load that slows a whole run cancels) against the baseline file's; this catches a fusion that stops paying off.
  A cell fails only when its whole CI lies beyond the allowed slowdown; a point estimate alone never fails. Cells in
  only one of the files are listed as missing or new, never failed. The baseline must come from the same machine
  fingerprint (backend, device, BLAS, CPU model) unless --allow-other-machine.
- A fusion's speedup against its history: the speedups of the calibration runs stored in this machine's noise file,
  from 10 runs on (bench.analysis.history).
- The expectations the experiment declares (`expect:` in its YAML, read back from the results' run header):
  "new no more than X% slower than baseline on a metric" (paired rounds, stats.compare), and "all variants correct".
- Without any check of speed (a plain run: ungated_speed): its correctness records, and a note that speed was not
  gated and how to gate it.

Noise: `fusebench calibrate` stores this machine's A/A noise per metric in results/baselines/noise-<machine>.json;
check picks it up by itself (or takes --noise). A cell then fails only for a slowdown beyond both the requested
threshold and the calibrated minimum detectable effect, and the Limit column says which of the two bound.

--format json prints one object: {"passed", "exit_code", "notes", "verdicts", "github_action_benchmark"}, where
the last is github-action-benchmark's customBiggerIsBetter list ({"name", "unit", "value", "extra"}); feed a dashboard
with `fusebench check ... --format json | jq .github_action_benchmark > bench.json`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.baselines import load_baseline, require_timed_trials
from ..core.fingerprint import Fingerprint, MachineMismatchError, results_fingerprint
from ..core.records import ResultsError
from ..core.results import Results, read_results
from ..core.spec import DEFAULT_MARGIN_PCT, Experiment, parse_experiment
from . import stats
from .history import MIN_RUNS, SpeedupHistory, run_speedups
from .inference import STALLS_BASELINE, STALLS_NEW, interval_verdict, slower_beyond
from .noise import Noise, default_noise_path, load_noise
from .stats import SEED
from .study import cell_labels, current_build, ordered_cells

MIN_VALUES_FOR_CI = 3  # fewer values a side give a bootstrap CI that proves nothing, so such a cell never fails

# The kinds of check: tok/s and speedup against the baseline file, the experiment's expectations and correctness.
TPS, SPEEDUP, EXPECT, CORRECT, BUILD = "tok/s", "speedup", "expect", "correct", "vs reference"
HISTORY = "speedup vs history"
# The checks that gate speed; without one, a check passes on correctness alone, and says so.
SPEED_CHECKS = (TPS, SPEEDUP, EXPECT, BUILD, HISTORY)
# Which calibrated noise band bounds each kind of check (see bench.analysis.noise).
NOISE_SCOPE = {TPS: "run_to_run_tps", SPEEDUP: "run_to_run_speedup", EXPECT: "within_run"}


class CheckError(ResultsError):
    """Bad input to the check (nothing to check, a bad threshold); the message is one line."""


@dataclass(frozen=True)
class Limit:
    """The slowdown a cell may show before it fails, and what set it: the requested threshold or the noise."""

    pct: float
    bound: str  # "threshold" or "noise"
    noise_pct: float = 0.0  # the calibrated MDE: a CI wholly inside ±noise_pct reads "no change", whichever bound won

    def __str__(self) -> str:
        return f"-{self.pct:.1f}% ({self.bound})"


def limit_for(threshold_pct: float, noise: Noise | None, check: str, metric: str) -> Limit:
    """The larger of the threshold and the calibrated MDE: a smaller slowdown cannot be told from noise."""
    band = noise.band(NOISE_SCOPE[check], metric) if noise else None
    mde = band.mde_pct if band else 0.0
    if mde > threshold_pct:
        return Limit(mde, "noise", mde)
    return Limit(threshold_pct, "threshold", mde)


@dataclass(frozen=True)
class Verdict:
    check: str
    cell: str
    variant: str
    metric: str
    status: str
    failed: bool
    baseline: float = math.nan  # the reference value: baseline file's median, or the baseline variant's
    current: float = math.nan
    ci: stats.RatioCI | None = None
    limit: Limit | None = None
    unit: str = "tok/s"
    note: str = ""
    model_key: str = ""  # which model, for re-measuring the cell (check --confirm)
    stalls: Stalls | None = None  # paired rows only: the stall rule's figures (analysis.inference, "Stalls")


@dataclass(frozen=True)
class Stalls:
    """A paired row's stall figures: the arm the rule flags (STALLS_NEW, STALLS_BASELINE or None), whether Δ is over
    all rounds, the outlier rounds against each arm, and both candidate Δs with their own 95% intervals."""

    arm: str | None
    over_all_rounds: bool
    rounds: int
    against_new: int
    against_baseline: int
    sign_p: float
    all_rounds: stats.RatioCI
    trimmed: stats.RatioCI

    @property
    def against_arm(self) -> int:
        return self.against_baseline if self.arm == STALLS_BASELINE else self.against_new


def stalls_of(row: Any) -> Stalls | None:
    """A compare() row's stall figures; None when it has no paired estimate."""
    if not row.all_rounds:
        return None
    arm = row.stalls if isinstance(row.stalls, str) else None  # pandas reads a column of None as NaN
    return Stalls(arm=arm, over_all_rounds=bool(row.over_all_rounds), rounds=int(row.all_rounds),
                  against_new=int(row.excluded_new), against_baseline=int(row.excluded_baseline),
                  sign_p=float(row.sign_p),
                  all_rounds=stats.RatioCI(1 + row.all_delta_pct / 100, row.all_low, row.all_high, int(row.all_rounds)),
                  trimmed=stats.RatioCI(1 + row.trimmed_delta_pct / 100, row.trimmed_low, row.trimmed_high,
                                        int(row.trimmed_n)))


def stall_failure(verdict: Verdict) -> Verdict:
    """The A/B gate: the current build's variant stalls where the reference's does not. That fails even when Δ over
    all rounds stays within the limit: a path that sometimes falls back or re-traces is a regression in itself."""
    if verdict.stalls is None or verdict.stalls.arm != STALLS_NEW or verdict.failed:
        return verdict
    return replace(verdict, failed=True, status="✗ stalls")


@dataclass
class Outcome:
    verdicts: list[Verdict]
    notes: list[str]
    trials: pd.DataFrame  # the current results' trials, for github-action-benchmark's figures
    comparisons: list[tuple[str, str]]  # the experiments' (baseline, new) pairs

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.failed]

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0


# --- verdicts --------------------------------------------------------------------------------------


def judge(base: Verdict, ci: stats.RatioCI | None, n_baseline: int, n_current: int) -> Verdict:
    """Fill in a verdict's CI and status; only a CI wholly beyond the limit fails."""
    if n_baseline == 0:
        return replace(base, status="new", note="not in the baseline")
    if n_current == 0:
        return replace(base, status="missing", note="not in the current results")
    if ci.n < MIN_VALUES_FOR_CI:
        return replace(base, ci=ci, status="too few rounds", note=f"{ci.n} values; {MIN_VALUES_FOR_CI} needed for a CI")
    if slower_beyond(ci, base.limit.pct):
        return replace(base, ci=ci, status="✗ regressed", failed=True)
    words = interval_verdict(ci.low, ci.high, ci.n, margin_pct=max(base.limit.noise_pct, DEFAULT_MARGIN_PCT))
    return replace(base, ci=ci, status=words.text)


def _ci(row: Any, n: int, low: str = "low", high: str = "high") -> stats.RatioCI | None:
    """A comparison row's interval: for a paired row, the Holm-adjusted one (low="adj_low", high="adj_high")."""
    if not math.isfinite(row.ratio):
        return None
    return stats.RatioCI(ratio=row.ratio, low=getattr(row, low), high=getattr(row, high), n=n)


def baseline_verdicts(
    current: pd.DataFrame, baseline: pd.DataFrame, comparisons: Sequence[tuple[str, str]], threshold_pct: float,
    noise: Noise | None, tps_information: str = "",
) -> list[Verdict]:
    """Each cell's tok/s, and each comparison's speedup, against the stored baseline. When `tps_information` says
    why (no calibration on this machine, another machine), tok/s is information: its verdict is shown, never failed."""
    labels = cell_names([current, baseline])
    verdicts = []
    tables = [(TPS, "tok/s", stats.compare_runs(baseline, current, seed=SEED))]
    for pair in comparisons:
        speedups = stats.compare_runs(stats.paired_speedups(baseline, *pair), stats.paired_speedups(current, *pair),
                                      seed=SEED)
        tables.append((SPEEDUP, "×", speedups))
    for check, unit, table in tables:
        for row in table.itertuples():
            base = Verdict(check, labels[row.model_key, row.size, row.workload], row.variant, row.metric,
                           status="", failed=False, baseline=row.baseline_median, current=row.new_median, unit=unit,
                           limit=limit_for(threshold_pct, noise, check, row.metric))
            n = min(row.n_baseline, row.n_new)
            verdict = judge(base, _ci(row, n), row.n_baseline, row.n_new)
            if check == TPS and tps_information and verdict.failed:
                verdict = replace(verdict, failed=False, status="slower beyond the limit (information)",
                                  note=tps_information)
            verdicts.append(verdict)
    return verdicts


def tps_information(noise: Noise | None, baseline_machine: Fingerprint, machine: Fingerprint) -> str:
    """Why absolute tok/s against a stored baseline cannot fail here, or "" when it can: the same machine
    fingerprint, and a calibration of it, whose noise band then sets the limit (see limit_for)."""
    if baseline_machine != machine:
        return "the baseline comes from another machine"
    if noise is None or noise.fingerprint != machine or noise.band(NOISE_SCOPE[TPS], "prefill") is None:
        return "no noise calibration of this machine says what tok/s it can resolve (fusebench calibrate)"
    return ""


def history_verdicts(trials: pd.DataFrame, comparisons: Sequence[tuple[str, str]],
                     history: Sequence[SpeedupHistory], tolerance_pct: float) -> list[Verdict]:
    """Each comparison's speedup in this run against the calibration runs' (bench.analysis.history): it fails when it
    falls below their geometric mean by more than max(tolerance, the prediction bound, Bonferroni over the rows
    gated), and only from MIN_RUNS stored runs on."""
    stored = {h.key: h for h in history}
    labels = cell_names([trials])
    measured = [(row, stored.get((row.model_key, row.workload, row.comparison, row.metric)))
                for row in run_speedups(trials, comparisons).itertuples()]
    gated = sum(1 for _, past in measured if past and past.runs >= MIN_RUNS)  # Bonferroni over these rows
    verdicts = []
    for row, past in measured:
        if past is None:
            continue
        base = Verdict(HISTORY, labels[row.model_key, row.size, row.workload], row.comparison, row.metric, status="",
                       failed=False, baseline=past.expected, current=row.speedup, unit="×")
        delta_pct = (row.speedup / past.expected - 1.0) * 100.0
        facts = f"Δ {delta_pct:+.1f}% from the mean of {past.runs} runs (SD {past.sd_pct:.1f}%)"
        if past.runs < MIN_RUNS:
            verdicts.append(replace(base, status=f"needs ≥ {MIN_RUNS} stored runs",
                                    note=f"{facts}; fusebench calibrate --runs {MIN_RUNS}"))
            continue
        bound = past.prediction_pct(rows=gated)
        limit = Limit(bound, "history") if bound > tolerance_pct else Limit(tolerance_pct, "threshold")
        failed = delta_pct < -limit.pct
        verdicts.append(replace(base, limit=limit, failed=failed, note=facts,
                                status="✗ regressed" if failed else "within history"))
    return verdicts


def expectation_verdicts(exp: Experiment, trials: pd.DataFrame, correctness: pd.DataFrame,
                         noise: Noise | None) -> list[Verdict]:
    verdicts = []
    labels = cell_names([trials, correctness])
    for expectation in exp.expect:
        if expectation.kind == "all_correct":
            verdicts += correctness_verdicts(correctness, labels)
            continue
        pair, metric = expectation.comparison, expectation.metric
        limit = limit_for(expectation.max_slowdown_pct, noise, EXPECT, metric)
        variant = f"{pair.new} vs {pair.baseline}"
        table = None if trials.empty else stats.compare(trials, pair.baseline, pair.new, metric,
                                                        margin_pct=exp.margin_pct)
        if table is None or not (table["n_pairs"] > 0).any():
            verdicts.append(Verdict(EXPECT, "", variant, metric, status="✗ no data", failed=True, limit=limit,
                                    note=f"no round ran both {pair.baseline} and {pair.new}"))
            continue
        for row in table[table["n_pairs"] > 0].itertuples():
            base = Verdict(EXPECT, labels[row.model_key, row.size, row.workload], variant, metric, status="",
                           failed=False, baseline=row.baseline_gmean, current=row.new_gmean, limit=limit,
                           stalls=stalls_of(row))
            verdicts.append(judge(base, _ci(row, row.n_pairs, "adj_low", "adj_high"), row.n_pairs, row.n_pairs))
    return verdicts


def correctness_verdicts(correctness: pd.DataFrame, labels: dict[tuple[str, str, str], str]) -> list[Verdict]:
    """A failing variant names its cell; an all-clear is one line; no records at all cannot prove anything."""
    if correctness.empty:
        return [Verdict(CORRECT, "", "", "", status="✗ no data", failed=True,
                        note="no correctness records in the results")]
    failing = correctness[~correctness["passed"].astype(bool)]
    if failing.empty:
        return [Verdict(CORRECT, "", "every variant", "", status="✓ correct", failed=False,
                        note=f"{len(correctness)} correctness checks passed")]
    return [
        Verdict(CORRECT, labels[r.model_key, r.size, r.workload], r.variant, "", status="✗ incorrect", failed=True,
                note=f"max |logit err| {r.max_abs_err:.3g} vs atol {r.atol:g} against {r.reference}; "
                     f"{r.tokens_agree}/{r.tokens_checked} greedy tokens agree")
        for r in failing.itertuples()
    ]


def cell_names(frames: Sequence[pd.DataFrame]) -> dict[tuple[str, str, str], str]:
    """(model_key, size, workload) -> "E2B (2/35 layers) · pp128 tg4 b1", the model key added only when sizes clash."""
    names = cell_labels(ordered_cells(frames))
    labels = {}
    for frame in frames:
        if not frame.empty:
            for key, size, workload in zip(frame["model_key"], frame["size"], frame["workload"], strict=True):
                labels[key, size, workload] = f"{names[key, size]} · {workload}"
    return labels


def worst_first(verdicts: list[Verdict]) -> list[Verdict]:
    """Failures first, then by Δ, most negative first; rows without a Δ (missing, new, correctness) last."""
    return sorted(verdicts, key=lambda v: (not v.failed, v.ci is None, v.ci.delta_pct if v.ci else 0.0))


# --- inputs ----------------------------------------------------------------------------------------


def experiments_of(results: Results, path: Path) -> list[tuple[Experiment, set[str]]]:
    """The experiments in the run headers (validated again, as the YAML schema demands), each with its run ids."""
    by_content: dict[str, tuple[dict[str, Any], set[str]]] = {}
    for run_id, header in results.runs.items():
        experiment = header.get("experiment") or {}
        by_content.setdefault(experiment.get("content") or "", (experiment, set()))[1].add(run_id)
    return [
        (parse_experiment(content, f"{path} (run header: {experiment.get('file', 'experiment')})", stored=True),
         run_ids)
        for content, (experiment, run_ids) in by_content.items() if content
    ]


def build_verdicts(results: Results, trials: pd.DataFrame, args: CheckRequest, notes: list[str]) -> list[Verdict]:
    """`run --against`: every variant and metric of the current build against the reference build, paired round by
    round (both ran each round back to back), Holm across the table. A cell that failed in either build leaves
    nothing to compare: that is bad input (exit 2), never a pass."""
    errors = results.of_kind("error")
    if errors:
        raise CheckError(f"{args.results}: cannot compare the builds: {errors[0].get('cell', '?')}: "
                         f"{errors[0].get('reason', '?')}")
    builds = next(iter(results.runs.values())).get("builds") or {}
    notes.append("builds: " + "; ".join(f"{name} {b.get('label') or str(b.get('commit') or '?')[:12]}"
                                        + (" (dirty)" if b.get("dirty") else "") for name, b in builds.items()))
    table = stats.compare_builds(trials)
    labels = cell_names([trials])
    limit = Limit(args.max_regression, "threshold")
    verdicts = []
    for row in table.itertuples():
        base = Verdict(BUILD, labels[row.model_key, row.size, row.workload], row.variant, row.metric, status="",
                       failed=False, baseline=row.baseline_gmean, current=row.new_gmean, limit=limit,
                       model_key=row.model_key, stalls=stalls_of(row))
        verdict = judge(base, _ci(row, row.n_pairs, "adj_low", "adj_high"), row.n_pairs, row.n_pairs)
        verdicts.append(stall_failure(verdict))
    return verdicts


def resolve_noise(path: Path | None, machine: Fingerprint, allow_other_machine: bool, notes: list[str]) -> Noise | None:
    """--noise FILE, else this machine's calibration at the default place if there is one."""
    if path is None:
        path = default_noise_path(machine)
        if not path.is_file():
            notes.append(f"no noise calibration for this machine ({path}); limits are the threshold alone — "
                         "run fusebench calibrate")
            return None
    noise = load_noise(path)
    if noise.fingerprint != machine:
        if not allow_other_machine:
            raise MachineMismatchError(f"{path}: noise calibrated on {noise.fingerprint}, but the results come from "
                                       f"{machine}; calibrate on this machine or pass --allow-other-machine")
        notes.append(f"noise band from another machine ({noise.fingerprint}), allowed by --allow-other-machine")
    notes.append(f"noise band: {path} ({noise.runs} runs of {noise.experiment})")
    return noise


def ungated_speed(results: Results, path: Path, verdicts: list[Verdict], notes: list[str]) -> list[Verdict]:
    """A plain run (no reference build, no baseline, no history, no slowdown expectation): `fusebench run` suggests
    check after every run, so it checks what such a file can show (correctness, besides any expect: entries) and says
    in one line how speed would be gated. A file without timed trials holds nothing to check: exit 2."""
    require_timed_trials(results, path)
    notes.append("speed not gated (no reference build, baseline or history to compare with): gate it with "
                 "run --against REF, or check --baseline FILE")
    if any(v.check == CORRECT for v in verdicts):
        return []  # expect: all_correct already judged them
    correctness = current_build(results.frame("correctness"))
    if correctness.empty:
        raise CheckError(f"{path}: nothing to check: no correctness records, and speed needs --baseline FILE or a "
                         "run --against file")
    return correctness_verdicts(correctness, cell_names([correctness]))


@dataclass(frozen=True)
class CheckRequest:
    """What `fusebench check` was asked: the results to judge, and against what."""

    results: Path
    max_regression: float
    baseline: Path | None = None
    noise: Path | None = None
    allow_other_machine: bool = False


def run_check(args: CheckRequest) -> Outcome:
    """Everything the check decides, without printing; bad input raises a UserError."""
    notes: list[str] = []
    results = read_results([args.results], warn=lambda message: notes.append(message))
    machine = results_fingerprint(results, args.results)
    notes.append(f"machine: {machine}")
    noise = resolve_noise(args.noise, machine, args.allow_other_machine, notes)
    experiments = experiments_of(results, args.results)
    if noise and any(exp.name != noise.experiment for exp, _ in experiments):
        notes.append(f"the noise band was measured on experiment {noise.experiment}; another experiment's noise "
                     "may differ (calibrate it with fusebench calibrate EXPERIMENT --out FILE, then --noise FILE)")
    comparisons = list(dict.fromkeys((c.baseline, c.new) for exp, _ in experiments for c in exp.comparisons))
    all_trials = results.frame("trial")
    trials = current_build(all_trials)
    verdicts: list[Verdict] = []
    if len(trials) != len(all_trials):
        verdicts += build_verdicts(results, all_trials, args, notes)
    if args.baseline:
        baseline = load_baseline(args.baseline)
        baseline_machine = results_fingerprint(baseline, args.baseline)
        if baseline_machine != machine:
            if not args.allow_other_machine:
                raise MachineMismatchError(f"{args.baseline}: baseline measured on {baseline_machine}, but "
                                           f"{args.results} on {machine}; pass --allow-other-machine to compare anyway")
            notes.append(f"baseline from another machine ({baseline_machine}), allowed by --allow-other-machine")
        require_timed_trials(results, args.results)
        information = tps_information(noise, baseline_machine, machine)
        verdicts += baseline_verdicts(trials, baseline.frame("trial"), comparisons, args.max_regression, noise,
                                      information)
        notes.append(f"baseline: {args.baseline}")
    for exp, run_ids in experiments:
        scoped = [frame[frame["run_id"].isin(run_ids)] if not frame.empty else frame
                  for frame in (trials, current_build(results.frame("correctness")))]
        verdicts += expectation_verdicts(exp, *scoped, noise)
    if noise and noise.history:
        if all(exp.name == noise.experiment for exp, _ in experiments):
            verdicts += history_verdicts(trials, comparisons, noise.history, args.max_regression)
        else:
            notes.append(f"speedup history not used: it was stored for experiment {noise.experiment}")
    if not any(v.check in SPEED_CHECKS for v in verdicts):
        verdicts += ungated_speed(results, args.results, verdicts, notes)
    notes += [f"{r['kind']} {r.get('cell', '?')}: {r.get('reason', '')}" for r in results.of_kind("skip")]
    notes += [f"{r['kind']} {r.get('cell', '?')}: {r.get('reason', '')}" for r in results.of_kind("error")]
    return Outcome(worst_first(verdicts), notes, trials, comparisons)
