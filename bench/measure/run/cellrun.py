"""One cell's work on its workers (`CellRun`): kernel facts per build, its warm-ups
(measure.run.warmups, which carry the correctness check), timed rounds as its schedule lays them
out (measure.run.schedules), fixed before the first where the rule says so (measure.run.fixing),
with fresh worker pairs between builds (measure.run.freshpairs), until the cell stops
(measure.run.cellstop), then depth rounds and op shares (measure.run.cellshares); every result
written as it arrives. It reads the run around it through a `CellContext`, never the runner."""

from __future__ import annotations

import time

from ...core.cell import Agreement, ScheduleWeighing, Trial
from ...core.experiment import MIN_AUTO_ROUNDS, Cell
from ..job import CellShape, Command, Do, Result
from .cellcontext import CellContext
from .cellshares import CellShares
from .cellstop import CellStop, RoundCosts
from .cellweighing import CellWeighing
from .findings import DuetSide
from .fixing import RoundFixing
from .freshpairs import FreshPairs
from .jobs import variant_pairs
from .resume import DoneWork
from .schedules import SCHEDULES
from .schedules.base import Arm, Round, RoundSchedule, Step, place, send_step
from .schedules.sequential import round_plan
from .session import WorkerSession
from .warmups import CellWarmups, Clocks


class CellRun:
    """One cell: kernel facts per build, warmups with the correctness check, timed rounds until the
    cell stops, depth rounds, op shares."""

    def __init__(
        self,
        context: CellContext,
        cell: Cell,
        schedule: RoundSchedule,
        workers: list[WorkerSession],
        done: DoneWork,
        load_s: float,
    ) -> None:
        self.context, self.exp, self.cell, self.workers = context, context.exp, cell, workers
        self.load_s = load_s  # starting and loading this cell's workers, as a fresh pair will
        # the timed rounds' trials' own prefill and generation seconds, summed: how a round splits
        # between FLOPs and bytes, which scales it to the cells not measured yet
        self.timed_clocks = Clocks()
        self.schedule = schedule
        self.builds = list(dict.fromkeys(worker.build.name for worker in workers))
        self.pairs = variant_pairs(self.exp)
        self.round_trials = schedule.round_trials(context.order, self.builds, self.pairs)
        self.done, self.update = done, context.progress.update
        w = cell.workload
        self.shape = CellShape(cell.key, w.prompt_tokens, w.gen_tokens, w.batch)
        self.warmups = CellWarmups(
            self.exp,
            self.shape,
            warmup_rounds=schedule.warmup_rounds(self.builds),
            unchecked=lambda: {
                b for b in self.builds if not done.has_facts(cell.key, b, "correctness")
            },
            round=self._round,
        )
        self.deadline = time.monotonic() + self.exp.timeout_s
        allowance = context.time.cell_allowance_s()
        # The cell's deadline (timeout_s) counts from here too: an allowance past it would end in a
        # timeout, not a stop.
        limit = None if allowance is None else min(allowance, self.exp.timeout_s)
        self.cell_stop = CellStop(self.exp, self.builds, limit)
        self.fixing = RoundFixing(context, cell, self.cell_stop, self.deadline, self._say)
        self.fresh_pairs = FreshPairs(
            context, cell, schedule, workers, self.warmups, self.cell_stop, self.deadline
        )
        self.shares = CellShares(context, cell, self.shape, done, self._ask, self._say)
        self.weighed: ScheduleWeighing | None = None  # the stop record's account of a weighing
        self.weighing: CellWeighing | None = None  # once the schedules are weighed
        self.playing: str | None = None  # while they are: the schedule of the round now played

    def _say(self, text: str) -> None:
        if not self.context.quiet:
            self.context.console.print(text, highlight=False)

    def run(self, first: bool) -> None:
        ledger = self.context.time
        setup_began = time.monotonic()
        with ledger.phase("kernels"):
            for build in self.builds:
                if not self.done.has_facts(self.cell.key, build, "kernel"):
                    self._ask(build, Command(Do.KERNELS, self.shape))
        rounds, reason = self._expect_costs(first, setup_began)
        while reason is None:
            if self.fresh_pairs.due(rounds):
                fresh_began = time.monotonic()
                with ledger.phase("fresh pairs"):
                    self.fresh_pairs.start()
                self.fixing.fresh_s += time.monotonic() - fresh_began
            began = time.monotonic()
            with ledger.phase("rounds"):
                self.timed_clocks += self._round(rounds, warmup=False)
            self.cell_stop.round_took(time.monotonic() - began)
            rounds += 1
            reason = self.cell_stop.stop_reason(rounds)
            if reason == "planned" and self.fixing.fixed_again(rounds):
                reason = self.cell_stop.stop_reason(rounds)
            if rounds == MIN_AUTO_ROUNDS and self.exp.trials.adaptive:
                label = f"{self.cell.model.label} {self.cell.workload.label}"
                self._say(f"{label}: {self.cell_stop.plan_line(rounds)}")
        self.update(
            f"{self.cell.model.label} {self.cell.workload.label}: {reason}",
            drop=(self.exp.rounds - rounds) * self.round_trials,
        )
        meta = self.context.findings.meta[self.cell.key]
        stop = self.cell_stop.record(meta, rounds, reason, self.schedule.name, self.weighed)
        self.context.findings.write(stop)
        if self.context.spreads is not None:
            self.context.spreads.write(self.cell, self.cell_stop.row_components())
        self.context.time.cell_finished()
        self.shares.weigh(rounds, bool(stop.undecided) and self.context.time.budgeted)
        rounds_ended = time.monotonic()
        with ledger.phase("shares"):
            self._after_rounds(rounds, first)
        if self.context.planner and rounds:
            after_s = time.monotonic() - rounds_ended - self.shares.seconds
            measure = self.fixing.measure(after_s, self.timed_clocks, self.shares)
            self.context.planner.measured(self.cell, measure)

    def _after_rounds(self, rounds: int, first: bool) -> None:
        """Depth rounds and op shares."""
        # One depth curve per model: it depends on the KV depth, not on the workload's prompt
        # length.
        if self.exp.depths and first:
            for r in range(rounds):
                for build, variant in round_plan(self.context.order, self.builds, r):
                    if not self.done.has_depth(self.cell.key, build, variant, r):
                        depth = Command(Do.DEPTH, self.shape, variant, r, depths=self.exp.depths)
                        self._ask(build, depth)
        self.shares.run(self.builds)

    def _ask(self, build: str, command: Command) -> list[Result]:
        """A build's single command, answered by its first worker."""
        return self._request(self._worker_of(build), command)

    def _worker_of(self, build: str) -> WorkerSession:
        """The (first) worker of a build: the one that answers a build's single commands."""
        return next(worker for worker in self.workers if worker.build.name == build)

    def _expect_costs(self, first: bool, setup_began: float) -> tuple[int, str | None]:
        """The warm-ups, then what the rounds will cost (CellStop.expect): the last warm-up round's
        pace, once every variant has compiled, and a fresh pair at this pair's load and warm-up;
        where the run weighs the schedules, their rounds, the kept one's pace replacing it; with
        trials: budget or plan the rounds fixed now. Returns the rounds already run (kept by the
        weighing) and why they suffice, where they do."""
        kernels_s = time.monotonic() - setup_began
        planner = self.context.planner
        with self.context.time.phase("warm-up"):
            warmup_s, round_s, clocks = self.warmups.run(
                settle=planner is not None and not planner.measured_any()
            )
        fresh_pair_s = self.load_s + warmup_s if self.fresh_pairs.on else 0.0
        self.cell_stop.expect(RoundCosts(round_s or 0.0, fresh_pair_s))
        rounds, dropped_s = self._weigh_schedules() if self.context.weigh else (0, 0.0)
        if round_s is not None:
            self.fixing.fix(
                load_s=self.load_s if first else 0.0,
                setup_s=kernels_s + warmup_s + dropped_s,
                round_s=self.cell_stop.costs.round_s if rounds else round_s,
                clocks=clocks,
                fresh_pair_s=fresh_pair_s,
                counted=rounds,
            )
        if rounds:
            return rounds, self.cell_stop.stop_reason(rounds)
        return 0, "the plan gives it no rounds" if self.cell_stop.planned == 0 else None

    def _weigh_schedules(self) -> tuple[int, float]:
        """`schedule: auto` weighed on this cell's first rounds (measure.run.cellweighing); the
        cell goes on in the schedule kept. Returns its rounds and the dropped ones' seconds."""
        weigh = self.context.weigh
        assert weigh is not None
        self.weighing = CellWeighing(self.exp, self.builds, weigh, self.workers, self.context)
        weighed = self.weighing.run(
            self._weighing_round,
            lambda: min(self.cell_stop.time_left_s(), self.deadline - time.monotonic()),
        )
        self.schedule = SCHEDULES[weighed.kept]
        self.round_trials = self.schedule.round_trials(self.context.order, self.builds, self.pairs)
        self.cell_stop.take_rounds(weighed.stop)
        self.timed_clocks += weighed.clocks
        self.weighed = weighed.record
        return weighed.rounds, weighed.dropped_s

    def _weighing_round(self, schedule: str, index: int) -> Clocks:
        self.playing = schedule
        try:
            return self._round(index, warmup=False)
        finally:
            self.playing = None

    @property
    def process(self) -> int:
        """The label of the worker processes now running: the first worker's process id."""
        return self.workers[0].process.pid

    def _round(
        self, index: int, *, warmup: bool, fresh: bool = False, check: set[str] | None = None
    ) -> Clocks:
        """One round of the cell's trials, step by step as the schedule lays it out (while the
        schedules are weighed, the one `playing`); on the builds in `check`, warm-up trials that
        carry the correctness check (on a build's first worker, which in a duet of variants has
        run every variant after two such rounds). Returns its trials' clocks."""
        check = check or set()
        clocks = Clocks()
        cores, pair = self.context.workers.cores, self.fresh_pairs.started
        at = Round(index, self.context.order, self.builds, self.pairs, cores, pair)
        fresh = fresh or self.playing is not None  # a resumed run never weighs
        for step in SCHEDULES[self.playing or self.schedule.name].steps(at):
            commands = [self._trial(arm, step.round, warmup, fresh, check) for arm in step.arms]
            place(step, self.workers)
            for arm, command in send_step(step, self.workers, commands):
                for result in self._collect(self.workers[arm.worker], command, _side(step, arm)):
                    self._took(arm.build, result, step.round, warmup)
                    if isinstance(result, Trial):
                        clocks += Clocks.of(result)
            self.context.findings.step_ended()
        return clocks

    def _trial(
        self, arm: Arm, index: int, warmup: bool, fresh: bool, check: set[str]
    ) -> Command | None:
        """The arm's trial command, or None where a resumed run's file already holds it."""
        if not fresh and self.done.has_trial(self.cell.key, arm.build, arm.variant, warmup, index):
            return None
        first = self.workers[arm.worker] is self._worker_of(arm.build)
        checks = arm.build in check and first
        shape = self.warmups.shape if warmup else self.shape
        return Command(Do.TRIAL, shape, arm.variant, index, warmup, check=checks)

    def _took(self, build: str, result: Result, index: int, warmup: bool) -> None:
        if isinstance(result, Trial):
            weighing = self.weighing
            stop = weighing.stops[self.playing] if weighing and self.playing else self.cell_stop
            stop.add(build, result, self.process)
            label = "warmup" if warmup else f"round {index + 1}"
            where = "" if len(self.builds) == 1 else f" [{build}]"
            self.update(
                f"{self.cell.model.label} {self.cell.workload.label} {result.variant}{where} "
                f"{label}",
                advance=1,
            )

    def _request(self, worker: WorkerSession, command: Command) -> list[Result]:
        worker.send(command)
        return self._collect(worker, command, None)

    def _collect(
        self, worker: WorkerSession, command: Command, side: DuetSide | None
    ) -> list[Result]:
        build = worker.build.name
        results = worker.collect(command, self.deadline, self.exp.timeout_s)
        for result in results:
            found = self.context.findings.found
            found(self.cell.key, build, result, self.process, side, schedule=self.playing)
            if isinstance(result, Agreement) and not result.passed:
                self.context.console.print(_disagreement(self.cell.key, build, result))
        return results


def _disagreement(cell: str, build: str, result: Agreement) -> str:
    """The warning a failed correctness check prints as it arrives."""
    return (
        f"[red]correctness[/]: {result.variant} differs from {result.reference} on {cell} "
        f"({build} build): max |Δlogit| {result.max_abs_err:.3g} > {result.atol:.3g}"
    )


def _side(step: Step, arm: Arm) -> DuetSide | None:
    """What a trial run beside another records of it: that arm, and the core this one ran on."""
    if len(step.arms) < 2 or step.cores is None:
        return None
    index = step.arms.index(arm)
    other = step.arms[1 - index]
    return DuetSide(f"{other.build}/{other.variant}", step.cores[index])
