"""The runner: expands an experiment into per-model work, drives one worker process per model (and
per build, with `run --against`) one trial at a time, and appends every record to the results file
as it arrives.

The runner decides the order of trials (measure.schedule) and, with `trials: auto`, when a cell has
enough rounds (`CellStop`). A model that will not fit is skipped before anything is loaded; a worker
that crashes, runs out of memory or passes the per-cell timeout costs an `error` record for that
cell, and the suite goes on with a fresh worker.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ..analysis.clocks import clocked_estimate
from ..analysis.inference import PairedEstimate
from ..analysis.stopping import Goal, Row, RunBudget, print_level
from ..core.records import (
    METRICS,
    BuildEnvironment,
    BuildFields,
    CellFields,
    Clock,
    Env,
    PluginFile,
    Stopping,
    StoredExperiment,
    cpu_clock_tps,
    new_run_id,
    run_header,
)
from ..core.results import ResultsWriter
from ..core.spec import MIN_AUTO_ROUNDS, Cell, Experiment, ModelSpec, Schedule, shard_cells
from ..present.format import format_count, format_duration
from .duet import ScheduleChoice, choose_schedule, pin
from .env import blas_warning, cache_dir, machine_key, thread_env
from .hub import with_repos_found
from .job import (
    Agreement,
    CellShape,
    Command,
    Do,
    Measured,
    Result,
    Trial,
    result_fields,
    result_kind,
)
from .load import LoadSampler, preflight
from .memory import memory_verdict, model_config
from .opcheck import check_ops_called
from .plugins import load_plugins
from .probe import probe_peaks_in, worker_environment
from .resume import DoneWork, resume_state
from .roofline import (
    CellWork,
    Peak,
    PeakProbe,
    PeakShares,
    Rates,
    achieved,
    cell_work,
    peak_for,
    percent_of_peak,
)
from .schedule import Arm, Duet, centre_order, duet_plan, round_plan
from .session import CURRENT, Build, WorkerFailed, WorkerSession, worker_job


@dataclass
class ModelJob:
    model: ModelSpec
    cells: list[Cell]
    done: DoneWork = field(default_factory=DoneWork)


@dataclass
class RunOptions:
    out: Path
    blas: str = "auto"
    quiet: bool = False
    shard: tuple[int, int] = (1, 1)
    dry_run: bool = False
    # pin workers to the cores their BLAS threads use, leaving the others to the runner and OS
    pin: bool = False
    # run --against: this build's workers run beside the current one's
    reference: Build | None = None
    current: Build = CURRENT  # another tree or environment under test (bisect, run --against-env)


def cell_meta(cell: Cell, run_id: str) -> CellFields:
    """The fields every record of a cell carries, so each line of the results file stands on its
    own."""
    m, w = cell.model, cell.workload
    return CellFields(
        run_id=run_id,
        cell=cell.key,
        model=m.source,
        model_key=m.key,
        size=m.label,
        layers=m.layers,
        dtype=m.dtype,
        quantize=m.quantize,
        prompt_tokens=w.prompt_tokens,
        gen_tokens=w.gen_tokens,
        batch=w.batch,
        workload=w.label,
    )


def plan_jobs(cells: Iterable[Cell], done: DoneWork) -> list[ModelJob]:
    jobs: dict[str, ModelJob] = {}
    for cell in cells:
        if not done.finished(cell.key):
            jobs.setdefault(cell.model.key, ModelJob(cell.model, [], done)).cells.append(cell)
    return list(jobs.values())


def comparison_pairs(
    exp: Experiment, builds: Sequence[str]
) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The ((build, variant), (build, variant)) pairs a cell's stopping rule watches: with one build
    the experiment's comparisons (or the first variant against each other one); with a reference
    build, each variant across the builds, which is what the gate judges."""
    if len(builds) > 1:
        return [((builds[1], v), (builds[0], v)) for v in exp.variants]
    return [((builds[0], a), (builds[0], b)) for a, b in variant_pairs(exp)]


@dataclass(frozen=True)
class Forecast:
    """An undecided row after some rounds: the rounds that would decide it at its present estimate
    and spread (None: none would), and what they would take at this cell's pace."""

    rounds: int | None
    seconds: float | None


_Clocked = tuple[float | None, float | None]  # a trial's metric: (wall-clock, CPU-clock tok/s)


def _on_clocks(tps: float | None, wall_s: float | None, cpu_s: float | None) -> _Clocked:
    if tps is None or wall_s is None or not cpu_s:
        return tps, None
    return tps, cpu_clock_tps(tps, wall_s, cpu_s)


class CellStop:
    """When a cell has enough rounds (analysis.stopping). With `trials: auto`: after a pilot of
    MIN_AUTO_ROUNDS rounds, every round, stop when every watched row is decided at the level the
    table prints it (Bonferroni over the table's rows, which Holm never exceeds), when no undecided
    row's decision is in reach of the rounds and time left, at max_rounds, or before a round that
    would not fit the cell's share of the run's budget. The intervals are confidence sequences, so
    stopping on a decision leaves them valid."""

    def __init__(
        self,
        exp: Experiment,
        builds: Sequence[str],
        share_s: float | None,
        clock: Clock = Clock.WALL,
    ) -> None:
        self.exp = exp
        self.clock = clock
        self.pairs = comparison_pairs(exp, builds)
        across = len(builds) > 1
        self.alpha = 1.0 - print_level(table_rows(exp, builds))
        target = exp.precision.target_pct if exp.precision else None
        # A gate row is decided against the experiment's margin as the limit (ci.yaml's 5%: check's
        # default).
        self.goal = Goal(
            exp.margin_pct, limit_pct=exp.margin_pct if across else None, target_pct=target
        )
        # (build, variant) -> round -> each metric's (wall-clock tok/s, CPU-clock tok/s)
        self.values: dict[tuple[str, str], dict[int, tuple[_Clocked, _Clocked]]] = {}
        self.process_of: dict[int, int] = {}  # round -> the worker process (pair) that ran it
        self.share_s = share_s
        self.started = time.monotonic()
        self.first_round_at: float | None = None

    def add(self, build: str, trial: Trial, process: int) -> None:
        if not trial.warmup:
            self.process_of[trial.round] = process
            measured = trial.measured
            if self.first_round_at is None:
                self.first_round_at = (
                    time.monotonic() - measured.prefill_s - (measured.gen_s or 0.0)
                )
            self.values.setdefault((build, trial.variant), {})[trial.round] = (
                _on_clocks(measured.prefill_tps, measured.prefill_s, measured.prefill_cpu_s),
                _on_clocks(measured.gen_tps, measured.gen_s, measured.gen_cpu_s),
            )

    def _estimates(self) -> dict[str, PairedEstimate]:
        estimates = {}
        for a, b in self.pairs:
            rounds = sorted(set(self.values.get(a, {})) & set(self.values.get(b, {})))
            if len(rounds) < 2:
                continue
            for i, metric in enumerate(METRICS):
                base, base_cpu = zip(*(self.values[a][r][i] for r in rounds), strict=True)
                new, new_cpu = zip(*(self.values[b][r][i] for r in rounds), strict=True)
                if None not in base and None not in new:
                    label = f"{'/'.join(b)} vs {'/'.join(a)} {metric}".replace(
                        f"{CURRENT.name}/", ""
                    )
                    processes = [self.process_of[r] for r in rounds]
                    estimates[label] = clocked_estimate(
                        base,
                        new,
                        None if None in base_cpu else base_cpu,
                        None if None in new_cpu else new_cpu,
                        self.clock,
                        processes=processes,
                        fixed_rounds=self.exp.precision is None,
                    ).estimate
        return estimates

    def rows(self) -> dict[str, Row]:
        return {
            label: Row(e.mean_log, e.sd_log, e.n, self.alpha, self.goal)
            for label, e in self._estimates().items()
        }

    def half_widths(self) -> dict[str, float]:
        """Each watched row's half-width in percent at the level the table prints it."""
        level = 1.0 - self.alpha
        widths = {}
        for label, est in self._estimates().items():
            low, high = est.interval(level)
            widths[label] = round((high - low) / 2.0 * 100.0, 3)
        return widths

    def round_s(self, rounds: int) -> float | None:
        if self.first_round_at is None or rounds < 1:
            return None
        return (time.monotonic() - self.first_round_at) / rounds

    def time_left_s(self) -> float:
        return (
            math.inf if self.share_s is None else self.share_s - (time.monotonic() - self.started)
        )

    def forecasts(self, rounds: int) -> dict[str, Forecast]:
        """Each undecided row's forecast (analysis.stopping, "In reach")."""
        pace = self.round_s(rounds)
        found = {}
        for label, row in self.rows().items():
            if not row.decided:
                needed = row.rounds_to_decide()
                seconds = None if needed is None or pace is None else (needed - rounds) * pace
                found[label] = Forecast(needed, seconds)
        return found

    def _in_reach(self, forecast: Forecast) -> bool:
        return (
            forecast.rounds is not None
            and forecast.rounds <= self.exp.trials
            and (forecast.seconds or 0.0) <= self.time_left_s()
        )

    def stop_reason(self, rounds: int) -> str | None:
        """Why the cell stops after `rounds` timed rounds, or None to go on."""
        if self.exp.precision is None:
            return "trials" if rounds >= self.exp.trials else None
        if rounds < MIN_AUTO_ROUNDS:
            return None
        forecasts = self.forecasts(rounds)
        if not forecasts:
            return "decided"
        if rounds >= self.exp.trials:
            return "max_rounds"
        pace = self.round_s(rounds) or 0.0
        if pace > self.time_left_s():
            return "budget"
        if not any(self._in_reach(f) for f in forecasts.values()):
            return "out of reach"
        return None

    def plan_line(self, rounds: int) -> str:
        """What the pilot says this cell can decide in its share: the first screen's early word."""
        forecasts = self.forecasts(rounds)
        rows = len(self.rows())
        pace = self.round_s(rounds)
        head = (
            f"after {rounds} rounds ({pace:.1f} s a round): "
            f"{rows - len(forecasts)} of {rows} rows decided"
            if pace
            else f"after {rounds} rounds: {rows - len(forecasts)} of {rows} rows decided"
        )
        left = self.time_left_s()
        allows = (
            (rounds + max(0, int(left // pace)))
            if pace and math.isfinite(left)
            else self.exp.trials
        )
        allows = min(allows, self.exp.trials)
        far = {label: f for label, f in forecasts.items() if not self._in_reach(f)}
        out = [f"{label} {settle_text(f)}" for label, f in far.items()]
        reach = len(forecasts) - len(out)
        beyond = (
            [
                f"out of reach (this size's share of the budget allows {allows} rounds): "
                + ", ".join(out)
            ]
            if out
            else []
        )
        more = [f.seconds for f in far.values() if f.seconds is not None]
        if more and all(f.rounds is not None for f in far.values()):
            beyond.append(
                f"about {format_duration(max(more))} more budget for this size would settle them"
            )
        return "; ".join([head, *([f"{reach} more in reach"] if reach else []), *beyond])


def settle_text(forecast: Forecast) -> str:
    """ "about 60 rounds (9 min) would settle it"."""
    if forecast.rounds is None:
        return "cannot be settled at this estimate"
    took = f" ({format_duration(forecast.seconds)} more)" if forecast.seconds is not None else ""
    return f"about {forecast.rounds} rounds{took} would settle it"


def table_rows(exp: Experiment, builds: Sequence[str]) -> int:
    """Rows of the largest table a cell's comparisons appear in: every model at this workload, both
    metrics, and with a reference build every variant plus the pooled row."""
    per_metric = len(exp.models) * ((len(exp.variants) + 1) if len(builds) > 1 else 1)
    return per_metric * len(METRICS)


class Runner:
    def __init__(
        self,
        exp: Experiment,
        options: RunOptions,
        run_id: str,
        console: Console,
        peak: Peak | None,
        env: dict[str, str],
        started: float,
        schedule: ScheduleChoice,
    ) -> None:
        self.exp = exp
        self.schedule = schedule
        self.peak = peak
        self.env = env
        self.builds = [options.current, *([options.reference] if options.reference else [])]
        self.order = centre_order(
            list(exp.variants), [(c.baseline, c.new) for c in exp.comparisons]
        )
        self.cells = {cell.key: cell for cell in exp.cells()}
        self.work: dict[str, CellWork] = {}
        self.options = options
        self.run_id = run_id
        self.console = console
        self.meta = {cell.key: cell_meta(cell, run_id) for cell in exp.cells()}
        self.above_peak: set[str] = set()
        # the highest prefill TFLOP/s and gen GB/s any trial achieved
        self.best = Rates(prefill_tflops=0.0, gen_gbps=None)
        self.budget: RunBudget | None = None  # the run's wall time, shared by its cells in turn
        self.started = started  # time.monotonic() when the run began: the budget counts from here
        self.cells_done = 0

    def run(self, jobs: list[ModelJob], writer: ResultsWriter) -> None:
        if self.exp.precision and self.exp.precision.budget_s:
            self.budget = RunBudget(
                self.exp.precision.budget_s, sum(len(job.cells) for job in jobs)
            )
        for job in jobs:
            check_ops_called(job.model, self.exp)
        cells = sum(len(job.cells) for job in jobs)
        duet = self.schedule.schedule == Schedule.DUET
        total = cells * (self.exp.trials + self.exp.warmup) * self.round_trials(duet)
        with self._progress() as progress:
            task = progress.add_task("starting", total=total)

            def update(text: str, advance: int = 0, drop: int = 0) -> None:
                progress.update(
                    task, description=text, advance=advance, total=progress.tasks[0].total - drop
                )

            for job in jobs:
                self._run_model(job, writer, update)

    def _progress(self) -> Progress:
        return Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("trials"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            disable=self.options.quiet,
            transient=False,
        )

    def round_trials(self, duet: bool) -> int:
        """Trials a round of one cell runs: every variant in every build, or in a duet of variants
        both arms of each comparison."""
        if duet and len(self.builds) == 1:
            return 2 * len(variant_pairs(self.exp))
        return len(self.exp.variants) * len(self.builds)

    def write_record(
        self, writer: ResultsWriter, cell_key: str, kind: str, fields: Mapping[str, object]
    ) -> None:
        """A record of a cell: its kind, the fields every record of the cell carries, then its
        own."""
        writer.write({"kind": kind, **self.meta[cell_key], **fields})

    def write_result(
        self,
        writer: ResultsWriter,
        cell_key: str,
        build: str,
        result: Result,
        process: int,
        side: DuetSide | None = None,
    ) -> None:
        """What a build's worker found, with a trial's roofline, the worker process (pair) that
        ran it, and in a duet the arm beside it and its core."""
        fields = {**result_fields(result), "build": build}
        if isinstance(result, Trial):
            rates, shares = self._roofline(cell_key, result.measured)
            duet = {"beside": side.beside, "core": side.core} if side else {}
            fields = {**fields, **rates.to_dict(), **shares.to_dict(), "process": process, **duet}
        self.write_record(writer, cell_key, result_kind(result), fields)

    def _work(self, cell_key: str) -> CellWork:
        if cell_key not in self.work:
            m, w = self.cells[cell_key].model, self.cells[cell_key].workload
            self.work[cell_key] = cell_work(
                model_config(m),
                w.prompt_tokens,
                w.gen_tokens,
                w.batch,
                dtype=m.dtype,
                quantize=m.quantize,
            )
        return self.work[cell_key]

    def _roofline(self, cell_key: str, measured: Measured) -> tuple[Rates, PeakShares]:
        """Achieved TFLOP/s and GB/s of a trial, and their share of this machine's peak."""
        rates = achieved(measured.prefill_s, measured.gen_s, self._work(cell_key))
        shares = percent_of_peak(rates, self.peak, self.cells[cell_key].model.dtype)
        self.above_peak.update(shares.above_peak)
        self.best = self.best.highest(rates)
        return rates, shares

    def cell_share_s(self) -> float | None:
        if self.budget is None:
            return None
        return self.budget.share_s(time.monotonic() - self.started, self.cells_done)

    def cell_finished(self) -> None:
        self.cells_done += 1

    def _close_cells(
        self, writer: ResultsWriter, cells: list[Cell], kind: str, reason: str
    ) -> None:
        for cell in cells:
            self.cell_finished()
            self.write_record(writer, cell.key, kind, {"reason": reason})
        self.console.print(f"[yellow]{kind}[/]: {cells[0].model.size}: {reason}")

    def _run_model(self, job: ModelJob, writer: ResultsWriter, update: Callable) -> None:
        duet = self._duet_for(job.model)
        fits, reason = memory_verdict(job.model, self.exp, copies=len(self.worker_builds(duet)))
        if not fits:
            self._close_cells(writer, job.cells, "skip", reason)
            return
        pending = list(job.cells)
        while pending:
            update(f"{job.model.size}: loading weights")
            try:
                self._run_workers(ModelJob(job.model, pending, job.done), duet, writer, update)
                return
            except WorkerFailed as failure:
                failed = [c for c in pending if failure.cell_key in (None, c.key)]
                self._close_cells(writer, failed, "error", failure.reason)
                pending = [c for c in pending if c not in failed]

    def _duet_for(self, model: ModelSpec) -> bool:
        """Whether this model's rounds run as duets: the run's schedule, unless a comparison of
        variants would need a second copy of weights that does not fit (then sequential, said)."""
        if self.schedule.schedule != Schedule.DUET:
            return False
        if len(self.builds) == 1 and not variant_pairs(self.exp):
            return False  # nothing to pair
        fits, reason = memory_verdict(model, self.exp, copies=len(self.worker_builds(True)))
        alone, _ = memory_verdict(model, self.exp, copies=len(self.builds))
        if not fits and alone:
            self.console.print(
                f"{model.label}: sequential rounds, not duets: two copies of its weights do not "
                f"fit ({reason})",
                highlight=False,
            )
            return False
        return True

    def worker_builds(self, duet: bool) -> list[Build]:
        """The build of each worker a model's cells run on: one per build, or a duet's two."""
        if duet and len(self.builds) == 1:
            return [self.builds[0], self.builds[0]]
        return list(self.builds)

    def start_workers(self, model: ModelSpec, duet: bool) -> list[WorkerSession]:
        """A worker process for each build (a duet: two, each on its own core), loading the
        model."""
        builds = self.worker_builds(duet)
        if duet:
            cores = self.schedule.cores or (0, 1)
            places: list[Sequence[int] | None] = [[cores[0]], [cores[1]]]
        else:
            pinned = pinned_cpus(self.env) if self.options.pin else None
            places = [pinned] * len(builds)
        job = worker_job(model, self.exp)
        return [
            WorkerSession(job, build, self.env, cpus)
            for build, cpus in zip(builds, places, strict=True)
        ]

    def _run_workers(
        self, job: ModelJob, duet: bool, writer: ResultsWriter, update: Callable
    ) -> None:
        workers = self.start_workers(job.model, duet)
        try:
            deadline = time.monotonic() + self.exp.timeout_s
            for worker in workers:
                loaded = worker.loaded(deadline, self.exp.timeout_s)
                if not self.options.quiet:
                    where = "" if len(self.builds) == 1 else f" ({worker.build.name} build)"
                    self.console.print(
                        f"{job.model.label}{where}: loaded {format_count(loaded.parameters)} "
                        f"parameters ({loaded.weight_bytes / 2**30:.2f} GiB) "
                        f"in {loaded.load_s:.1f} s",
                        highlight=False,
                    )
            for cell in job.cells:
                CellRun(self, cell, workers, duet, job.done, writer, update).run(
                    first=cell is job.cells[0]
                )
        except BaseException:
            for worker in workers:
                worker.stop(kill=True)
            raise
        for worker in workers:
            worker.stop()


class CellRun:
    """One cell: correctness and kernel facts per build, warmups, timed rounds until the cell stops,
    depth rounds."""

    def __init__(
        self,
        runner: Runner,
        cell: Cell,
        workers: list[WorkerSession],
        duet: bool,
        done: DoneWork,
        writer: ResultsWriter,
        update: Callable,
    ) -> None:
        self.runner, self.exp, self.cell, self.workers = runner, runner.exp, cell, workers
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
        for build in self.builds:
            for kind, do in (("correctness", Do.CORRECTNESS), ("kernel", Do.KERNELS)):
                if not self.done.has_facts(self.cell.key, build, kind):
                    self._request(self._worker_of(build), Command(do, self.shape))
        self._warmups()
        rounds, reason = 0, None
        while reason is None:
            if self._pair_served(rounds):
                self._fresh_workers()
            self._round(rounds, warmup=False)
            rounds += 1
            reason = self.target.stop_reason(rounds)
            if rounds == MIN_AUTO_ROUNDS and self.exp.precision and not self.runner.options.quiet:
                self.runner.console.print(
                    f"{self.cell.model.label} {self.cell.workload.label}: "
                    f"{self.target.plan_line(rounds)}",
                    highlight=False,
                )
        self.update(
            f"{self.cell.model.label} {self.cell.workload.label}: {reason}",
            drop=(self.exp.trials - rounds) * self.runner.round_trials(self.duet),
        )
        forecasts = self.target.forecasts(rounds)
        stop = {
            "rounds": rounds,
            "reason": reason,
            "schedule": Schedule.DUET if self.duet else Schedule.SEQUENTIAL,
            "half_width_pct": self.target.half_widths(),
            "round_s": self.target.round_s(rounds),
            "undecided": {
                label: {"rounds": f.rounds, "seconds": f.seconds} for label, f in forecasts.items()
            },
        }
        self.runner.write_record(self.writer, self.cell.key, "stop", stop)
        self.runner.cell_finished()
        # Op shares explain a Δ; where the budget left rows undecided, their time went to rounds
        # instead.
        self.shares_wanted = not (forecasts and self.runner.budget)
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

    def _warmups(self, fresh: bool = False) -> None:
        """The experiment's warmup rounds; in a duet of variants twice as many, so each worker has
        run every variant before the timed rounds (the workers swap variants every round)."""
        twice = self.duet and len(self.builds) == 1
        for w in range(self.exp.warmup * (2 if twice else 1)):
            self._round(w, warmup=True, fresh=fresh)

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
        every = self.exp.worker_rounds
        return len(self.workers) > 1 and every > 0 and rounds > 0 and rounds % every == 0

    def _fresh_workers(self) -> None:
        """Fresh workers, loaded and warmed up, so the next rounds come from other processes."""
        self.update(f"{self.cell.model.label} {self.cell.workload.label}: fresh workers")
        for worker in self.workers:
            worker.stop()
        # in place: the runner stops these
        self.workers[:] = self.runner.start_workers(self.cell.model, self.duet)
        for worker in self.workers:
            worker.loaded(self.deadline, self.exp.timeout_s)
        self._warmups(fresh=True)

    @property
    def process(self) -> int:
        """The label of the worker processes now running: the first worker's process id."""
        return self.workers[0].process.pid

    def _round(self, index: int, *, warmup: bool, fresh: bool = False) -> None:
        if self.duet:
            self._duet_round(index, warmup=warmup, fresh=fresh)
            return
        for build, variant in round_plan(self.runner.order, self.builds, index):
            if not fresh and self.done.has_trial(self.cell.key, build, variant, warmup, index):
                continue
            command = Command(Do.TRIAL, self.shape, variant, index, warmup)
            for trial in self._request(self._worker_of(build), command):
                self._took(build, trial, index, warmup)

    def _duet_round(self, index: int, *, warmup: bool, fresh: bool) -> None:
        """Each duet of the round: both arms' trials sent together, then both collected."""
        cores = self.runner.schedule.cores or (0, 1)
        pairs = variant_pairs(self.exp)
        for duet in duet_plan(self.runner.order, self.builds, pairs, index, cores):
            arms = [arm for arm in duet.arms if fresh or not self._recorded(arm, duet, warmup)]
            if len(self.builds) == 2:  # the builds' workers swap cores every round
                for arm, core in zip(duet.arms, duet.cores, strict=True):
                    pin(self.workers[arm.worker].process.pid, core)
            commands = [
                Command(Do.TRIAL, self.shape, arm.variant, duet.round, warmup) for arm in arms
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


def variant_pairs(exp: Experiment) -> list[tuple[str, str]]:
    """The (baseline, new) variant pairs a cell of one build compares: the experiment's
    comparisons, or the first variant against each other one."""
    pairs = [(c.baseline, c.new) for c in exp.comparisons if c.baseline != c.new]
    if not pairs and not exp.comparisons:
        first, *others = exp.variants
        pairs = [(first, other) for other in others]
    return pairs


def pinned_cpus(env: dict[str, str]) -> list[int] | None:
    """The last `threads` cores this process may use, for the workers; the others stay with the
    runner and OS."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    threads = int(env.get("OPENBLAS_NUM_THREADS", len(cores)))
    return cores[-threads:] if threads < len(cores) else None


def default_out_path(exp: Experiment) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{exp.name}-{stamp}.jsonl"


def peak_cache_path(env: Env) -> Path:
    # v3: keyed by machine_key, so two VMs of one CPU name (AVX-512 or not) keep their own peaks.
    return cache_dir() / f"peak-v3-{machine_key(env)}-t{env.get('threads')}.json"


def measured_peak(worker_env: dict[str, str], env: Env) -> Peak | None:
    """The roof to hold each cell against. On a GPU, the known chip. On a CPU, measured under the
    workers' BLAS and thread count, best of several repeats, and cached per machine fingerprint and
    thread count (the cache is raised when a run achieves more: see raise_cached_peak)."""
    if env["backend"] != "cpu":
        return peak_for(env)
    path = peak_cache_path(env)
    try:
        probe: PeakProbe = json.loads(path.read_text())
    except (OSError, ValueError):
        probe = probe_peaks_in(worker_env)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(probe))
    return peak_for(env, probe)


def raise_cached_peak(env: Env, best: Rates, metrics: set[str]) -> str:
    """After a run that achieved more than the cached peak: the machine can do at least what it did,
    so the cached peak is raised to it, and later runs hold their trials against that."""
    path = peak_cache_path(env)
    try:
        probe = json.loads(path.read_text())
    except (OSError, ValueError):
        return f"peak underestimated: {', '.join(sorted(metrics))} exceeded the measured peak"
    probe["matmul_gflops"] = max(probe["matmul_gflops"], 1000 * best.prefill_tflops)
    probe["gemv_read_gbps"] = max(probe.get("gemv_read_gbps", 0.0), best.gen_gbps or 0.0)
    probe["raised_by_a_run"] = True
    path.write_text(json.dumps(probe))
    return (
        f"peak underestimated: {', '.join(sorted(metrics))} exceeded this machine's measured "
        f"peak; those trials show no percentage, and the cached peak ({path}) is raised to what "
        "this run achieved"
    )


def print_dry_run(exp: Experiment, cells: list[Cell], console: Console) -> None:
    table = Table(title=f"{exp.name}: {len(cells)} cells × {len(exp.variants)} variants")
    for column in ("size", "source", "layers", "dtype", "quantize", "workload", "memory estimate"):
        table.add_column(column)
    for cell in cells:
        m = cell.model
        fits, reason = memory_verdict(m, exp)
        table.add_row(
            m.size,
            m.source,
            str(m.layers or "all"),
            m.dtype,
            m.quantize or "-",
            cell.workload.label,
            reason if fits else f"[yellow]skip: {reason}[/]",
        )
    console.print(table)
    for name, ops in exp.variants.items():
        console.print(
            f"variant [bold]{name}[/]: " + ", ".join(f"{op}={v}" for op, v in ops.items())
        )
    rounds = auto_rounds_text(exp) if exp.precision else f"{exp.trials} timed rounds"
    trials = len(cells) * len(exp.variants) * (exp.trials + exp.warmup)
    order = " ".join(
        centre_order(list(exp.variants), [(c.baseline, c.new) for c in exp.comparisons])
    )
    console.print(
        f"{trials} trials{' at most' if exp.precision else ''}: per variant and cell, "
        f"{exp.warmup} warmup round(s), then {rounds}; order {order}, reversed every other round; "
        "BLAS threads: "
        f"{exp.threads or 'auto (measured on this machine when the run starts, then cached)'}; "
        f"schedule: {exp.schedule}"
        + (
            " (duet or sequential, measured on this machine, then cached)"
            if exp.schedule == Schedule.AUTO
            else ""
        )
    )


def auto_rounds_text(exp: Experiment) -> str:
    """What `trials: auto` will do, in words."""
    auto = exp.precision
    target = f", each interval within ±{auto.target_pct:g}%" if auto.target_pct else ""
    budget = f", the whole run within {auto.budget_s:g} s" if auto.budget_s else ""
    return (
        "rounds until every row is decided (faster, slower, or no change within "
        f"±{exp.margin_pct:g}%{target}; a pilot of {MIN_AUTO_ROUNDS}, "
        f"at most {exp.trials}{budget})"
    )


def honest_warnings(exp: Experiment) -> list[str]:
    warnings = []
    if exp.warmup == 0:
        warnings.append(
            "warmup is 0: the first timed round of each variant includes JIT and compile time"
        )
    if exp.precision is None and exp.trials < 3:
        warnings.append(f"trials is {exp.trials}: fewer than 3 paired rounds give no verdict")
    if (os.cpu_count() or 1) > 1 and exp.threads == os.cpu_count():
        warnings.append(
            f"threads is {exp.threads}, every core: anything else on the machine stalls a BLAS "
            "thread and the whole matmul waits (threads: auto measures which count pays here)"
        )
    return warnings


def build_environment(build: Build) -> BuildEnvironment:
    """What the run header says of a build's environment, when it is one of two (run --against-env,
    bisect)."""
    if not build.packages:
        return {}
    return {
        "python": build.interpreter,
        "packages": build.packages,
        **({"label": build.label} if build.label else {}),
    }


def build_fields(build: Build, env: Env) -> BuildFields:
    """A build as the run header records it; the current checkout's commit is the env's."""
    return BuildFields(
        commit=build.commit or env.get("git_commit"),
        ref=build.ref,
        dirty=build.dirty if build.root else env.get("git_dirty"),
        **build_environment(build),
    )


def run_experiment(
    exp: Experiment, options: RunOptions, console: Console, resume: Path | None = None
) -> int:
    exp = with_repos_found(exp)
    cells = shard_cells(exp.cells(), *options.shard)
    if options.dry_run:
        print_dry_run(exp, cells, console)
        return 0
    for warning in honest_warnings(exp):
        console.print(f"[yellow]warning[/]: {warning}")
    worker_env, env, threads = worker_environment(options.blas, exp.threads)
    say = None if options.quiet else partial(console.print, highlight=False)
    schedule = choose_schedule(exp.schedule, env, worker_env, threads.threads, say=say)
    # budget_s bounds the run's wall time from here: the machine's one-time measurements above
    # (threads, schedule and clock, cached) are not the run's
    started = time.monotonic()
    if schedule.schedule == Schedule.DUET:
        # two workers at once, one core each: one BLAS thread apiece, whatever threads chose
        worker_env, env = thread_env(worker_env, 1), Env(**{**env, "threads": 1})
    elif threads.reason and not options.quiet:
        console.print(f"BLAS threads: {threads.threads} ({threads.reason})", highlight=False)
    if not options.quiet:
        console.print(schedule.line, highlight=False)
    if warning := blas_warning(env):
        console.print(f"[yellow]warning[/]: {warning}")
    run_id, done = resume_state(resume, exp) if resume else (new_run_id(), DoneWork())
    peak = measured_peak(worker_env, env)
    runner = Runner(exp, options, run_id, console, peak, worker_env, started, schedule)
    before = preflight()
    with ResultsWriter(options.out) as writer:
        experiment = StoredExperiment(
            name=exp.name, file=exp.file, sha256=exp.sha256, content=exp.content
        )
        plugins = [PluginFile(path=str(p.path), sha256=p.sha256) for p in load_plugins(exp.plugins)]
        builds = {b.name: build_fields(b, env) for b in runner.builds}
        writer.write(
            run_header(
                run_id,
                experiment,
                env,
                peak=peak.to_dict() if peak else None,
                shard=f"{options.shard[0]}/{options.shard[1]}",
                resumed=resume is not None,
                plugins=plugins,
                builds=builds,
                preflight=before,
                pinned=options.pin,
                threads_choice=threads.to_json(),
                schedule_choice=schedule.to_json(),
                repos={m.repo: m.commit for m in exp.models if m.repo and m.commit},
                stopping=Stopping.ADAPTIVE if exp.precision else Stopping.FIXED,
            )
        )
        console.print(
            f"results -> {options.out}  ({env['backend']}, {env['device']}, BLAS {env['blas']}, "
            f"{env['threads']} thread(s))"
        )
        with LoadSampler() as sampler:
            try:
                runner.run(plan_jobs(cells, done), writer)
            except KeyboardInterrupt:
                console.print(
                    f"[yellow]interrupted[/]: every finished trial is in {options.out}; "
                    f"finish with: fusebench run {exp.file} --resume {options.out}"
                )
                return 130
            finally:
                writer.write(
                    {"kind": "load", "run_id": run_id, **(sampler.summary() or {"samples": 0})}
                )
    if runner.above_peak and env["backend"] == "cpu":
        console.print(
            f"[yellow]warning[/]: {raise_cached_peak(env, runner.best, runner.above_peak)}"
        )
    return 0
