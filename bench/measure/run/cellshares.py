"""A cell's op shares (measure.ops.shares): each switchable op's time in a prefill and a decode
step of the cell, for the expected Δ. An earlier run's here where it timed the same code (they
cost nothing), else timed after the cell's rounds unless its rows are undecided; kept for later
runs' plans (`trials: plan`)."""

from __future__ import annotations

import hashlib
import importlib.util
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.cell import ShareTime
from ...core.experiment import Cell, Experiment
from ...core.header import Env
from ..job import CellShape, Command, Do, Result
from .planning import CachedShares, now_iso
from .resume import DoneWork
from .session import CURRENT

if TYPE_CHECKING:
    from .cellcontext import CellContext


# What a call's time in the op shares depends on beyond the machine, mlx and BLAS threads: the ops
# and the models that call them, and how the shares are traced and timed (the worker runs
# measure.ops). A commit that touches none of them times the same code: its first run reuses them.
SHARES_SOURCES = ("fusebench.models", "fusebench.measure.ops", "fusebench.measure.worker")


def shares_code(env: Env, exp: Experiment) -> str:
    """What an op's time depends on beyond the machine and BLAS threads (the plan cache's key): a
    digest of the files of SHARES_SOURCES and of the experiment's plugins, as this build holds
    them (committed or not), and mlx."""
    digest = hashlib.sha256()
    for path in [*_source_files(SHARES_SOURCES), *map(Path, exp.plugins)]:
        data = path.read_bytes()
        digest.update(f"{path.name} {len(data)}\n".encode() + data)
    return f"{digest.hexdigest()[:16]} mlx {env.mlx}"


def _source_files(modules: Sequence[str]) -> list[Path]:
    """The files of `modules` (a package's, caches left out), in a fixed order."""
    files: list[Path] = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name  # this build's own modules
        folders = spec.submodule_search_locations
        if folders is None:
            files.append(Path(spec.origin))
            continue
        for folder in map(Path, folders):
            found = (p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            files += sorted(found, key=lambda p: p.relative_to(folder).as_posix())
    return files


class CellShares:
    """One cell's op shares, and what timing them cost (`seconds`, `timed`: the planner's)."""

    def __init__(
        self,
        context: CellContext,
        cell: Cell,
        shape: CellShape,
        done: DoneWork,
        request: Callable[[str, Command], list[Result]],
        say: Callable[[str], None],
    ) -> None:
        self.context, self.exp, self.cell, self.shape = context, context.exp, cell, shape
        self.done, self.request, self.say = done, request, say
        self.timed: CachedShares | None = None  # op shares this run timed, for the cache
        self.seconds = 0.0  # the seconds they took
        self.skipped: str | None = None  # why this cell times none, once it knows

    def weigh(self, rounds: int, undecided_in_budget: bool) -> None:
        """Whether the shares are worth timing once the rounds are done: they explain a Δ, so not
        without timed rounds to weigh them against, and where a budget left rows undecided their
        time goes to rounds instead."""
        self.skipped = (
            "no timed rounds to weigh them against"
            if not rounds
            else "rows are undecided, and the budget went to their rounds"
            if undecided_in_budget
            else None
        )

    @property
    def _label(self) -> str:
        return f"{self.cell.model.label} {self.cell.workload.label}"

    def run(self, builds: list[str]) -> None:
        """The shares of the current build only: its ops are the variants' (a reference build's
        may differ, and may not know the command)."""
        if CURRENT.name not in builds:
            return
        planner = self.context.planner
        cached = planner.reusable_shares(self.cell) if planner else None
        if cached is not None and not self.done.has_share(self.cell.key, 0):
            self.context.findings.reused_shares(self.cell.key, cached.samples, cached.measured_at)
            self.say(
                f"{self._label}: op shares as timed here at {cached.measured_at[:16]} (the same "
                "ops' code, mlx and BLAS threads): their seconds went to rounds"
            )
        elif self.skipped and self.exp.shares:
            self.say(f"{self._label}: op shares skipped: {self.skipped}")
        else:
            self._time()

    def _time(self) -> None:
        """The experiment's op-share rounds."""
        began, samples = time.monotonic(), []
        for r in range(self.exp.shares):
            if not self.done.has_share(self.cell.key, r):
                self.context.progress.update(f"{self._label}: op shares, round {r + 1}")
                samples += self.request(CURRENT.name, Command(Do.SHARES, self.shape, round=r))
        timed = tuple(sample for sample in samples if isinstance(sample, ShareTime))
        if self.context.planner and timed:
            self.seconds = time.monotonic() - began
            self.timed = CachedShares(timed, self.context.planner.code, now_iso())
