"""A worker process's placement as the runner gave it and the OS sees it (core.placement)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...core.placement import RECORDED_VALUES, Placement


def placement_of(
    command: Sequence[str], env: Mapping[str, str], tree: Path, pid: int, slot: str = ""
) -> Placement:
    """The placement of the worker `pid` started with `command` and `env` in `tree`."""
    return Placement(
        interpreter=command[0],
        launcher=command[2] if len(command) > 2 else "",
        tree=str(tree),
        tree_chars=len(str(tree)),
        slot=slot,
        filesystem=filesystem_of(tree),
        argv_bytes=sum(len(arg.encode()) + 1 for arg in command),
        env_bytes=sum(len(f"{name}={value}".encode()) + 1 for name, value in env.items()),
        env_names=tuple(sorted(env)),
        env_values={name: env[name] for name in RECORDED_VALUES if name in env},
        cpus=_cpus(pid),
    )


def filesystem_of(path: Path) -> str:
    """The type and device of the filesystem `path` lives on, from the mount table (Linux); the
    device number elsewhere."""
    try:
        device = os.stat(path).st_dev
    except OSError:
        return ""
    best = ""
    found = f"device {device}"
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return found
    resolved = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        source, point, kind = parts[:3]
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, found = point, f"{kind} {source} on {point}"
    return found


def _cpus(pid: int) -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(pid)))
    except (AttributeError, OSError):  # not Linux, or already gone
        return ()
