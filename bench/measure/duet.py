"""Duet rounds on this machine: which two cores the arms run on, pinning a worker (every thread of
it) to one, and `schedule: auto`, which measures whether a duet buys more precision per second here
than trials one after another.

How `auto` measures
    Two pairs of sampler processes start as workers do (same interpreter and BLAS preload, the
    sampler of measure.threads). The duet pair runs one BLAS thread each, pinned to the two cores;
    the sequential pair runs the thread count `threads: auto` chose, unpinned, as sequential workers
    do. Every turn times one pair of identical pieces of step-shaped work in each schedule: the
    sequential pair one after the other (ABBA), the duet pair both at once (cores swapped every
    turn). The schedules take turns, so a slow minute of the machine hits both. Per schedule and
    clock (wall, process CPU): the spread s of log(tA / tB) (pairwise scale, as analysis.inference's
    outlier rule, so one stalled turn does not decide) and the seconds a pair takes t (sequential:
    both trials; duet: the slower one). Precision per second is 1 / (s² · t). The duet wins when it
    buys at least MARGIN times the sequential pair's on the wall clock, the clock intervals use.

Cached per machine (`machine_key`) as the thread choice is, unless other processes used more than
BUSY_CORES meanwhile (then it holds for that run only); `fusebench env --probe` measures again.
GPU backends run sequentially (one device), and so does a machine without two free cores. `auto`
also runs sequentially where `threads: auto` chose more than one BLAS thread: a duet's workers run
one thread each, and an op's Δ depends on the speed of the BLAS work around it (measured: the
tenfold softcap read −14.0% gen on 2 threads, −9.4% on 1 thread sequentially and −6.6% in a duet;
docs/duet.md), so a duet would answer for another configuration than the one the user runs.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..analysis.inference import pairwise_scale
from ..core.records import Env
from ..core.spec import Schedule
from ..core.typed import from_mapping
from .env import cache_dir, machine_key, read_cached, thread_env, write_cached
from .load import LoadSampler

TURNS = 24  # timed pairs per schedule
WARMUP = 2  # untimed pairs per schedule first
MARGIN = 1.25  # the duet must buy this much more precision per second than sequential trials
TRIAL_S = 0.25  # each sample's length: repetitions of the sampler's work up to about this
BUSY_CORES = 0.25  # other processes' mean CPU, in cores, above which a probe is not cached


def duet_cores(allowed: Sequence[int] | None = None) -> tuple[int, int] | None:
    """Two CPUs this process may use on distinct physical cores (SMT siblings share a core's
    units, so they would not be two arms of equal standing), or None without two."""
    if allowed is None:
        if not hasattr(os, "sched_getaffinity"):
            return None
        allowed = sorted(os.sched_getaffinity(0))
    seen: dict[tuple[str, str], int] = {}
    for cpu in allowed:
        seen.setdefault(_physical_core(cpu), cpu)
    chosen = sorted(seen.values())
    return (chosen[0], chosen[1]) if len(chosen) >= 2 else None


def _physical_core(cpu: int) -> tuple[str, str]:
    topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
    try:
        return (
            (topology / "physical_package_id").read_text().strip(),
            (topology / "core_id").read_text().strip(),
        )
    except OSError:
        return ("?", str(cpu))  # no topology: every CPU its own core


def pin(pid: int, cpu: int) -> None:
    """Every thread of process `pid` onto `cpu` (threads it starts later inherit it). A thread that
    ended meanwhile is no error."""
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            os.sched_setaffinity(tid, {cpu})


@dataclass(frozen=True)
class ScheduleProbe:
    """One schedule's figures from the probe: SD of the pair's log ratio on each clock, and the
    seconds a pair took (mean)."""

    schedule: str
    wall_sd: float
    cpu_sd: float
    pair_s: float

    @property
    def precision_per_s(self) -> float:
        return 1.0 / (max(self.wall_sd, 1e-4) ** 2 * self.pair_s)

    @property
    def cpu_precision_per_s(self) -> float:
        return 1.0 / (max(self.cpu_sd, 1e-4) ** 2 * self.pair_s)


@dataclass(frozen=True)
class ScheduleChoice:
    """What `schedule` resolved to and why: the probe's figures (empty: nothing was measured), the
    cores a duet runs on."""

    schedule: str
    reason: str
    probes: tuple[ScheduleProbe, ...] = ()
    cores: tuple[int, int] | None = None

    @property
    def line(self) -> str:
        """The first screen's word on it."""
        return f"schedule: {self.schedule} ({self.reason})"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ScheduleChoice:
        return from_mapping(cls, data)


def cache_path(env: Env) -> Path:
    return cache_dir() / f"schedule-v1-{machine_key(env)}.json"


def choose_schedule(
    asked: Schedule,
    env: Env,
    duet_env: dict[str, str],
    sequential_env: dict[str, str],
    threads: int = 1,
    fresh: bool = False,
) -> ScheduleChoice:
    """The schedule a run uses: what the experiment asked where it can run, else sequential with
    the reason; `auto` measured here once (cached). `threads`: the BLAS threads a sequential
    worker runs."""
    if asked == Schedule.SEQUENTIAL:
        return ScheduleChoice(Schedule.SEQUENTIAL, "asked for")
    if env.get("backend") != "cpu":
        return ScheduleChoice(Schedule.SEQUENTIAL, "a GPU backend: its one device runs one trial")
    cores = duet_cores()
    if cores is None:
        return ScheduleChoice(Schedule.SEQUENTIAL, "fewer than two physical cores to run on")
    if asked == Schedule.DUET:
        where = f"asked for; on cores {cores[0]} and {cores[1]}, one BLAS thread each"
        return ScheduleChoice(Schedule.DUET, where, cores=cores)
    if threads > 1:
        # An op's Δ is its share of the step, and the step is slower on one BLAS thread: a duet
        # would measure another configuration than the sequential one (docs/duet.md).
        return ScheduleChoice(
            Schedule.SEQUENTIAL,
            f"sequential workers run {threads} BLAS threads here, and a duet's one-thread "
            "workers would measure another configuration (an op's Δ depends on the BLAS speed "
            "around it)",
        )
    path = cache_path(env)
    if not fresh and (cached := read_cached(path, ScheduleChoice.from_json)):
        return replace(cached, cores=cores)
    with LoadSampler() as sampler:
        choice = decide(measure(duet_env, sequential_env, cores), cores)
    load = sampler.summary()
    if load and load["other_cores_mean"] > BUSY_CORES:
        # a probe beside other work measures that work: use it for this run, measure again next
        return replace(
            choice,
            reason=f"{choice.reason}; other processes used {load['other_cores_mean']:.1f} cores "
            "meanwhile, so this choice is not cached",
        )
    write_cached(path, choice.to_json())
    return choice


def decide(probes: tuple[ScheduleProbe, ScheduleProbe], cores: tuple[int, int]) -> ScheduleChoice:
    sequential, duet = probes
    gain = duet.precision_per_s / sequential.precision_per_s
    figures = (
        f"pair SD {100 * duet.wall_sd:.1f}% in {duet.pair_s:.2f} s against "
        f"{100 * sequential.wall_sd:.1f}% in {sequential.pair_s:.2f} s"
    )
    if gain >= MARGIN:
        return ScheduleChoice(
            Schedule.DUET,
            f"measured {gain:.2f}x the precision per second of sequential trials here "
            f"({figures}); on cores {cores[0]} and {cores[1]}",
            probes,
            cores,
        )
    return ScheduleChoice(
        Schedule.SEQUENTIAL,
        f"a duet measured {gain:.2f}x the precision per second here, less than the "
        f"{MARGIN:g}x it must ({figures})",
        probes,
        cores,
    )


def measure(
    duet_env: dict[str, str], sequential_env: dict[str, str], cores: tuple[int, int]
) -> tuple[ScheduleProbe, ScheduleProbe]:
    """The sequential and the duet pair's figures, the schedules taking turns."""
    duet = [_sampler(thread_env(duet_env, 1)) for _ in range(2)]
    sequential = [_sampler(sequential_env) for _ in range(2)]
    try:
        reps = _repetitions(duet[0])
        seq_times, duet_times = [], []
        for turn in range(WARMUP + TURNS):
            first, second = sequential if turn % 2 == 0 else sequential[::-1]
            one, other = _ask(first, reps), _ask(second, reps)
            flip = turn % 2
            pin(duet[0].pid, cores[flip])
            pin(duet[1].pid, cores[1 - flip])
            together = _ask_together(duet, reps)
            if turn >= WARMUP:
                seq_times.append((one, other) if turn % 2 == 0 else (other, one))
                duet_times.append(together)
    finally:
        for sampler in [*duet, *sequential]:
            sampler.stdin.close()
            sampler.wait(timeout=30)
    return (
        _probe(Schedule.SEQUENTIAL, seq_times, lambda a, b: a[0] + b[0]),
        _probe(Schedule.DUET, duet_times, lambda a, b: max(a[0], b[0])),
    )


Sample = tuple[float, float]  # (wall s, CPU s)


def _probe(schedule: str, pairs: list[tuple[Sample, Sample]], pair_s) -> ScheduleProbe:
    wall = [math.log(a[0] / b[0]) for a, b in pairs]
    cpu = [math.log(a[1] / b[1]) for a, b in pairs]
    return ScheduleProbe(
        schedule,
        wall_sd=pairwise_scale(np.array(wall)),
        cpu_sd=pairwise_scale(np.array(cpu)),
        pair_s=float(np.mean([pair_s(a, b) for a, b in pairs])),
    )


def _sampler(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.measure.threads"],
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )


def _repetitions(sampler: subprocess.Popen) -> int:
    """How many of the sampler's pieces of work make one sample of about TRIAL_S."""
    _ask(sampler, 1)
    once = _ask(sampler, 1)[0]
    return max(1, round(TRIAL_S / max(once, 1e-4)))


def _ask(sampler: subprocess.Popen, reps: int) -> Sample:
    sampler.stdin.write(f"sample {reps}\n")
    sampler.stdin.flush()
    return _answer(sampler)


def _ask_together(samplers: list[subprocess.Popen], reps: int) -> tuple[Sample, Sample]:
    for sampler in samplers:
        sampler.stdin.write(f"sample {reps}\n")
        sampler.stdin.flush()
    first, second = (_answer(sampler) for sampler in samplers)
    return first, second


def _answer(sampler: subprocess.Popen) -> Sample:
    wall, cpu = sampler.stdout.readline().split()
    return float(wall), float(cpu)
