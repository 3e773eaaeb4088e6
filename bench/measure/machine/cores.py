"""This machine's cores as a duet uses them: two CPUs on distinct physical cores, and pinning a
worker process (every thread of it) to one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path


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
    """Every thread of process `pid` onto `cpu` (threads it starts later inherit it)."""
    _set_affinity(pid, {cpu})


def unpin(pid: int) -> None:
    """Every thread of process `pid` free to run on any CPU this process may use, as an unpinned
    worker's are."""
    _set_affinity(pid, os.sched_getaffinity(0))


def move(pid: int, cpus: Sequence[int] | None) -> None:
    """Process `pid` onto `cpus`, or free to run on any (None), as a schedule places its workers."""
    if cpus:
        _set_affinity(pid, set(cpus))
    else:
        unpin(pid)


def _set_affinity(pid: int, cpus: set[int]) -> None:
    """A thread that ended meanwhile is no error."""
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            os.sched_setaffinity(tid, cpus)


def pinned_cpus(env: dict[str, str]) -> list[int] | None:
    """The last `threads` cores this process may use, for the workers (run --pin); the others stay
    with the runner and OS."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    threads = int(env.get("OPENBLAS_NUM_THREADS", len(cores)))
    return cores[-threads:] if threads < len(cores) else None
