"""The run's time, kept in one place (`RunTime`): who spent what, phase by phase (core.header
`PHASES`: the answer ends with it, and the run's `time` record keeps it, so a run shows how much of
its budget measured), and what the budget (`budget_s`) has left, divided among the cells in turn
(each cell's allowance).
Everything else that needs a time (a cell's stopping rule, the plan, the one-time measurements of
the machine) asks it or spends through it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from ...core.header import PHASES, TimeSpent

# What a machine measures once and caches (the thread choice, the peak, a preset's weights
# written): the budget leaves it out, as a later run on the same machine would not pay it.
ONE_TIME = "machine"


class RunTime:
    """Seconds by phase since `started` (time.monotonic(), the command's start; what no phase holds
    is `other`), and the budget of `budget_s` seconds from then, less the machine's one-time
    measurements, divided evenly among the cells left as each starts (a cell's allowance)."""

    def __init__(self, started: float, budget_s: float | None) -> None:
        self.started, self.budget_s = started, budget_s
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []  # the seconds of phases nested in each open one
        self.cells, self.cells_done = 0, 0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time spent in the block, on `name`; a phase nested in it keeps its own seconds."""
        began = time.monotonic()
        self._inner.append(0.0)
        try:
            yield
        finally:
            elapsed, inner = time.monotonic() - began, self._inner.pop()
            self.add(name, elapsed - inner)
            if self._inner:
                self._inner[-1] += elapsed

    def add(self, name: str, seconds: float) -> None:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}")
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def record(self, run_id: str, said_s: float | None = None) -> TimeSpent:
        """The run's `time` record; `said_s`: the time its plan said before the first round."""
        total = self.spent_s()
        phases = {name: round(self.seconds[name], 3) for name in PHASES if name in self.seconds}
        phases["other"] = round(max(0.0, total - sum(self.seconds.values())), 3)
        said = None if said_s is None else round(said_s, 3)
        return TimeSpent(run_id=run_id, total_s=round(total, 3), phases=phases, said_s=said)

    def spent_s(self) -> float:
        """Seconds since the command started, the machine's one-time measurements included."""
        return time.monotonic() - self.started

    @property
    def budgeted(self) -> bool:
        return bool(self.budget_s)

    def time_left_s(self) -> float:
        """What the run's budget has left (infinite without one)."""
        if not self.budget_s:
            return float("inf")
        return self.budget_s - (self.spent_s() - self.seconds.get(ONE_TIME, 0.0))

    def divide_among(self, cells: int) -> None:
        """The budget, if any, divided among `cells` cells from now on."""
        self.cells = cells

    def cell_allowance_s(self) -> float | None:
        """The seconds the next cell may spend: an even part of what the budget has left (the
        cells before it may have passed time on); None without a budget."""
        if not self.budget_s or not self.cells:
            return None
        return max(0.0, self.time_left_s()) / max(1, self.cells - self.cells_done)

    def cell_finished(self) -> None:
        self.cells_done += 1
