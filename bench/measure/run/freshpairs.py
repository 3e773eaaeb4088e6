"""Fresh worker pairs: with two builds (`run --against`), a cell's workers are replaced every
`CellStop.rounds_per_pair` rounds (worker_rounds, or the count the cell chose), so its rounds come
from several pairs of processes and the interval sees the spread between them
(analysis.inference, "Between processes"). A duet of one build's variants
keeps its pair: each worker runs both variants in turn, and the committed duet runs show no offset
between pairs (benchmarks/duet_fresh_pairs.py, results/duet-fresh-pairs)."""

from __future__ import annotations

import time

from ...core.experiment import Cell
from .cellcontext import CellContext
from .cellstop import CellStop
from .ledger import ONE_TIME
from .schedules.base import RoundSchedule
from .session import WorkerSession, stop_all
from .warmups import CellWarmups


class FreshPairs:
    """When a cell's workers are replaced, and their replacement: loaded and warmed up."""

    def __init__(
        self,
        context: CellContext,
        cell: Cell,
        schedule: RoundSchedule,
        workers: list[WorkerSession],
        warmups: CellWarmups,
        cell_stop: CellStop,
        deadline: float,
    ) -> None:
        self.context, self.exp, self.cell, self.schedule = context, context.exp, cell, schedule
        self.workers, self.warmups, self.cell_stop, self.deadline = (
            workers, warmups, cell_stop, deadline
        )  # fmt: skip
        self.on = len({worker.build.name for worker in workers}) > 1
        self.started = 0  # the fresh pairs started so far (the cell's first pair is not one)

    def due(self, rounds: int) -> bool:
        """Whether the pair has run its rounds after `rounds` rounds (a fresh pair is due)."""
        stop = self.cell_stop
        return self.on and stop.pairs_started(rounds + 1) > stop.pairs_started(rounds)

    def start(self) -> None:
        """Fresh workers in place of the cell's (the list the runner stops), loaded and warmed
        up, so the next rounds come from other processes."""
        label = f"{self.cell.model.label} {self.cell.workload.label}"
        self.context.progress.update(f"{label}: fresh workers")
        began = time.monotonic()
        stop_all(self.workers)
        stop_s = time.monotonic() - began
        self.started += 1
        self.workers[:] = self.context.workers.start(self.cell.model, self.schedule, self.started)
        self.context.findings.workers_started(self.cell.model.key, self.workers)
        for worker in self.workers:
            written_s = worker.loaded(self.deadline, self.exp.timeout_s).written_s
            self.context.time.add(ONE_TIME, written_s)  # a preset's weights written, once
        self.warmups.run(fresh=True)
        self.cell_stop.fresh_pair_took(time.monotonic() - began, stop_s)
