"""`schedule: auto` weighed on a cell's first timed rounds (analysis.schedule_gain, issue 76): the
schedules take turns on the cell's two workers, each into a `CellStop` of its own, until the
duet's gain in precision per second is sure, the schedule to be dropped would pass its cap, or the
cell's time runs short. The cell (measure.run.cellrun) plays each round and takes the result: the
schedule kept, its rounds (which count) and what the dropped ones cost (set aside in the file)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...analysis.schedule_gain import DUET, SEQUENTIAL, ScheduleRounds, Weighing
from ...core.cell import ScheduleWeighing, WeighedSchedule
from ...core.experiment import Experiment
from ..machine.cores import move
from .cellcontext import CellContext, WeighSchedules
from .cellstop import CellStop
from .schedules import SCHEDULES
from .session import WorkerSession
from .warmups import Clocks


@dataclass(frozen=True)
class Weighed:
    """What a weighing leaves the cell: the schedule kept, its rounds and their clocks, the
    seconds the dropped rounds took, the stop record's account and the line the run prints."""

    kept: str
    stop: CellStop
    clocks: Clocks
    dropped_s: float
    record: ScheduleWeighing

    @property
    def rounds(self) -> int:
        return len(self.stop.round_times)


class CellWeighing:
    """The two schedules' rounds of one cell, by turns (Weighing.next_schedule), its workers
    placed as each round's schedule places them."""

    def __init__(
        self,
        exp: Experiment,
        builds: Sequence[str],
        weigh: WeighSchedules,
        workers: Sequence[WorkerSession],
        context: CellContext,
    ) -> None:
        self.exp, self.weigh, self.workers, self.context = exp, weigh, workers, context
        self.stops = {name: CellStop(exp, builds, None) for name in SCHEDULES}

    def run(self, play: Callable[[str, int], Clocks], time_left_s: Callable[[], float]) -> Weighed:
        """Rounds until the weighing stops: `play(schedule, index)` runs one and returns its
        trials' clocks; `time_left_s()` is what the cell may still spend. The workers are left
        placed for the schedule kept, which the run then follows (WeighSchedules.kept)."""
        clocks = dict.fromkeys(self.stops, Clocks())
        weighing = self._weighing()
        while weighing.go_on(self.weigh.cap_s) and self._fits(weighing, time_left_s()):
            name = weighing.next_schedule()
            self._place(name)
            began = time.monotonic()
            with self.context.time.phase("rounds"):
                clocks[name] += play(name, weighing.of(name).rounds)
            self.stops[name].round_took(time.monotonic() - began)
            weighing = self._weighing()
        kept = weighing.chosen
        self._place(kept)
        dropped = weighing.of(DUET if kept == SEQUENTIAL else SEQUENTIAL)
        self.weigh.kept(kept, weighing.line())
        return Weighed(
            kept, self.stops[kept], clocks[kept], sum(dropped.seconds), self._record(weighing)
        )

    def _place(self, schedule: str) -> None:
        """The workers placed as `schedule` places them (a duet: one a core; sequential: as the
        run's workers are, free or `run --pin`'s)."""
        makers = self.context.workers
        cpus = SCHEDULES[schedule].places(len(self.workers), makers.cores, makers.pinned)
        for worker, where in zip(self.workers, cpus, strict=True):
            move(worker.process.pid, where)

    def _weighing(self) -> Weighing:
        rounds = {
            name: ScheduleRounds(name, stop.round_logs(), tuple(stop.round_times))
            for name, stop in self.stops.items()
        }
        return Weighing(rounds[SEQUENTIAL], rounds[DUET], self.weigh.prior)

    def _fits(self, weighing: Weighing, left_s: float) -> bool:
        """Whether the cell's time holds the next round and as many again, and its schedule has
        not run max_rounds."""
        side = weighing.of(weighing.next_schedule())
        paces = [s.round_s for s in (weighing.sequential, weighing.duet) if s.rounds]
        next_s = side.round_s if side.rounds else max(paces, default=0.0)
        return side.rounds < self.exp.rounds and 2 * next_s < left_s

    def _record(self, weighing: Weighing) -> ScheduleWeighing:
        """The stop record's account of the weighing."""

        def side(rounds: ScheduleRounds) -> WeighedSchedule:
            sd = rounds.sd if rounds.rounds > 1 else 0.0
            pace = rounds.round_s if rounds.rounds else 0.0
            return WeighedSchedule(rounds.rounds, round(sd, 6), round(pace, 4))

        gain = weighing.gain
        return ScheduleWeighing(
            sequential=side(weighing.sequential),
            duet=side(weighing.duet),
            prior=weighing.prior,
            kept=weighing.chosen,
            cap_s=round(self.weigh.cap_s, 3),
            gain=round(gain.point, 4) if gain else None,
            gain_low=round(gain.low, 4) if gain else None,
            gain_high=round(gain.high, 4) if gain else None,
        )
