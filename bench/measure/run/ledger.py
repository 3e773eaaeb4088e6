"""Where a run's time goes, phase by phase (core.header `PHASES`): the answer ends with it, and the
run's `time` record keeps it, so a run shows how much of its budget measured."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

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

    def spent(self, run_id: str) -> TimeSpent:
        total = time.monotonic() - self.started
        phases = {name: round(self.seconds[name], 3) for name in PHASES if name in self.seconds}
        phases["other"] = round(max(0.0, total - sum(self.seconds.values())), 3)
        return TimeSpent(run_id=run_id, total_s=round(total, 3), phases=phases)
