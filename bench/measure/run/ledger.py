"""Where a run's time goes, phase by phase (core.header `PHASES`): the answer ends with it, and the
run's `time` record keeps it, so a run shows how much of its budget measured; and the budget its
cells share (`RunTime`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from ...analysis.stopping import RunBudget
from ...core.header import PHASES, TimeSpent


class TimeLedger:
    """Seconds by phase since `started` (time.monotonic()); what no phase holds is `other`."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - began)

    def add(self, name: str, seconds: float) -> None:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}")
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def spent(self, run_id: str, said_s: float | None = None) -> TimeSpent:
        """The run's `time` record; `said_s`: the time its plan said before the first round."""
        total = time.monotonic() - self.started
        phases = {name: round(self.seconds[name], 3) for name in PHASES if name in self.seconds}
        phases["other"] = round(max(0.0, total - sum(self.seconds.values())), 3)
        said = None if said_s is None else round(said_s, 3)
        return TimeSpent(run_id=run_id, total_s=round(total, 3), phases=phases, said_s=said)


class RunTime:
    """The run's time: its ledger, and the budget (`budget_s`) its cells share in turn, counted
    from `started` (time.monotonic()) less the machine's one-time costs met on the way."""

    def __init__(self, ledger: TimeLedger, started: float, budget_s: float | None) -> None:
        self.ledger, self.started, self.budget_s = ledger, started, budget_s
        self.budget: RunBudget | None = None
        self.cells_done = 0

    def share_among(self, cells: int) -> None:
        """The budget, if any, shared among `cells` cells from now on."""
        if self.budget_s:
            self.budget = RunBudget(self.budget_s, cells)

    def spent_s(self) -> float:
        """Seconds since the command started, the machine's one-time measurements included."""
        return time.monotonic() - self.ledger.started

    def time_left_s(self) -> float:
        """What the run's budget has left (infinite without one)."""
        if not self.budget_s:
            return float("inf")
        return self.budget_s - (time.monotonic() - self.started)

    def cell_share_s(self) -> float | None:
        """The seconds the next cell may spend (None without a budget)."""
        if self.budget is None:
            return None
        return self.budget.share_s(time.monotonic() - self.started, self.cells_done)

    def cell_finished(self) -> None:
        self.cells_done += 1

    def wrote_weights(self, seconds: float) -> None:
        """A preset's weights written to the cache: the machine's one-time cost, which the budget
        leaves out, as it does the probes that are cached."""
        self.ledger.add("machine", seconds)
        self.started += seconds
