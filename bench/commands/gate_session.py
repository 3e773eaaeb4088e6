"""`fusebench check`'s session: the results file, the noise file, the remembered run and the
history's runs read, then judged by analysis.gate (which opens no file, tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..analysis.gate import (
    SPEED_CHECKS,
    CheckError,
    Finding,
    GateOutcome,
    baseline_findings,
    build_findings,
    cell_names,
    expectation_findings,
    experiments_of,
    history_findings,
    medians,
    tps_information,
    ungated_speed,
    worst_first,
)
from ..analysis.history import entries
from ..analysis.noise import default_noise_path
from ..analysis.speedups import past_speedups
from ..analysis.study import current_build
from ..core.calibration import Noise
from ..core.fileformat import Column, ResultsError
from ..core.fingerprint import Fingerprint, MachineMismatchError
from ..core.history import HistoryStore
from ..core.results import (
    Results,
    kept_results,
    read_results,
    require_timed_trials,
    results_fingerprint,
)
from .sources import load_noise


def resolve_noise(
    path: Path | None, machine: Fingerprint, allow_other_machine: bool, notes: list[str]
) -> Noise | None:
    """--noise FILE, else this machine's calibration at the default place if there is one."""
    if path is None:
        path = default_noise_path(machine)
        if not path.is_file():
            notes.append(
                f"no noise calibration for this machine ({path}); limits are the threshold alone — "
                "run fusebench calibrate"
            )
            return None
    noise = load_noise(path)
    if noise.fingerprint != machine:
        if not allow_other_machine:
            raise MachineMismatchError(
                f"{path}: noise calibrated on {noise.fingerprint}, but the results come from "
                f"{machine}; calibrate on this machine or pass --allow-other-machine"
            )
        notes.append(
            f"noise band from another machine ({noise.fingerprint}), "
            "allowed by --allow-other-machine"
        )
    notes.append(f"noise band: {path} ({noise.runs} runs of {noise.experiment.name})")
    return noise


def remembered_run(
    baseline: str, store: HistoryStore, machine: Fingerprint, allow_other_machine: bool
) -> Results:
    """--baseline: the results file at that path where there is one (a file `baseline save` wrote
    is one), else the run the history holds under that name on this machine."""
    if Path(baseline).is_file():
        return _baseline_file(Path(baseline))
    named = store.named(baseline)
    run = named.get(str(machine))
    if run is None and named and not allow_other_machine:
        raise MachineMismatchError(
            f"--baseline {baseline}: the history's run of that name was measured on "
            f"{' | '.join(named)}, the results on {machine}; pass --allow-other-machine "
            "to compare anyway"
        )
    if run is None and not named:
        raise CheckError(
            f"--baseline {baseline}: no such results file, and no run of that name in the history "
            f"{store.where} (names: {', '.join(store.names()) or 'none'}); "
            f"name one with fusebench history add RESULTS --name {baseline}"
        )
    run = run or next(iter(named.values()))
    records = store.records(run)
    if not records:
        raise CheckError(
            f"--baseline {baseline}: the history holds run {run.run_id} without its trials "
            f"(added before they were kept); add it again: fusebench history add {run.source}"
        )
    return kept_results(records)


def _baseline_file(path: Path) -> Results:
    """A baseline file must be intact: a corrupt line means it was truncated or hand-edited, so
    nothing in it is trusted."""
    results = read_results([path])
    if results.corrupt_lines:
        raise ResultsError(
            f"{results.corrupt_lines[0]}: corrupt line in baseline; keep the run's own results "
            "file in the history instead: fusebench history add RESULTS --name NAME"
        )
    results_fingerprint(results, path)
    require_timed_trials(results, path)
    return results


def speedups_against_history(
    results: Results,
    path: Path,
    store: HistoryStore,
    machine: Fingerprint,
    experiments: Sequence[str],
    tolerance_pct: float,
    notes: list[str],
) -> list[Finding]:
    """This run's speedups against those of the history's runs of the same experiment on the same
    machine (never the run itself, where it was added already)."""
    runs = [
        run
        for run in store.runs(str(machine))
        if run.experiment in experiments and run.run_id not in results.runs
    ]
    if not runs:
        return []
    notes.append(f"history: {store.where} ({len(runs)} earlier run(s) on this machine)")
    current = [
        point
        for entry in entries(results, str(path), lambda commit: (None, None), "")
        for point in entry.points
    ]
    past = past_speedups(runs, store.points(str(machine)))
    labels = cell_names([current_build(results.frame("trial"))])
    return history_findings(current, past, tolerance_pct, labels)


@dataclass(frozen=True)
class CheckRequest:
    """What `fusebench check` was asked: the results to judge, and against what (the history
    `store` holds the named runs --baseline takes and the runs each speedup is gated against)."""

    results: Path
    max_regression: float
    store: str
    baseline: str | None = None
    noise: Path | None = None
    allow_other_machine: bool = False


def run_check(args: CheckRequest) -> GateOutcome:
    """Everything the check decides, without printing; bad input raises a UserError."""
    notes: list[str] = []
    results = read_results([args.results], warn=lambda message: notes.append(message))
    machine = results_fingerprint(results, args.results)
    notes.append(f"machine: {machine}")
    noise = resolve_noise(args.noise, machine, args.allow_other_machine, notes)
    experiments = experiments_of(results, args.results)
    if noise and any(exp.name != noise.experiment.name for exp, _ in experiments):
        notes.append(
            f"the noise band was measured on experiment {noise.experiment.name}; another "
            "experiment's noise may differ (calibrate it with fusebench calibrate EXPERIMENT "
            "--out FILE, then --noise FILE)"
        )
    comparisons = list(
        dict.fromkeys((c.baseline, c.new) for exp, _ in experiments for c in exp.comparisons)
    )
    all_trials = results.frame("trial")
    trials = current_build(all_trials)
    findings: list[Finding] = []
    if len(trials) != len(all_trials):
        findings += build_findings(results, all_trials, args.results, args.max_regression, notes)
    store = HistoryStore(args.store)
    if args.baseline:
        baseline = remembered_run(args.baseline, store, machine, args.allow_other_machine)
        baseline_machine = results_fingerprint(baseline, Path(args.baseline))
        if baseline_machine != machine:
            if not args.allow_other_machine:
                raise MachineMismatchError(
                    f"{args.baseline}: baseline measured on {baseline_machine}, but "
                    f"{args.results} on {machine}; pass --allow-other-machine to compare anyway"
                )
            notes.append(
                f"baseline from another machine ({baseline_machine}), "
                "allowed by --allow-other-machine"
            )
        require_timed_trials(results, args.results)
        information = tps_information(noise, baseline_machine, machine)
        findings += baseline_findings(
            trials, baseline.frame("trial"), comparisons, args.max_regression, noise, information
        )
        notes.append(f"baseline: {args.baseline}")
    for exp, run_ids in experiments:
        scoped = [
            frame[frame[Column.RUN_ID].isin(run_ids)] if not frame.empty else frame
            for frame in (trials, current_build(results.frame("correctness")))
        ]
        findings += expectation_findings(exp, *scoped, noise)
    names = [exp.name for exp, _ in experiments]
    findings += speedups_against_history(
        results, args.results, store, machine, names, args.max_regression, notes
    )
    if not any(f.check in SPEED_CHECKS for f in findings):
        findings += ungated_speed(results, args.results, findings, notes)
    notes += [
        f"{r['kind']} {r.get('cell', '?')}: {r.get('reason', '')}" for r in results.of_kind("skip")
    ]
    notes += [
        f"{r['kind']} {r.get('cell', '?')}: {r.get('reason', '')}" for r in results.of_kind("error")
    ]
    return GateOutcome(
        tuple(worst_first(findings)), tuple(notes), tuple(medians(trials, comparisons))
    )
