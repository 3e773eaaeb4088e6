"""One cell's work on its workers (`CellRun`): kernel facts per build, warmups (which carry the
correctness check), timed rounds, sequential or in duets (measure.run.schedule), until the cell
stops (measure.run.cellstop), then op shares; every result written as it arrives."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ...core.cell import Agreement, StopRecord, Trial
from ...core.results import ResultsWriter
from ...core.spec import MIN_AUTO_ROUNDS, Cell, Schedule, Trials
from ..job import CellShape, Command, Do, Result
from .cellstop import CellStop, RoundCosts
from .duet import pin
from .plan import variant_pairs
from .planning import CellMeasure, now_iso, sds_of
from .resume import DoneWork
from .schedule import Arm, Duet, duet_plan, round_plan
from .session import CURRENT, WorkerSession, stop_all

if TYPE_CHECKING:
    from rich.console import Console

    from ...analysis.stopping import RunBudget
    from ...core.cell import CellFields
    from ...core.header import ScheduleChoice
    from ...core.spec import Experiment, ModelSpec
    from .ledger import TimeLedger
    from .plan import RunOptions
    from .planning import RunPlanner


class RunContext(Protocol):
    """What a cell's run reads from the run around it and tells it (measure.run.runner.Runner is
    one): declared here, so the cell's module needs nothing of the runner's."""

    exp: Experiment
    options: RunOptions
    console: Console
    ledger: TimeLedger
    schedule: ScheduleChoice
    order: list[str]
    meta: dict[str, CellFields]
    planner: RunPlanner | None
    budget: RunBudget | None

    def cell_share_s(self) -> float | None: ...

    def time_left_s(self) -> float: ...

    def round_trials(self, duet: bool) -> int: ...

    def cell_finished(self) -> None: ...

    def start_workers(self, model: ModelSpec, duet: bool) -> list[WorkerSession]: ...

    def wrote_weights(self, seconds: float) -> None: ...

    def write_result(
        self,
        writer: ResultsWriter,
        cell_key: str,
        build: str,
        result: Result,
        process: int,
        side: DuetSide | None = None,
    ) -> None: ...


class CellRun:
    """One cell: kernel facts per build, warmups with the correctness check, timed rounds until the
    cell stops, depth rounds, op shares."""

    def __init__(
        self,
        runner: RunContext,
        cell: Cell,
        workers: list[WorkerSession],
        duet: bool,
        done: DoneWork,
        writer: ResultsWriter,
        update: Callable,
        load_s: float,
    ) -> None:
        self.runner, self.exp, self.cell, self.workers = runner, runner.exp, cell, workers
        self.load_s = load_s  # starting and loading this cell's workers, as a fresh pair will
        # trials: plan: what this cell's setup cost (its load only in a model's first cell), and
        # its fresh pairs
        self.load_paid, self.setup_s, self.fresh_s = 0.0, 0.0, 0.0
        self.duet = duet
        self.builds = list(dict.fromkeys(worker.build.name for worker in workers))
        self.done, self.writer, self.update = done, writer, update
        w = cell.workload
        self.shape = CellShape(cell.key, w.prompt_tokens, w.gen_tokens, w.batch)
        self.deadline = time.monotonic() + self.exp.timeout_s
        share = runner.cell_share_s()
        # The cell's deadline (timeout_s) counts from here too: a share past it would end in a
        # timeout, not a stop.
        self.target = CellStop(
            self.exp,
            self.builds,
            None if share is None else min(share, self.exp.timeout_s),
            runner.schedule.clock,
        )

    def run(self, first: bool) -> None:
        ledger = self.runner.ledger
        setup_began = time.monotonic()
        with ledger.phase("kernels"):
            for build in self.builds:
                if not self.done.has_facts(self.cell.key, build, "kernel"):
                    self._request(self._worker_of(build), Command(Do.KERNELS, self.shape))
        self._expect_costs(first, setup_began)
        rounds = 0
        reason = "the plan gives it no rounds" if self.target.planned == 0 else None
        while reason is None:
            if self._pair_served(rounds):
                fresh_began = time.monotonic()
                with ledger.phase("fresh pairs"):
                    self._fresh_workers()
                self.fresh_s += time.monotonic() - fresh_began
            began = time.monotonic()
            with ledger.phase("rounds"):
                self._round(rounds, warmup=False)
            self.target.round_took(time.monotonic() - began)
            rounds += 1
            reason = self.target.stop_reason(rounds)
            quiet = self.runner.options.quiet
            if rounds == MIN_AUTO_ROUNDS and self.exp.trials.adaptive and not quiet:
                self.runner.console.print(
                    f"{self.cell.model.label} {self.cell.workload.label}: "
                    f"{self.target.plan_line(rounds)}",
                    highlight=False,
                )
        self.update(
            f"{self.cell.model.label} {self.cell.workload.label}: {reason}",
            drop=(self.exp.rounds - rounds) * self.runner.round_trials(self.duet),
        )
        forecasts = self.target.forecasts(rounds)
        self.writer.write(
            StopRecord(
                cell=self.runner.meta[self.cell.key],
                rounds=rounds,
                reason=reason,
                schedule=Schedule.DUET if self.duet else Schedule.SEQUENTIAL,
                half_width_pct=self.target.half_widths(),
                round_s=self.target.round_s(rounds),
                undecided=forecasts,
            )
        )
        self.runner.cell_finished()
        # Op shares explain a Δ; where the budget left rows undecided, their time went to rounds
        # instead.
        self.shares_wanted = not (forecasts and self.runner.budget)
        rounds_ended = time.monotonic()
        with ledger.phase("shares"):
            self._after_rounds(rounds, first)
        if self.runner.planner and rounds:
            self.runner.planner.measured(
                self.cell, self._measure(rounds, time.monotonic() - rounds_ended)
            )

    def _after_rounds(self, rounds: int, first: bool) -> None:
        """Depth rounds and op shares."""
        # One depth curve per model: it depends on the KV depth, not on the workload's prompt
        # length.
        if self.exp.depths and first:
            for r in range(rounds):
                for build, variant in round_plan(self.runner.order, self.builds, r):
                    if not self.done.has_depth(self.cell.key, build, variant, r):
                        self._request(
                            self._worker_of(build),
                            Command(Do.DEPTH, self.shape, variant, r, depths=self.exp.depths),
                        )
        self._shares()

    def _worker_of(self, build: str) -> WorkerSession:
        """The (first) worker of a build: the one that answers a build's single commands."""
        return next(worker for worker in self.workers if worker.build.name == build)

    def _warmups(self, fresh: bool = False) -> tuple[float, float | None]:
        """The experiment's warmup rounds; in a duet of variants twice as many, so each worker has
        run every variant before the timed rounds (the workers swap variants every round). The
        first (the first two in such a duet) carry the correctness check, so a cell warms up at
        least once; a fresh pair's warm-ups check nothing. Returns their seconds and the last
        one's: the pace of a round once every variant has compiled."""
        twice = self.duet and len(self.builds) == 1
        unchecked = set() if fresh else self._unchecked_builds()
        warmups = max(self.exp.warmup, 1 if unchecked else 0)
        checking = 2 if twice else 1
        began = time.monotonic()
        last = None
        for w in range(warmups * (2 if twice else 1)):
            started = time.monotonic()
            check = unchecked if w < checking else set()
            # a resumed cell without its check runs its check rounds again: the fresh worker
            # holds none of the logits its trials had
            self._round(w, warmup=True, fresh=fresh or bool(check), check=check)
            last = time.monotonic() - started
        return time.monotonic() - began, last

    def _unchecked_builds(self) -> set[str]:
        """The builds whose correctness this cell has not recorded yet (all, but on --resume)."""
        return {b for b in self.builds if not self.done.has_facts(self.cell.key, b, "correctness")}

    def _expect_costs(self, first: bool, setup_began: float) -> None:
        """The warm-ups, then what the rounds will cost (CellStop.expect): the last warm-up round's
        pace, once every variant has compiled, and a fresh pair at this pair's load and warm-up;
        with trials: budget or plan the rounds are fixed from them now, before the first."""
        with self.runner.ledger.phase("warm-up"):
            warmup_s, round_s = self._warmups()
        paired = len(self.workers) > 1
        fresh_pair_s = self.load_s + warmup_s if paired else 0.0
        self.target.expect(RoundCosts(round_s or 0.0, fresh_pair_s))
        if round_s is None:
            return
        if self.exp.trials is Trials.PLAN:
            self.load_paid = self.load_s if first else 0.0
            self.setup_s = time.monotonic() - setup_began
            self._fix_by_plan(round_s, fresh_pair_s if paired else 0.0)
        elif self.exp.trials is Trials.BUDGET:
            self._fix_by_budget(round_s, paired, fresh_pair_s)

    def _fix_by_budget(self, round_s: float, paired: bool, fresh_pair_s: float) -> None:
        """trials: budget: this cell's rounds, as many as its share of the budget holds at the
        warm-up's pace."""
        rounds = self.target.fix_rounds()
        if not self.runner.options.quiet:
            pairs = (
                f", a fresh worker pair every {self.exp.worker_rounds} at {fresh_pair_s:.1f} s"
                if paired and self.exp.worker_rounds
                else ""
            )
            self.runner.console.print(
                f"{self.cell.model.label} {self.cell.workload.label}: {rounds} timed rounds, "
                f"fixed from the budget (a warm-up round took {round_s:.1f} s{pairs}; "
                f"{self.target.time_left_s():.0f} s of this cell's share left)",
                highlight=False,
            )

    def _fix_by_plan(self, round_s: float, fresh_pair_s: float) -> None:
        """trials: plan: this cell's rounds, fixed now from the plan of what is left (a fresh pair's
        cost spread over the rounds it serves)."""
        planner = self.runner.planner
        assert planner is not None
        every = self.exp.worker_rounds
        pace = round_s + (fresh_pair_s / every if fresh_pair_s and every else 0.0)
        planned_before = planner.plan is not None
        rounds, share = planner.fix(
            self.cell, self.load_paid, self.setup_s, pace, self.runner.time_left_s()
        )
        self.target.planned = rounds
        self.target.limit_to(min(share, self.deadline - time.monotonic()))
        if self.runner.options.quiet:
            return
        if not planned_before and planner.plan is not None:
            self.runner.console.print(
                planner.line(planner.plan, self.runner.time_left_s()), highlight=False
            )
        said = (
            f"{rounds} timed rounds, fixed by the plan (a warm-up round took {round_s:.1f} s)"
            if rounds
            else "no timed rounds: " + planner.needs(self.cell.key)
        )
        self.runner.console.print(
            f"{self.cell.model.label} {self.cell.workload.label}: {said}", highlight=False
        )

    def _measure(self, rounds: int, after_s: float) -> CellMeasure:
        """What this cell cost and how its rows scattered: the plans after it start from it."""
        planner = self.runner.planner
        assert planner is not None
        work = planner.work[self.cell.key]
        times = self.target.round_times
        return CellMeasure(
            load_s=self.load_paid,
            warmup_s=self.setup_s,
            warmups=work.warmups,
            # a fresh pair's cost spread over the rounds, as the plan spends it
            round_s=(sum(times) + self.fresh_s) / len(times) if times else 0.0,
            after_s=after_s,
            weight_bytes=work.weight_bytes,
            round_flops=work.round_flops,
            round_bytes=work.round_bytes,
            sds=sds_of(self.target.row_sds()),
            measured_at=now_iso(),
        )

    def _shares(self) -> None:
        """Each switchable op's time in a prefill and a decode step of this cell, for the expected
        Δ. The current build only: its ops are the variants' (a reference build's may differ, and
        may not know the command)."""
        if CURRENT.name not in self.builds:
            return
        if not self.shares_wanted and self.exp.shares:
            self.runner.console.print(
                f"{self.cell.model.label} {self.cell.workload.label}: op shares skipped: "
                "rows are undecided, and the budget went to their rounds",
                highlight=False,
            )
            return
        for r in range(self.exp.shares):
            if not self.done.has_share(self.cell.key, r):
                self.update(
                    f"{self.cell.model.label} {self.cell.workload.label}: op shares, round {r + 1}"
                )
                self._request(
                    self._worker_of(CURRENT.name), Command(Do.SHARES, self.shape, round=r)
                )

    def _pair_served(self, rounds: int) -> bool:
        """Whether a pair of workers (two builds', or a duet's) has run its worker_rounds (a fresh
        pair is due)."""
        due = self.exp.fresh_pairs(rounds + 1) > self.exp.fresh_pairs(rounds)
        return len(self.workers) > 1 and due

    def _fresh_workers(self) -> None:
        """Fresh workers, loaded and warmed up, so the next rounds come from other processes."""
        self.update(f"{self.cell.model.label} {self.cell.workload.label}: fresh workers")
        began = time.monotonic()
        stop_all(self.workers)
        stop_s = time.monotonic() - began
        # in place: the runner stops these
        self.workers[:] = self.runner.start_workers(self.cell.model, self.duet)
        for worker in self.workers:
            self.runner.wrote_weights(worker.loaded(self.deadline, self.exp.timeout_s).written_s)
        self._warmups(fresh=True)
        self.target.fresh_pair_took(time.monotonic() - began, stop_s)

    @property
    def process(self) -> int:
        """The label of the worker processes now running: the first worker's process id."""
        return self.workers[0].process.pid

    def _round(
        self, index: int, *, warmup: bool, fresh: bool = False, check: set[str] | None = None
    ) -> None:
        """One round of the cell's trials; on the builds in `check`, warm-up trials that carry the
        correctness check."""
        check = check or set()
        if self.duet:
            self._duet_round(index, warmup=warmup, fresh=fresh, check=check)
            return
        for build, variant in round_plan(self.runner.order, self.builds, index):
            if not fresh and self.done.has_trial(self.cell.key, build, variant, warmup, index):
                continue
            command = Command(Do.TRIAL, self.shape, variant, index, warmup, check=build in check)
            for trial in self._request(self._worker_of(build), command):
                self._took(build, trial, index, warmup)

    def _duet_round(self, index: int, *, warmup: bool, fresh: bool, check: set[str]) -> None:
        """Each duet of the round: both arms' trials sent together, then both collected. A build's
        check runs on its first worker, which has run every variant after two such rounds."""
        cores = self.runner.schedule.cores or (0, 1)
        pairs = variant_pairs(self.exp)
        for duet in duet_plan(self.runner.order, self.builds, pairs, index, cores):
            arms = [arm for arm in duet.arms if fresh or not self._recorded(arm, duet, warmup)]
            if len(self.builds) == 2:  # the builds' workers swap cores every round
                for arm, core in zip(duet.arms, duet.cores, strict=True):
                    pin(self.workers[arm.worker].process.pid, core)
            commands = [
                Command(
                    Do.TRIAL,
                    self.shape,
                    arm.variant,
                    duet.round,
                    warmup,
                    check=arm.build in check
                    and self.workers[arm.worker] is self._worker_of(arm.build),
                )
                for arm in arms
            ]
            for arm, command in zip(arms, commands, strict=True):
                self.workers[arm.worker].send(command)
            for arm, command in zip(arms, commands, strict=True):
                other = next(a for a in duet.arms if a is not arm)
                side = DuetSide(f"{other.build}/{other.variant}", duet.cores[duet.arms.index(arm)])
                for result in self._collect(self.workers[arm.worker], command, side):
                    self._took(arm.build, result, duet.round, warmup)

    def _recorded(self, arm: Arm, duet: Duet, warmup: bool) -> bool:
        """Whether a resumed run's file already holds this arm's trial."""
        return self.done.has_trial(self.cell.key, arm.build, arm.variant, warmup, duet.round)

    def _took(self, build: str, result: Result, index: int, warmup: bool) -> None:
        if isinstance(result, Trial):
            self.target.add(build, result, self.process)
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
            self.runner.write_result(self.writer, self.cell.key, build, result, self.process, side)
            if isinstance(result, Agreement) and not result.passed:
                self.runner.console.print(
                    f"[red]correctness[/]: {result.variant} differs from {result.reference} on "
                    f"{self.cell.key} ({build} build): max |Δlogit| {result.max_abs_err:.3g} > "
                    f"{result.atol:.3g}"
                )
        return results


@dataclass(frozen=True)
class DuetSide:
    """What a duet trial's record adds: the arm that ran beside it ("build/variant") and the core
    it ran on."""

    beside: str
    core: int
