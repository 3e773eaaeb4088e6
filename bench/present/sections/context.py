"""What every section says about where and how it was measured, and how its files are named.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ...analysis.runs import Environment
from ...analysis.study import Study


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()


def environment_line(envs: Sequence[Environment]) -> str:
    """device, backend, BLAS, mlx version and commit; values that differ between runs are all listed."""

    def values(render: Callable[[Environment], str]) -> str:
        return " / ".join(dict.fromkeys(render(env) for env in envs)) or "?"

    def commit(env: Environment) -> str:
        return env.commit[:7] + (" (dirty)" if env.dirty else "")

    def threads(env: Environment) -> str:
        return f"{env.threads or '?'} of {env.cores or '?'} cores"

    return (
        f"device {values(lambda e: e.device)} · backend {values(lambda e: e.backend)}"
        f" · BLAS {values(lambda e: e.blas)} on {values(threads)} · mlx {values(lambda e: e.mlx)}"
        f" · commit {values(commit)}"
    )


def threads_note(envs: Sequence[Environment]) -> str | None:
    """Why a CPU run used fewer BLAS threads than mlx's own default (every core), and what that does to tok/s."""
    env = envs[0] if envs else Environment()
    threads, cores = env.threads, env.cores
    if env.backend != "cpu" or not threads or not cores or threads >= cores:
        return None
    return (f"BLAS threads: {threads} of {cores} cores, fusebench's default (`threads: auto`), chosen by measurement: "
            "on this project's 2-core VM two threads ran 1.6–1.9x faster, but their rounds were 5–10x noisier "
            "(paired log-ratio SD 3–19% against 1.3–2.8%), so one thread gives far tighter intervals per minute. "
            "tok/s here are therefore lower than at mlx's default (every core); the Δs are what this setting shows. "
            "Set `threads:` in the experiment to measure at another count.")


def plot_caption(study: Study, machine: str) -> str:
    return envs_caption(study.envs(machine))


def envs_caption(envs: Sequence[Environment]) -> str:
    return f"Measured on {envs[0].hostname}: {environment_line(envs)}"


def machine_suffix(study: Study, machine: str) -> str:
    return "" if len(study.machines) == 1 else f"-m{study.machines.index(machine) + 1}"


def cell_where(study: Study, size: str, workload: str, machine: str) -> str:
    return f"{size} {workload}" + ("" if len(study.machines) == 1 else f" on {machine}")
