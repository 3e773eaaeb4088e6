"""One cell's work on its workers (`CellRun`): kernel facts per build, warmups (which carry the
correctness check), timed rounds as its schedule lays them out (measure.run.schedules), until the
cell stops (measure.run.cellstop), then op shares; every result written as it arrives. It reads
the run around it through a `CellContext`, never the runner."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...core.cell import Agreement, ShareTime, StopRecord, Trial
from ...core.experiment import MIN_AUTO_ROUNDS, Cell, Trials
from ..job import CellShape, Command, Do, Result
from .cellstop import CellStop, RoundCosts
from .findings import DuetSide, Findings
from .jobs import variant_pairs
from .planning import CachedShares, CellMeasure, CellSetup, now_iso, sds_of
from .resume import DoneWork
from .schedules.base import Arm, Round, RoundSchedule, Step, place, send_step
from .schedules.sequential import round_plan
from .session import CURRENT, WorkerMaker, WorkerSession, stop_all

if TYPE_CHECKING:
    from rich.console import Console

    from ...core.experiment import Experiment
    from .ledger import RunTime
    from .planning import RunPlanner
    from .progress import RunProgress


@dataclass(frozen=True)
class CellContext:
    """What a cell's run needs of the run around it, and no more: where its findings go, the run's
    time and budget, how fresh workers start."""

    exp: Experiment
    findings: Findings
    time: RunTime
    workers: WorkerMaker
    order: tuple[str, ...]  # the variants in a round's order (schedules.base.centre_order)
    planner: RunPlanner | None  # trials: plan
    progress: RunProgress
    console: Console
    quiet: bool  # --quiet: only warnings and errors on the console


@dataclass(frozen=True)
class Clocks:
    """Trials' own prefill and generation seconds, summed."""

    prefill_s: float = 0.0
    gen_s: float = 0.0

    @classmethod
    def of(cls, trial: Trial) -> Clocks:
        return cls(trial.measured.prefill_s, trial.measured.gen_s or 0.0)

    def __add__(self, other: Clocks) -> Clocks:
        return Clocks(self.prefill_s + other.prefill_s, self.gen_s + other.gen_s)


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
        # trials: plan: what this cell's setup cost (its load only in a model's first cell), and
        # its fresh pairs
        self.load_paid, self.setup_s, self.fresh_s = 0.0, 0.0, 0.0
        # the timed rounds' trials' own prefill and generation seconds, summed: how a round splits
        # between FLOPs and bytes, which scales it to the cells not measured yet
        self.timed_clocks = Clocks()
        self.timed_shares: CachedShares | None = None  # op shares this run timed, for the cache
        self.shares_s = 0.0  # the seconds they took
        self.shares_skipped: str | None = None  # why this cell times no op shares, once it knows
        self.schedule = schedule
        self.builds = list(dict.fromkeys(worker.build.name for worker in workers))
        self.pairs = variant_pairs(self.exp)
        self.round_trials = schedule.round_trials(context.order, self.builds, self.pairs)
        self.done, self.update = done, context.progress.update
        w = cell.workload
        self.shape = CellShape(cell.key, w.prompt_tokens, w.gen_tokens, w.batch)
        # A warm-up runs a round's prefill and the decode steps the correctness check reads (one
        # at least, so the decode path is warm as well): a round's further steps warm nothing.
        checked = max(2, self.exp.correctness.tokens)
        self.warmup_shape = replace(self.shape, gen_tokens=min(w.gen_tokens, checked))
        self.deadline = time.monotonic() + self.exp.timeout_s
        share = context.time.cell_share_s()
        # The cell's deadline (timeout_s) counts from here too: a share past it would end in a
        # timeout, not a stop.
        self.cell_stop = CellStop(
            self.exp,
            self.builds,
            None if share is None else min(share, self.exp.timeout_s),
        )

    def _say(self, text: str) -> None:
        if not self.context.quiet:
            self.context.console.print(text, highlight=False)

    def run(self, first: bool) -> None:
        ledger = self.context.time.ledger
        setup_began = time.monotonic()
        with ledger.phase("kernels"):
            for build in self.builds:
                if not self.done.has_facts(self.cell.key, build, "kernel"):
                    self._request(self._worker_of(build), Command(Do.KERNELS, self.shape))
        self._expect_costs(first, setup_began)
        rounds = 0
        reason = "the plan gives it no rounds" if self.cell_stop.planned == 0 else None
        while reason is None:
            if self._pair_served(rounds):
                fresh_began = time.monotonic()
                with ledger.phase("fresh pairs"):
                    self._fresh_workers()
                self.fresh_s += time.monotonic() - fresh_began
            began = time.monotonic()
            with ledger.phase("rounds"):
                self.timed_clocks += self._round(rounds, warmup=False)
            self.cell_stop.round_took(time.monotonic() - began)
            rounds += 1
            reason = self.cell_stop.stop_reason(rounds)
            if rounds == MIN_AUTO_ROUNDS and self.exp.trials.adaptive:
                self._say(
                    f"{self.cell.model.label} {self.cell.workload.label}: "
                    f"{self.cell_stop.plan_line(rounds)}"
                )
        self.update(
            f"{self.cell.model.label} {self.cell.workload.label}: {reason}",
            drop=(self.exp.rounds - rounds) * self.round_trials,
        )
        forecasts = self.cell_stop.forecasts(rounds)
        self.context.findings.write(
            StopRecord(
                cell=self.context.findings.meta[self.cell.key],
                rounds=rounds,
                reason=reason,
                schedule=self.schedule.name,
                half_width_pct=self.cell_stop.half_widths(),
                round_s=self.cell_stop.round_s(rounds),
                undecided=forecasts,
            )
        )
        self.context.time.cell_finished()
        # Op shares explain a Δ: not without timed rounds to weigh them against, and where the
        # budget left rows undecided their time went to rounds instead.
        self.shares_skipped = (
            "no timed rounds to weigh them against"
            if not rounds
            else "rows are undecided, and the budget went to their rounds"
            if forecasts and self.context.time.budget
            else None
        )
        rounds_ended = time.monotonic()
        with ledger.phase("shares"):
            self._after_rounds(rounds, first)
        if self.context.planner and rounds:
            after_s = time.monotonic() - rounds_ended - self.shares_s
            self.context.planner.measured(self.cell, self._measure(rounds, after_s))

    def _after_rounds(self, rounds: int, first: bool) -> None:
        """Depth rounds and op shares."""
        # One depth curve per model: it depends on the KV depth, not on the workload's prompt
        # length.
        if self.exp.depths and first:
            for r in range(rounds):
                for build, variant in round_plan(self.context.order, self.builds, r):
                    if not self.done.has_depth(self.cell.key, build, variant, r):
                        self._request(
                            self._worker_of(build),
                            Command(Do.DEPTH, self.shape, variant, r, depths=self.exp.depths),
                        )
        self._shares()

    def _worker_of(self, build: str) -> WorkerSession:
        """The (first) worker of a build: the one that answers a build's single commands."""
        return next(worker for worker in self.workers if worker.build.name == build)

    def _warmups(
        self, fresh: bool = False, settle: bool = False
    ) -> tuple[float, float | None, Clocks]:
        """The experiment's warmup rounds, each as many rounds as the schedule says (a duet of
        variants: two, so each worker has run every variant before the timed rounds). The first
        (the first two in such a duet) carry the correctness check, so a cell warms up at least
        once; a fresh pair's warm-ups check nothing. `settle`: as many again, whose seconds stand
        for the first's (a machine's first run compiles its kernels there, once: the plan's pace
        must come from a round that does not). Returns their seconds and the last one's: the pace
        of a round once every variant has compiled, and its trials' clocks, both with the decode
        steps a warm-up leaves out added at its own decode pace (`_as_round`)."""
        checking = self.schedule.warmup_rounds(self.builds)
        unchecked = set() if fresh else self._unchecked_builds()
        warmups = max(self.exp.warmup, 1 if unchecked else 0)
        began = time.monotonic()
        last, clocks, compiled_at = None, Clocks(), began
        for w in range(warmups * checking + (checking if settle and warmups else 0)):
            if w == checking and settle:
                compiled_at = time.monotonic()
            started = time.monotonic()
            check = unchecked if w < checking else set()
            # a resumed cell without its check runs its check rounds again: the fresh worker
            # holds none of the logits its trials had
            clocks = self._round(w, warmup=True, fresh=fresh or bool(check), check=check)
            last = time.monotonic() - started
        if last is None:
            return time.monotonic() - compiled_at, None, clocks
        round_s, clocks = self._as_round(last, clocks)
        return time.monotonic() - compiled_at, round_s, clocks

    def _as_round(self, warmup_s: float, clocks: Clocks) -> tuple[float, Clocks]:
        """A warm-up round's time and clocks as a timed round's: its decode steps scaled to the
        round's count."""
        steps, warm_steps = self.shape.gen_tokens - 1, self.warmup_shape.gen_tokens - 1
        if not warm_steps or steps == warm_steps:
            return warmup_s, clocks
        extra_s = clocks.gen_s * (steps / warm_steps - 1)
        return warmup_s + extra_s, Clocks(clocks.prefill_s, clocks.gen_s + extra_s)

    def _unchecked_builds(self) -> set[str]:
        """The builds whose correctness this cell has not recorded yet (all, but on --resume)."""
        return {b for b in self.builds if not self.done.has_facts(self.cell.key, b, "correctness")}

    def _expect_costs(self, first: bool, setup_began: float) -> None:
        """The warm-ups, then what the rounds will cost (CellStop.expect): the last warm-up round's
        pace, once every variant has compiled, and a fresh pair at this pair's load and warm-up;
        with trials: budget or plan the rounds are fixed from them now, before the first."""
        kernels_s = time.monotonic() - setup_began
        planner = self.context.planner
        with self.context.time.ledger.phase("warm-up"):
            warmup_s, round_s, clocks = self._warmups(
                settle=planner is not None and not planner.measured_any()
            )
        paired = self._fresh_pairs
        fresh_pair_s = self.load_s + warmup_s if paired else 0.0
        self.cell_stop.expect(RoundCosts(round_s or 0.0, fresh_pair_s))
        if round_s is None:
            return
        if self.exp.trials is Trials.PLAN:
            self.load_paid = self.load_s if first else 0.0
            self.setup_s = kernels_s + warmup_s
            self._fix_by_plan(round_s, clocks, fresh_pair_s if paired else 0.0)
        elif self.exp.trials is Trials.BUDGET:
            self._fix_by_budget(round_s, paired, fresh_pair_s)

    def _fix_by_budget(self, round_s: float, paired: bool, fresh_pair_s: float) -> None:
        """trials: budget: this cell's rounds, as many as its share of the budget holds at the
        warm-up's pace."""
        rounds = self.cell_stop.fix_rounds()
        pairs = (
            f", a fresh worker pair every {self.exp.worker_rounds} at {fresh_pair_s:.1f} s"
            if paired and self.exp.worker_rounds
            else ""
        )
        self._say(
            f"{self.cell.model.label} {self.cell.workload.label}: {rounds} timed rounds, "
            f"fixed from the budget (a warm-up round took {round_s:.1f} s{pairs}; "
            f"{self.cell_stop.time_left_s():.0f} s of this cell's share left)"
        )

    def _fix_by_plan(self, round_s: float, clocks: Clocks, fresh_pair_s: float) -> None:
        """trials: plan: this cell's rounds, fixed now from the plan of what is left (a fresh pair's
        cost spread over the rounds it serves)."""
        planner = self.context.planner
        assert planner is not None
        every = self.exp.worker_rounds
        pace = round_s + (fresh_pair_s / every if fresh_pair_s and every else 0.0)
        planned_before = planner.plan is not None
        setup = CellSetup(self.load_paid, self.setup_s, pace, clocks.prefill_s, clocks.gen_s)
        rounds, share = planner.fix(self.cell, setup, self.context.time.time_left_s())
        self.cell_stop.planned = rounds
        self.cell_stop.limit_to(min(share, self.deadline - time.monotonic()))
        spent_s = self.context.time.spent_s()
        if planner.plan is not None and (not planned_before or planner.moved(spent_s)):
            self._say(planner.line(planner.plan, spent_s))
        said = (
            f"{rounds} timed rounds, fixed by the plan (a warm-up round took {round_s:.1f} s)"
            if rounds
            else "no timed rounds: " + planner.needs(self.cell.key)
        )
        self._say(f"{self.cell.model.label} {self.cell.workload.label}: {said}")

    def _measure(self, rounds: int, after_s: float) -> CellMeasure:
        """What this cell cost and how its rows scattered: the plans after it start from it."""
        planner = self.context.planner
        assert planner is not None
        work = planner.work[self.cell.key]
        times = self.cell_stop.round_times
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
            prefill_bytes=work.prefill_bytes,
            prefill_s=self.timed_clocks.prefill_s / len(times) if times else 0.0,
            gen_s=self.timed_clocks.gen_s / len(times) if times else 0.0,
            sds=sds_of(self.cell_stop.row_sds()),
            measured_at=now_iso(),
            shares_s=self.shares_s,
            shares=self.timed_shares,
        )

    def _shares(self) -> None:
        """Each switchable op's time in a prefill and a decode step of this cell, for the expected
        Δ: an earlier run's here where it timed the same code (they cost nothing), else timed now
        unless the rows are undecided. The current build only: its ops are the variants' (a
        reference build's may differ, and may not know the command)."""
        if CURRENT.name not in self.builds:
            return
        planner = self.context.planner
        cached = planner.reusable_shares(self.cell) if planner else None
        if cached is not None and not self.done.has_share(self.cell.key, 0):
            self.context.findings.reused_shares(self.cell.key, cached.samples, cached.measured_at)
            self._say(
                f"{self.cell.model.label} {self.cell.workload.label}: op shares as timed here at "
                f"{cached.measured_at[:16]} (the same commit, mlx and BLAS threads): their "
                "seconds went to rounds"
            )
        elif self.shares_skipped and self.exp.shares:
            self._say(
                f"{self.cell.model.label} {self.cell.workload.label}: op shares skipped: "
                f"{self.shares_skipped}"
            )
        else:
            self._time_shares()

    def _time_shares(self) -> None:
        """The experiment's op-share rounds, kept for later runs' plans (trials: plan)."""
        began, samples = time.monotonic(), []
        for r in range(self.exp.shares):
            if not self.done.has_share(self.cell.key, r):
                self.update(
                    f"{self.cell.model.label} {self.cell.workload.label}: op shares, round {r + 1}"
                )
                samples += self._request(
                    self._worker_of(CURRENT.name), Command(Do.SHARES, self.shape, round=r)
                )
        timed = tuple(sample for sample in samples if isinstance(sample, ShareTime))
        if self.context.planner and timed:
            self.shares_s = time.monotonic() - began
            self.timed_shares = CachedShares(timed, self.context.planner.code, now_iso())

    @property
    def _fresh_pairs(self) -> bool:
        """Whether this cell's rounds come from fresh worker pairs every worker_rounds: two
        builds' workers only. A duet of one build's variants keeps its pair: each worker runs both
        variants in turn, and the committed duet runs show no offset between pairs
        (benchmarks/duet_fresh_pairs.py, results/duet-fresh-pairs)."""
        return len(self.builds) > 1

    def _pair_served(self, rounds: int) -> bool:
        """Whether two builds' pair of workers has run its worker_rounds (a fresh pair is due)."""
        due = self.exp.fresh_pairs(rounds + 1) > self.exp.fresh_pairs(rounds)
        return self._fresh_pairs and due

    def _fresh_workers(self) -> None:
        """Fresh workers, loaded and warmed up, so the next rounds come from other processes."""
        self.update(f"{self.cell.model.label} {self.cell.workload.label}: fresh workers")
        began = time.monotonic()
        stop_all(self.workers)
        stop_s = time.monotonic() - began
        # in place: the runner stops these
        self.workers[:] = self.context.workers.start(self.cell.model, self.schedule)
        for worker in self.workers:
            written_s = worker.loaded(self.deadline, self.exp.timeout_s).written_s
            self.context.time.wrote_weights(written_s)
        self._warmups(fresh=True)
        self.cell_stop.fresh_pair_took(time.monotonic() - began, stop_s)

    @property
    def process(self) -> int:
        """The label of the worker processes now running: the first worker's process id."""
        return self.workers[0].process.pid

    def _round(
        self, index: int, *, warmup: bool, fresh: bool = False, check: set[str] | None = None
    ) -> Clocks:
        """One round of the cell's trials, step by step as the schedule lays it out; on the builds
        in `check`, warm-up trials that carry the correctness check (on a build's first worker,
        which in a duet of variants has run every variant after two such rounds). Returns its
        trials' clocks."""
        check = check or set()
        clocks = Clocks()
        at = Round(index, self.context.order, self.builds, self.pairs, self.context.workers.cores)
        for step in self.schedule.steps(at):
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
        shape = self.warmup_shape if warmup else self.shape
        return Command(Do.TRIAL, shape, arm.variant, index, warmup, check=checks)

    def _took(self, build: str, result: Result, index: int, warmup: bool) -> None:
        if isinstance(result, Trial):
            self.cell_stop.add(build, result, self.process)
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
            self.context.findings.found(self.cell.key, build, result, self.process, side)
            if isinstance(result, Agreement) and not result.passed:
                self.context.console.print(
                    f"[red]correctness[/]: {result.variant} differs from {result.reference} on "
                    f"{self.cell.key} ({build} build): max |Δlogit| {result.max_abs_err:.3g} > "
                    f"{result.atol:.3g}"
                )
        return results


def _side(step: Step, arm: Arm) -> DuetSide | None:
    """What a trial run beside another records of it: that arm, and the core this one ran on."""
    if len(step.arms) < 2 or step.cores is None:
        return None
    index = step.arms.index(arm)
    other = step.arms[1 - index]
    return DuetSide(f"{other.build}/{other.variant}", step.cores[index])
