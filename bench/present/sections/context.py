"""What every section says about where and how it was measured, and how its files are named."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from ...analysis.schedule_gain import Gain
from ...analysis.study import Study
from ...core.cell import StopRecord
from ...core.experiment import Schedule
from ...core.fileformat import Clock
from ...core.header import Env, RunHeader, ScheduleChoice, TimeSpent


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()


def environment_line(envs: Sequence[Env]) -> str:
    """device, backend, BLAS, mlx version and commit; values that differ between runs are all
    listed."""

    def values(render: Callable[[Env], str]) -> str:
        return " / ".join(dict.fromkeys(render(env) for env in envs)) or "?"

    def commit(env: Env) -> str:
        return env.commit[:7] + (" (dirty)" if env.git_dirty else "")

    def threads(env: Env) -> str:
        return f"{env.threads or '?'} of {env.cores or '?'} cores"

    return (
        f"device {values(lambda e: e.device)} · backend {values(lambda e: e.backend)}"
        f" · BLAS {values(lambda e: e.blas_family)} on {values(threads)}"
        f" · mlx {values(lambda e: str(e.mlx))}"
        f" · commit {values(commit)}"
    )


def threads_note(runs: Sequence[RunHeader]) -> str | None:
    """How a CPU run's BLAS thread count was chosen: measured on its machine (`threads: auto`, with
    the figures that decided it), or set by the experiment."""
    run = runs[0] if runs else None
    if run is None or run.env.backend != "cpu" or not run.env.threads or not run.env.cores:
        return None
    threads, cores = run.env.threads, run.env.cores
    if run.threads_reason:
        how = f"chosen by `threads: auto`, measured on this machine: {run.threads_reason}"
    elif threads < cores:
        how = "set by the experiment, or by an older fusebench's fixed default (all cores but one)"
    else:
        return None
    lower = " tok/s are lower than at mlx's default (every core);" if threads < cores else ""
    return (
        f"BLAS threads: {threads} of {cores} cores, {how}.{lower} the Δs are what this "
        "setting shows. Set `threads:` in the experiment to measure at another count."
    )


def design_note(
    runs: Sequence[RunHeader], sequential: Sequence[str] = (), kept: str | None = None
) -> str | None:
    """How the rounds were laid out in time and which interval the table shows; None for runs
    from before either was recorded (their intervals are confidence sequences). `sequential`: the
    sizes of a duet run whose rounds ran sequentially all the same; `kept`: the schedule a
    weighing in the run's first cell kept (weighing_note says how)."""
    run = runs[0] if runs else None
    if run is None or run.schedule_choice is None:
        return None
    choice = run.schedule_choice
    if kept is not None:
        choice = replace(choice, schedule=kept, reason="kept by the weighing below")
    if choice.schedule == Schedule.DUET:
        how = (
            "duet: each pair's two trials ran at the same moment, each worker pinned to its own "
            "core, the arms swapping cores every round"
        )

    else:
        how = "sequential: one trial after another, the order reversed every round"
    pooled = len(runs) > 1
    interval = (
        "the fixed-n Student t interval, exact at the round count the run fixed in advance"
        if not run.trials.adaptive and not pooled
        else "a confidence sequence, valid at whatever round the run stopped on its data"
    )
    if choice.schedule == Schedule.DUET and sequential:
        how = (
            f"{how} ({choice.reason}); {', '.join(sequential)} ran sequentially, one trial after "
            "another (a duet needs a second copy of the weights in memory)"
        )
    else:
        how = f"{how} ({choice.reason})"
    return f"Rounds: {how}. Intervals: {interval}. {_clock_sentence(choice)}"


def weighed_stops(stops: Sequence[StopRecord], runs: Sequence[RunHeader]) -> list[StopRecord]:
    """The stop records of these runs' cells whose first rounds weighed the schedules."""
    ids = {run.run_id for run in runs}
    return [stop for stop in stops if stop.weighing is not None and stop.cell.run_id in ids]


def weighing_note(stop: StopRecord) -> str:
    """What a weighing measured and kept: each schedule's rounds, their spread and cost, the
    duet's gain with its bounds (analysis.schedule_gain), and where the dropped rounds are."""
    weighing = stop.weighing
    assert weighing is not None
    seq, duet = weighing.sequential, weighing.duet
    dropped = Schedule.SEQUENTIAL if weighing.kept == Schedule.DUET else Schedule.DUET
    gain = (
        f"the duet {weighing.gain:.2f}x as precise per second [{weighing.gain_low:.2f}x, "
        f"{weighing.gain_high:.2f}x at 80%]"
        if weighing.gain is not None
        else "too few rounds to weigh the duet's gain"
    )
    bounds = (weighing.gain_low, weighing.gain_high)
    sure = weighing.gain is not None and Gain(weighing.gain, *bounds).surely  # type: ignore[arg-type]
    why = "surely better" if sure else f"the schedule held before ({weighing.prior})"
    return (
        f"Schedules weighed on {stop.cell.size} {stop.cell.workload}'s first rounds: "
        f"{seq.rounds} sequential ({100 * seq.sd:.1f}% a round on the noisiest row, "
        f"{seq.round_s:.1f} s) against {duet.rounds} duets ({100 * duet.sd:.1f}%, "
        f"{duet.round_s:.1f} s), {gain}; kept {weighing.kept}, {why}. Its rounds count; the "
        f"{dropped} ones are in the results file, set aside (at most {weighing.cap_s:.0f} s)."
    )


def sequential_sizes(
    stops: Sequence[StopRecord], runs: Sequence[RunHeader], workload: str
) -> list[str]:
    """The sizes whose cells of this workload ran sequentially in a duet run (their stop records
    say so)."""
    duets = {
        run.run_id
        for run in runs
        if run.schedule_choice and run.schedule_choice.schedule == Schedule.DUET
    }
    return list(
        dict.fromkeys(
            stop.cell.size
            for stop in stops
            if stop.cell.run_id in duets
            and stop.cell.workload == workload
            and stop.schedule == Schedule.SEQUENTIAL
        )
    )


def _clock_sentence(choice: ScheduleChoice) -> str:
    reason = f" ({choice.clock_reason})" if choice.clock_reason else ""
    if choice.clock == Clock.CPU:
        return (
            f"Δ and its interval: the worker process's CPU clock{reason}; Baseline and New are "
            "wall-clock tok/s, so New / Baseline − 1 is the wall clock's Δ."
        )
    return f"Clock: wall{reason}."


def weights_note(runs: Sequence[RunHeader]) -> str | None:
    """Which weights a Hugging Face repo id named: the snapshot's commit of each, so a result says
    exactly what ran."""
    repos = {repo: commit for run in runs for repo, commit in run.repos.items()}
    if not repos:
        return None
    return "Weights: " + "; ".join(
        f"{repo} at commit {commit[:12]} (Hugging Face)" for repo, commit in repos.items()
    )


def time_line(spent: TimeSpent) -> str:
    """Where a run's time went, in one line: the share that measured, then each phase, largest
    first; the machine's one-time measurements apart (its budget leaves them out)."""
    machine = spent.phases.get("machine", 0.0)
    run_s = spent.total_s - machine
    phases = sorted(
        ((name, s) for name, s in spent.phases.items() if name != "machine" and s >= 0.05),
        key=lambda item: -item[1],
    )
    share = 100.0 * spent.measuring_s / run_s if run_s > 0 else 0.0
    listed = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases)
    head = f"time: {run_s:.0f} s, {share:.0f}% measuring ({listed})"
    before = (
        f"; before it, the machine's one-time measurements {machine:.0f} s"
        if machine >= 0.5
        else ""
    )
    said = (
        f"; {spent.total_s:.0f} s from the command, against the {spent.said_s:.0f} s its plan said "
        f"before the first round ({100 * (spent.total_s / spent.said_s - 1):+.0f}%)"
        if spent.said_s
        else ""
    )
    return head + before + said


def time_note(runs: Sequence[RunHeader], times: Sequence[TimeSpent]) -> str | None:
    """Where these runs' time went (the `time` record), one sentence a run."""
    ids = {run.run_id for run in runs}
    lines = [time_line(spent) for spent in times if spent.run_id in ids]
    return ("Time: " + "; ".join(line.removeprefix("time: ") for line in lines)) if lines else None


def plot_caption(study: Study, machine: str) -> str:
    return envs_caption(study.envs(machine))


def envs_caption(envs: Sequence[Env]) -> str:
    return f"Measured on {envs[0].hostname}: {environment_line(envs)}"


def machine_suffix(study: Study, machine: str) -> str:
    return "" if len(study.machines) == 1 else f"-m{study.machines.index(machine) + 1}"


def cell_where(study: Study, size: str, workload: str, machine: str) -> str:
    return f"{size} {workload}" + ("" if len(study.machines) == 1 else f" on {machine}")
