"""What every section says about where and how it was measured, and how its files are named.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ...analysis.study import Study
from ...core.fingerprint import blas_name


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()


def environment_line(envs: Sequence[dict[str, Any]]) -> str:
    """device, backend, BLAS, mlx version and commit; values that differ between runs are all listed."""

    def values(render: Callable[[dict[str, Any]], str]) -> str:
        return " / ".join(dict.fromkeys(render(env) for env in envs)) or "?"

    def commit(env: dict[str, Any]) -> str:
        return str(env.get("git_commit") or "?")[:7] + (" (dirty)" if env.get("git_dirty") else "")

    def threads(env: dict[str, Any]) -> str:
        return f"{env.get('threads') or '?'} of {env.get('cores') or '?'} cores"

    return (
        f"device {values(lambda e: str(e.get('device', '?')))} · backend {values(lambda e: str(e.get('backend', '?')))}"
        f" · BLAS {values(blas_name)} on {values(threads)} · mlx {values(lambda e: str(e.get('mlx', '?')))}"
        f" · commit {values(commit)}"
    )


def threads_note(envs: Sequence[dict[str, Any]]) -> str | None:
    """Why a CPU run used fewer BLAS threads than mlx's own default (every core), and what that does to tok/s."""
    env = envs[0] if envs else {}
    threads, cores = env.get("threads"), env.get("cores")
    if env.get("backend") != "cpu" or not threads or not cores or threads >= cores:
        return None
    return (f"BLAS threads: {threads} of {cores} cores, fusebench's default (`threads: auto`), chosen by measurement: "
            "on this project's 2-core VM two threads ran 1.6–1.9x faster, but their rounds were 5–10x noisier "
            "(paired log-ratio SD 3–19% against 1.3–2.8%), so one thread gives far tighter intervals per minute. "
            "tok/s here are therefore lower than at mlx's default (every core); the Δs are what this setting shows. "
            "Set `threads:` in the experiment to measure at another count.")


def plot_caption(study: Study, machine: str) -> str:
    return envs_caption(study.envs.get(machine) or [{}])


def envs_caption(envs: Sequence[dict[str, Any]]) -> str:
    return f"Measured on {envs[0].get('hostname', '?')}: {environment_line(envs)}"


def machine_suffix(study: Study, machine: str) -> str:
    return "" if len(study.machines) == 1 else f"-m{study.machines.index(machine) + 1}"


def cell_where(study: Study, row: Any) -> str:
    return f"{row['size']} {row['workload']}" + ("" if len(study.machines) == 1 else f" on {row['machine']}")
