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

    return (
        f"device {values(lambda e: str(e.get('device', '?')))} · backend {values(lambda e: str(e.get('backend', '?')))}"
        f" · BLAS {values(blas_name)} · mlx {values(lambda e: str(e.get('mlx', '?')))} · commit {values(commit)}"
    )


def plot_caption(study: Study, machine: str) -> str:
    return envs_caption(study.envs.get(machine) or [{}])


def envs_caption(envs: Sequence[dict[str, Any]]) -> str:
    return f"Measured on {envs[0].get('hostname', '?')}: {environment_line(envs)}"


def machine_suffix(study: Study, machine: str) -> str:
    return "" if len(study.machines) == 1 else f"-m{study.machines.index(machine) + 1}"


def cell_where(study: Study, row: Any) -> str:
    return f"{row['size']} {row['workload']}" + ("" if len(study.machines) == 1 else f" on {row['machine']}")
