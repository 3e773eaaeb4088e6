"""What else the machine was doing while fusebench measured: load average, other processes' CPU,
steal time.

A benchmark on a shared machine can only be judged next to this. `preflight()` looks before the run
starts; a `LoadSampler` reads /proc while it runs, between steps and never during a trial, so
nothing of the harness runs beside one (issue 53; a thread reading it every second did not
measurably stall two-thread trials either: results/sampler-beside-zen4). /proc's counters are
cumulative, so readings between steps still cover every second. Both read Linux's /proc and return
None elsewhere.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ...core.header import LoadSummary, MachineLoad

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuTimes:
    busy: float  # seconds of all cores' non-idle time, steal excluded
    steal: float  # seconds the hypervisor gave our cores to someone else
    ours: float  # seconds used by this process and its children (the workers)
    at: float  # monotonic time of the reading


def _cpu_times() -> CpuTimes | None:
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0.0] * 8)[:8]
    busy = (user + nice + system + irq + softirq) / _TICKS
    return CpuTimes(busy, steal / _TICKS, _our_seconds(), time.monotonic())


def _stat(pid: int | str) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # fields from the 3rd on: state, ppid, ...


def _our_seconds() -> float:
    """CPU seconds of this process, of its reaped children (cutime, cstime), and of its live
    children (the workers). A worker that exits moves its time from the last term to the second, so
    the sum never jumps."""
    me = _stat("self")
    total = sum(float(v) for v in me[11:15])  # utime, stime, cutime, cstime
    parent = str(os.getpid())
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = _stat(entry)
            except (OSError, IndexError):
                continue
            if stat[1] == parent:
                total += float(stat[11]) + float(stat[12])
    return total / _TICKS


@dataclass(frozen=True)
class Share:
    """Over an interval, in cores: other processes' busy time, and the steal time, per second of
    wall time."""

    other_cores: float
    steal_cores: float

    @classmethod
    def between(cls, before: CpuTimes, after: CpuTimes) -> Share:
        """Bounded by the machine's cores: /proc/stat counts in clock ticks, and a child's time is
        ours only once it is reaped, so over a short interval the raw difference can read more cores
        than there are."""
        wall = max(after.at - before.at, 1e-6)
        cores = float(os.cpu_count() or 1)
        others = max(0.0, (after.busy - before.busy) - (after.ours - before.ours))
        return cls(
            min(cores, others / wall), min(cores, max(0.0, after.steal - before.steal) / wall)
        )


@dataclass(frozen=True)
class LoadSample:
    share: Share
    loadavg_1m: float
    seconds: float  # the wall time the share is over


def preflight(seconds: float = 1.0) -> MachineLoad | None:
    """The machine before the run: load average, and what other processes and the hypervisor took
    for `seconds`."""
    before = _cpu_times()
    if before is None:
        return None
    time.sleep(seconds)
    share = Share.between(before, _cpu_times())
    return MachineLoad(
        loadavg_1m=os.getloadavg()[0],
        cores=os.cpu_count(),
        other_cores=share.other_cores,
        steal_cores=share.steal_cores,
    )


class LoadSampler:
    """What the machine did while the run measured, read when the run calls `read()` (as a step's
    trials end) and once more on leaving: a sample covers the time since the last one, at least
    `min_interval_s` (/proc counts in 10 ms ticks; a shorter remainder is left out). `summary()`
    gives time-weighted means and the maxima over samples."""

    def __init__(self, min_interval_s: float = 1.0) -> None:
        self.min_interval_s = min_interval_s
        self.samples: list[LoadSample] = []
        self._before: CpuTimes | None = None

    def __enter__(self) -> LoadSampler:
        self._before = _cpu_times()
        return self

    def __exit__(self, *exc: object) -> None:
        self.read()

    def read(self) -> None:
        """A sample since the last, unless less than `min_interval_s` has passed (then the next
        reading covers this interval too)."""
        if self._before is None:
            return
        after = _cpu_times()
        if after is None:
            return
        seconds = after.at - self._before.at
        if seconds < self.min_interval_s:
            return
        self.samples.append(
            LoadSample(Share.between(self._before, after), os.getloadavg()[0], seconds)
        )
        self._before = after

    def summary(self, run_id: str = "?") -> LoadSummary:
        """Means (weighted by the seconds each sample covers) and maxima of the samples taken (none
        where the machine cannot be sampled)."""
        if not self.samples:
            return LoadSummary(run_id=run_id)
        seconds = [s.seconds for s in self.samples]
        others = [s.share.other_cores for s in self.samples]
        steal = [s.share.steal_cores for s in self.samples]
        loadavg = [s.loadavg_1m for s in self.samples]
        return LoadSummary(
            run_id=run_id,
            samples=len(self.samples),
            interval_s=round(sum(seconds) / len(seconds), 3),
            other_cores_mean=_mean(others, seconds),
            steal_cores_mean=_mean(steal, seconds),
            loadavg_1m_mean=_mean(loadavg, seconds),
            other_cores_max=round(max(others), 3),
            steal_cores_max=round(max(steal), 3),
            loadavg_1m_max=round(max(loadavg), 3),
        )


def _mean(values: list[float], weights: list[float]) -> float:
    return round(sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights), 3)
