"""`schedule: auto`: which schedule a run uses, and the pilot, which measures whether a duet buys
more precision per second here than trials one after another.

What a run uses
    A cached choice, else sequential rounds, the safe schedule; a run never starts a pilot itself
    (until 2026-12-06 a machine's first run did: 20 pairs in each schedule in its first, noisiest
    minutes, whose choice and spread then planned every later run; issue 64). That choice is the
    prior of the weighing in the run's first cell (measure.run.cellrun, analysis.schedule_gain),
    which caches the schedule it keeps as the next run's; with `trials: plan`,
    measure.run.weighing weighs configurations on the experiment's own cached runs first.
    `fusebench env --probe` runs the pilot (`fresh`).

How the pilot measures
    Real trials, paired as a run pairs them: two workers of this build load the gate's model
    (experiments/ci.yaml: E2B's per-layer shapes at 2 layers, fp32, a 128-token prompt) and time
    its baseline variant, both trials of a pair on the same prompt, as a round's trials are. The
    sequential pair is the two workers' trials one after the other (strict turns, as `run
    --against` takes them), unpinned, on the BLAS threads `threads: auto` chose; the duet pair is
    the same two workers' trials at once, one BLAS thread each, pinned to the two cores (swapped
    every turn). The schedules take turns on those two workers, neither always first, so a slow
    minute of the machine, and what the two processes differ by, hit both. Per schedule and clock
    (wall, process CPU): the SD s of the pair's log ratio, stalls and all, as a run's intervals
    will see them, per metric (prefill, gen) as a run's rows are, the larger of the two kept; and
    the seconds a pair took t, commands and answers included. Precision per second is 1 / (s² · t).
    The duet wins when its gain over the sequential pair's on the wall clock is surely above 1:
    the lower bound of a bootstrap over both schedules' pairs (threads.BOUND, a one-sided 90%
    bound) must exceed 1, as `threads: auto`'s must. (Until 2026-12-05 a robust scale and a point
    estimate at MARGIN: a choice that flipped between pilots an hour apart, 1.46x then 6.88x.)

    Until 2026-12-02 the sequential pair was one worker's two trials back to back, on two
    prompts, beside a third worker for the duet: on the AVX2 EPYC the pilot then read the duet at
    1.1-2.0x where an A/A of `ci` in each schedule measured 6-8x (results/duet-aa-avx2).

    Where `threads: auto` chose more than one BLAS thread, `auto` runs sequentially without a
    contest: a duet's workers run one thread each, and an op's Δ depends on the speed of the BLAS
    work around it (measured: the tenfold softcap read −14.0% gen on 2 threads, −9.4% on 1 thread
    sequentially and −6.6% in a duet; results/duet-effects), so a duet would answer for another
    configuration than the one the user runs. The pilot then times the sequential pair alone, for
    the clock.

The clock
    A run's intervals are on the wall clock: a Δ is wall-clock tok/s. The pilot still reads each
    pair on the process CPU clock, and the choice says what it read, as information: that clock
    leaves out what a KVM hypervisor stole and what other processes took, but it also misses
    waits and, on several BLAS threads, sums them, so a change in how a step waits or
    parallelises is invisible to it (measured 2026-12-04: a softcap that sleeps on one call in
    sixteen read +0.3% "no change" on the CPU clock against +7.8% on the wall clock; issue 53).
    Earlier versions chose it where it scattered less; a cached choice of theirs runs on the wall
    clock now, and analysis.clocks still reads their files as they were written.

Cached per machine and BLAS thread count (`machine_key`) as the thread choice is, unless other
processes used more than BUSY_CORES meanwhile (then it holds for that run only); `fusebench env
--probe` measures again. Where other processes already use more than BUSY_CORES when a pilot would
start, none starts: the run is sequential on the wall clock, and says why. GPU backends run
sequentially (one device) on the wall clock, and so does a machine without two free cores.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ...core.cell import Measured, Trial
from ...core.experiment import Experiment, Schedule
from ...core.fileformat import Clock
from ...core.flags import experiment_path
from ...core.header import Env, ScheduleChoice, ScheduleProbe
from ...core.spec import load_experiment
from ..job import CellShape, Command, Do
from ..machine.cores import duet_cores, unpin
from ..machine.env import cache_dir, machine_key, read_cached, thread_env, write_cached
from ..machine.load import LoadSampler, preflight
from ..machine.threads import BOUND
from .schedules import SCHEDULES
from .schedules.base import Round, place, send_step
from .session import CURRENT, WorkerSession, stopped_after, worker_job

PILOT_EXPERIMENT = "ci"  # the gate's model: a trial of about a second on a 2-core VM
TURNS = 20  # timed pairs per schedule in a contest; twice as many where only one runs
WARMUP = 2  # untimed pairs per schedule first
MARGIN = 1.25  # without the pilot's pairs: a duet must buy this much more precision per second
BUSY_CORES = 0.25  # other processes' mean CPU, in cores, above which a pilot is not cached
PILOT_WORKERS = ("first", "second")  # a pair's two workers, laid out as a round's two builds
UNWEIGHED = (
    "the safe schedule, until a run's first rounds weigh a duet against it (one a CPU's two cores "
    "can run, one BLAS thread a worker, one build), or `fusebench env --probe`'s pilot does"
)


def cache_path(env: Env, threads: int) -> Path:
    # v5: the probes keep their pairs and a plain SD; the duet must win at a lower bound
    return cache_dir() / f"schedule-v5-{machine_key(env)}-t{threads}.json"


def choose_schedule(
    asked: Schedule,
    env: Env,
    worker_env: dict[str, str],
    threads: int = 1,
    fresh: bool = False,
    say: Callable[[str], object] | None = None,
) -> ScheduleChoice:
    """The schedule and clock a run uses: what the experiment asked where it can run, else
    sequential with the reason; `auto` measured here by the pilot once (cached). `threads`: the
    BLAS threads a sequential worker runs; `say` tells the user a pilot is starting."""
    path = cache_path(env, threads)
    cached = None if fresh else read_cached(path, ScheduleChoice)
    if asked != Schedule.AUTO and not SCHEDULES[asked].one_core_each:
        return _asked(asked, None, cached.probes if cached else ())
    if env.backend != "cpu":
        return ScheduleChoice(
            Schedule.SEQUENTIAL,
            "a GPU backend: its one device runs one trial",
            clock_reason="a GPU's time is not the process's CPU time",
        )
    cores = duet_cores()
    if cores is None:
        return ScheduleChoice(
            Schedule.SEQUENTIAL,
            "fewer than two physical cores to run on",
            clock_reason="no pilot: it needs two cores",
        )
    if asked != Schedule.AUTO:
        return _asked(asked, cores, cached.probes if cached else ())
    if cached:  # on the wall clock, whatever clock an earlier version chose
        return _with_clock(replace(cached, cores=cores), cached.probes)
    if not fresh:
        # A run never pilots: on a machine's first run the pilot measured its noisiest minutes
        # and its choice outlived them (issue 64). The safe schedule, weighed later on the
        # experiment's own runs (measure.run.weighing).
        return _with_clock(ScheduleChoice(Schedule.SEQUENTIAL, UNWEIGHED, cores=cores), ())
    if (before := preflight()) and before.other_cores > BUSY_CORES:
        return _with_clock(
            ScheduleChoice(
                Schedule.SEQUENTIAL,
                f"other processes were using {before.other_cores:.1f} cores, so a pilot now "
                "would measure them; the pilot waits for a quiet machine",
            ),
            (),
        )
    if say:
        say(
            f"schedule: auto: measuring this machine once (cached): {pilot_turns(threads)} pairs "
            "of the gate's model's trials in each schedule it weighs, about a minute"
        )
    with LoadSampler() as sampler:
        choice = decide(pilot(worker_env, cores, threads), cores, threads)
    load = sampler.summary()
    if load.other_cores_mean > BUSY_CORES:
        # a pilot beside other work measures that work: use it for this run, measure again next
        return replace(
            choice,
            reason=f"{choice.reason}; other processes used {load.other_cores_mean:.1f} cores "
            "meanwhile, so this choice is not cached",
        )
    write_cached(path, choice)
    return choice


def _asked(
    asked: Schedule, cores: tuple[int, int] | None, probes: Sequence[ScheduleProbe]
) -> ScheduleChoice:
    """The schedule the experiment asked for (on `cores`, one a worker, where it runs its workers
    at once), with what a cached pilot measured of the clocks."""
    if cores is not None and SCHEDULES[asked].one_core_each:
        where = f"asked for; on cores {cores[0]} and {cores[1]}, one BLAS thread each"
        choice = ScheduleChoice(asked, where, cores=cores)
    else:
        choice = ScheduleChoice(asked, "asked for")
    return _with_clock(choice, probes)


def _with_clock(choice: ScheduleChoice, probes: Sequence[ScheduleProbe]) -> ScheduleChoice:
    """`choice` on the wall clock, with what the pilot read of the process CPU clock (see The
    clock)."""
    probe = next((p for p in probes if p.schedule == choice.schedule), None)
    reason = (
        "a Δ is wall-clock tok/s; the process CPU clock misses waits and, on several BLAS threads, "
        "sums them, so a change in how a step waits or parallelises would be invisible to it"
    )
    if probe is not None and not math.isnan(probe.cpu_sd):
        reason += (
            f" (the pilot's pairs scattered {100 * probe.cpu_sd:.1f}% on it against "
            f"{100 * probe.wall_sd:.1f}% on the wall clock: information only)"
        )
    return replace(choice, probes=tuple(probes), clock=Clock.WALL, clock_reason=reason)


def decide(
    probes: Sequence[ScheduleProbe], cores: tuple[int, int], threads: int = 1
) -> ScheduleChoice:
    """The schedule and clock the pilot's figures choose: sequential alone where the sequential
    workers run more than one BLAS thread, else the duet at MARGIN or more of the precision per
    second."""
    by_schedule = {p.schedule: p for p in probes}
    duet, sequential = by_schedule.get(Schedule.DUET), by_schedule[Schedule.SEQUENTIAL]
    if duet is None:
        # An op's Δ is its share of the step, and the step is slower on one BLAS thread: a duet
        # would measure another configuration than the sequential one (docs/duet.md).
        choice = ScheduleChoice(
            Schedule.SEQUENTIAL,
            f"sequential workers run {threads} BLAS threads here, and a duet's one-thread "
            "workers would measure another configuration (an op's Δ depends on the BLAS speed "
            "around it)",
            cores=cores,
        )
        return _with_clock(choice, probes)
    gain = duet.precision_per_s / sequential.precision_per_s
    low = gain_lower_bound(sequential, duet)
    figures = (
        f"pair SD {100 * duet.wall_sd:.1f}% in {duet.pair_s:.2f} s against "
        f"{100 * sequential.wall_sd:.1f}% in {sequential.pair_s:.2f} s"
    )
    surely = "" if low is None else f"at least {low:.2f}x at {100 * (1 - BOUND):.0f}% confidence"
    wins = low > 1.0 if low is not None else gain >= MARGIN
    if wins:
        reason = (
            f"measured {gain:.2f}x the precision per second of sequential trials here"
            f"{f', {surely}' if surely else ''} ({figures}); on cores {cores[0]} and {cores[1]}"
        )
        return _with_clock(ScheduleChoice(Schedule.DUET, reason, cores=cores), probes)
    reason = (
        f"a duet measured {gain:.2f}x the precision per second here, "
        + (f"{surely}: not surely more" if surely else f"less than the {MARGIN:g}x it must")
        + f" ({figures})"
    )
    return _with_clock(ScheduleChoice(Schedule.SEQUENTIAL, reason, cores=cores), probes)


class ClockSample(NamedTuple):
    """A trial's seconds on each clock, one per metric (prefill, and gen where it ran)."""

    wall: tuple[float, ...]
    cpu: tuple[float, ...]


Pair = tuple[ClockSample, ClockSample, float]  # both trials, and the seconds the pair took


def pilot(
    worker_env: dict[str, str], cores: tuple[int, int], threads: int
) -> tuple[ScheduleProbe, ...]:
    """The sequential pair's figures, and the duet pair's where the schedules contend (one BLAS
    thread in sequential workers), the schedules taking turns on the same two workers."""
    exp = load_experiment(experiment_path(PILOT_EXPERIMENT))
    cell = exp.cells()[0]
    job = worker_job(cell.model, exp)
    w = cell.workload
    trial = PilotTrials(CellShape(cell.key, w.prompt_tokens, w.gen_tokens, w.batch), exp, cores)
    contest = threads == 1
    env = thread_env(worker_env, 1) if contest else worker_env
    pairs: dict[str, list[Pair]] = {Schedule.SEQUENTIAL: [], Schedule.DUET: []}
    with stopped_after([WorkerSession(job, CURRENT, env) for _ in range(2)]) as workers:
        for worker in workers:
            worker.loaded(trial.deadline, exp.timeout_s)
        for turn in range(WARMUP + pilot_turns(threads)):
            schedules = [Schedule.SEQUENTIAL, *([Schedule.DUET] if contest else [])]
            # neither schedule always runs right after the other
            for schedule in schedules if turn % 2 == 0 else schedules[::-1]:
                pair = trial.pair(workers, schedule, turn)
                if turn >= WARMUP:
                    pairs[schedule].append(pair)
    return tuple(_probe(schedule, found) for schedule, found in pairs.items() if found)


def pilot_turns(threads: int) -> int:
    """Timed pairs per schedule: where no duet contends (sequential workers on more than one BLAS
    thread) the sequential pairs get the duet's turns too, the pilot's time unchanged, as the clock
    is then its only question; 20 pairs read the two clocks' spreads too loosely to choose
    (results/pilot-zen4/clock-spread.md)."""
    return TURNS if threads == 1 else 2 * TURNS


class PilotTrials:
    """The pilot's pairs: the experiment's reference variant on two workers of this build, as a
    run's rounds pair two builds' workers. Both trials of a pair run the same prompt (one round
    number, as a round's trials do), one after the other on cores the OS picks (sequential), or at
    once, pinned to the two cores and swapped every turn (duet)."""

    def __init__(self, shape: CellShape, exp: Experiment, cores: tuple[int, int]) -> None:
        self.shape, self.variant, self.timeout_s = shape, exp.correctness.reference, exp.timeout_s
        self.cores = cores
        self.deadline = time.monotonic() + exp.timeout_s
        self.round = 0

    def pair(self, workers: Sequence[WorkerSession], schedule: str, turn: int) -> Pair:
        """Both workers' trials of one pair, as `schedule` lays out a round of two builds (the two
        workers) on one variant, its cores swapped by the turn."""
        self.round += 1
        command = Command(Do.TRIAL, self.shape, self.variant, round=self.round)
        steps = SCHEDULES[schedule].steps(
            Round(turn, [self.variant], PILOT_WORKERS, (), self.cores)
        )
        if not any(step.repin for step in steps):  # a duet may have pinned them a turn before
            for worker in workers:
                unpin(worker.process.pid)
        for step in steps:
            place(step, workers)
        samples: list[ClockSample] = []
        start = time.perf_counter()
        for step in steps:
            for arm, sent in send_step(step, workers, [command] * len(step.arms)):
                samples.append(self._sample(workers[arm.worker], sent))
        first, second = samples
        return first, second, time.perf_counter() - start

    def _sample(self, worker: WorkerSession, command: Command) -> ClockSample:
        results = worker.collect(command, self.deadline, self.timeout_s)
        measured: Measured = next(r for r in results if isinstance(r, Trial)).measured
        if measured.gen_s is None:
            return ClockSample((measured.prefill_s,), (measured.prefill_cpu_s or math.nan,))
        return ClockSample(
            (measured.prefill_s, measured.gen_s),
            (measured.prefill_cpu_s or math.nan, measured.gen_cpu_s or math.nan),
        )


def _probe(schedule: str, pairs: list[Pair]) -> ScheduleProbe:
    wall = _log_ratios([(a.wall, b.wall) for a, b, _ in pairs])
    seconds = [seconds for _, _, seconds in pairs]
    return ScheduleProbe(
        schedule,
        wall_sd=_noisiest_metric(wall),
        cpu_sd=_noisiest_metric(_log_ratios([(a.cpu, b.cpu) for a, b, _ in pairs])),
        pair_s=float(np.mean(seconds)),
        prefill_ratios=tuple(round(float(x), 6) for x in wall[:, 0]),
        gen_ratios=tuple(round(float(x), 6) for x in wall[:, 1]) if wall.shape[1] > 1 else (),
        pair_seconds=tuple(round(s, 6) for s in seconds),
    )


def _log_ratios(pairs: list[tuple[tuple[float, ...], tuple[float, ...]]]) -> np.ndarray:
    """Each pair's log ratio, a row per pair and a column per metric (prefill, gen)."""
    return np.log(np.array([a for a, _ in pairs]) / np.array([b for _, b in pairs]))


def _noisiest_metric(ratios: np.ndarray) -> float:
    """The larger of the metrics' SDs of the pair's log ratio, each metric on its own as a run's
    rows are: a cell waits for its noisiest row. The plain SD, stalls and all, as a run's
    intervals will see them (until 2026-12-05 a robust scale, so one stalled pair did not count).
    (The sum of a trial's metrics, used until 2026-12-04, hid the prefill rows' wall-clock noise
    on the Zen 4 EPYC; results/pilot-zen4.)"""
    # np.max keeps a NaN (no CPU clock on some trial), so that clock cannot win
    return float(np.max(np.std(ratios, axis=0, ddof=1)))


def gain_lower_bound(
    sequential: ScheduleProbe, duet: ScheduleProbe, draws: int = 2000
) -> float | None:
    """The BOUND quantile of the duet's precision per second over the sequential pair's,
    resampling each schedule's pairs (seeded: the same pilot gives the same bound); None for
    probes without their pairs (cached before they were kept)."""
    if min(len(sequential.pair_seconds), len(duet.pair_seconds)) < 3:
        return None
    rng = np.random.default_rng(0)

    def precision(probe: ScheduleProbe) -> np.ndarray:
        columns = [probe.prefill_ratios, *([probe.gen_ratios] if probe.gen_ratios else [])]
        ratios, seconds = np.array(columns).T, np.array(probe.pair_seconds)
        drawn = rng.integers(0, len(seconds), size=(draws, len(seconds)))
        sd = np.maximum(ratios[drawn].std(axis=1, ddof=1).max(axis=1), 1e-4)
        return 1.0 / (sd**2 * seconds[drawn].mean(axis=1))

    return float(np.quantile(precision(duet) / precision(sequential), BOUND))
