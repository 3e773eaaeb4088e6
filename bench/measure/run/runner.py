"""The runner: a run as a whole. It resolves what the machine decides (BLAS threads, the schedule
and the clock, the peak), writes the run header, drives each model's workers (one per build, two
in a duet) through its cells, and samples the machine's load meanwhile; every record is appended
to the results file as it arrives.

Its parts, in the order a run meets them: measure.run.plan (what the run will do, decided before it
starts: jobs per model, the comparisons a cell watches, the dry run), measure.run.cellrun (one
cell's correctness, warmups, shares and rounds, sequential or in duets), measure.run.cellstop (when
a cell has enough rounds). A model that will not fit is skipped before anything is loaded; a worker
that crashes, runs out of memory or passes the per-cell timeout costs an `error` record for that
cell, and the run goes on with a fresh worker.

Why one long module: the run as a whole, from the machine's choices before the first cell to the
closing lines after the last; a cell's own work is measure.run.cellrun's.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
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

from ...analysis.stopping import RunBudget
from ...core.cell import (
    ErrorRecord,
    Measured,
    SkipRecord,
    Trial,
    TrialRecord,
    cell_record,
)
from ...core.header import BuildFields, Env, PeakProbe, PluginFile, StoredExperiment, run_header
from ...core.records import METRICS, new_run_id
from ...core.results import ResultsWriter
from ...core.spec import Cell, Experiment, ModelSpec, Schedule, Trials, shard_cells
from ...present.format import format_count
from ..hub import with_repos_found
from ..job import Result
from ..machine.env import (
    blas_warning,
    cache_dir,
    machine_key,
    read_cached,
    thread_env,
    write_cached,
)
from ..machine.load import LoadSampler, preflight
from ..machine.memory import memory_verdict, model_config, weight_bytes
from ..machine.probe import probe_peaks_in, worker_environment
from ..machine.roofline import (
    CellWork,
    Peak,
    PeakShares,
    Rates,
    achieved,
    cell_work,
    peak_for,
    percent_of_peak,
)
from ..machine.threads import cache_path as threads_cache_path
from ..ops.opcheck import check_ops_called
from ..plugins import load_plugins
from .cellrun import CellRun, DuetSide
from .duet import ScheduleChoice, choose_schedule
from .duet import cache_path as schedule_cache_path
from .ledger import TimeLedger
from .plan import (
    ModelJob,
    RunOptions,
    cell_meta,
    comparison_pairs,
    honest_warnings,
    plan_jobs,
    print_dry_run,
    table_rows,
    variant_pairs,
)
from .planning import CACHE_VERSION as PLAN_CACHE_VERSION
from .planning import PlanWork, RunPlanner
from .resume import DoneWork, resume_state
from .schedule import centre_order
from .session import Build, WorkerFailed, WorkerSession, stopped_after, worker_job
from .stopwatch import Stopwatch

# A cell closed without rounds: skipped before it ran (too big, or planned none), or its worker
# failed.
Closed = SkipRecord | ErrorRecord


class Runner:
    def __init__(
        self,
        exp: Experiment,
        options: RunOptions,
        run_id: str,
        console: Console,
        peak: Peak | None,
        worker_env: dict[str, str],
        started: float,
        schedule: ScheduleChoice,
    ) -> None:
        self.exp = exp
        self.schedule = schedule
        self.peak = peak
        self.worker_env = worker_env  # the environment variables each worker starts with
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
        self.ledger = TimeLedger(options.started)  # where the time went, from the command's start
        self.planner: RunPlanner | None = None  # trials: plan

    def time_left_s(self) -> float:
        """What the run's budget has left (infinite without one)."""
        if not self.exp.budget_s:
            return float("inf")
        return self.exp.budget_s - (time.monotonic() - self.started)

    def plan_from_the_start(self) -> None:
        """trials: plan: the plan of every cell, when this machine has measured enough to make it
        (else the first cell's setup makes it)."""
        assert self.planner is not None
        with self.ledger.phase("plan"):
            plan = self.planner.make(self.time_left_s())
        if self.options.quiet:
            return
        self.console.print(
            self.planner.line(plan, self.time_left_s())
            if plan
            else "plan: made once the first size is set up (nothing measured on this machine "
            "at this configuration yet)",
            highlight=False,
        )

    def run(self, jobs: list[ModelJob], writer: ResultsWriter) -> None:
        if self.exp.budget_s:
            self.budget = RunBudget(self.exp.budget_s, sum(len(job.cells) for job in jobs))
        for job in jobs:
            check_ops_called(job.model, self.exp)
        if self.planner:
            self.plan_from_the_start()
        cells = sum(len(job.cells) for job in jobs)
        duet = self.schedule.schedule == Schedule.DUET
        total = cells * (self.exp.rounds + self.exp.warmup) * self.round_trials(duet)
        with self._progress() as progress:
            task = progress.add_task("starting", total=total)

            def update(text: str, advance: int = 0, drop: int = 0) -> None:
                progress.update(
                    task,
                    description=text,
                    advance=advance,
                    total=progress.tasks[0].total - drop,
                    refresh=True,
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
            # drawn when a trial ends, never while one runs: a redraw ten times a second is work
            # beside the trial on a core it may need (issue 53: 2% of a core beside two BLAS
            # threads made each step 24% slower)
            auto_refresh=False,
        )

    def round_trials(self, duet: bool) -> int:
        """Trials a round of one cell runs: every variant in every build, or in a duet of variants
        both arms of each comparison."""
        if duet and len(self.builds) == 1:
            return 2 * len(variant_pairs(self.exp))
        return len(self.exp.variants) * len(self.builds)

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
        if not isinstance(result, Trial):
            writer.write(cell_record(self.meta[cell_key], result, build))
            return
        rates, shares = self._roofline(cell_key, result.measured)
        trial = TrialRecord(
            cell=self.meta[cell_key],
            trial=result,
            build=build,
            rates=rates,
            shares=shares,
            process=process,
            beside=side.beside if side else None,
            core=side.core if side else None,
        )
        writer.write(trial)

    def cell_work(self, cell_key: str) -> CellWork:
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
        rates = achieved(measured.prefill_s, measured.gen_s, self.cell_work(cell_key))
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
        self, writer: ResultsWriter, cells: list[Cell], closed: type[Closed], reason: str
    ) -> None:
        for cell in cells:
            self.cell_finished()
            writer.write(closed(cell=self.meta[cell.key], reason=reason))
        self.console.print(f"[yellow]{closed.KIND}[/]: {cells[0].model.size}: {reason}")

    def _run_model(self, job: ModelJob, writer: ResultsWriter, update: Callable) -> None:
        duet = self._duet_for(job.model)
        fits, reason = memory_verdict(job.model, self.exp, copies=len(self.worker_builds(duet)))
        if not fits:
            self._close_cells(writer, job.cells, SkipRecord, reason)
            return
        unplanned = (
            [self.planner.skip_reason(c, self.time_left_s()) for c in job.cells]
            if self.planner
            else [None]
        )
        if all(unplanned) and self.planner:
            self._close_cells(writer, job.cells, SkipRecord, str(unplanned[0]))
            return
        pending = list(job.cells)
        while pending:
            update(f"{job.model.size}: loading weights")
            try:
                self._run_workers(ModelJob(job.model, pending, job.done), duet, writer, update)
                return
            except WorkerFailed as failure:
                failed = [c for c in pending if failure.cell_key in (None, c.key)]
                self._close_cells(writer, failed, ErrorRecord, failure.reason)
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
            pinned = pinned_cpus(self.worker_env) if self.options.pin else None
            places = [pinned] * len(builds)
        job = worker_job(model, self.exp)
        return [
            WorkerSession(job, build, self.worker_env, cpus)
            for build, cpus in zip(builds, places, strict=True)
        ]

    def _run_workers(
        self, job: ModelJob, duet: bool, writer: ResultsWriter, update: Callable
    ) -> None:
        started = time.monotonic()
        with self._stopped_after(self.start_workers(job.model, duet)) as workers:
            deadline = time.monotonic() + self.exp.timeout_s
            written_s = 0.0
            for worker in workers:
                began = time.monotonic()
                loaded = worker.loaded(deadline, self.exp.timeout_s)
                self.wrote_weights(loaded.written_s)
                written_s += loaded.written_s
                self.ledger.add("load", time.monotonic() - began - loaded.written_s)
                if not self.options.quiet:
                    where = "" if len(self.builds) == 1 else f" ({worker.build.name} build)"
                    wrote = (
                        f" (and {loaded.written_s:.1f} s writing them to the weights cache, once)"
                        if loaded.written_s
                        else ""
                    )
                    self.console.print(
                        f"{job.model.label}{where}: loaded {format_count(loaded.parameters)} "
                        f"parameters ({loaded.weight_bytes / 2**30:.2f} GiB) "
                        f"in {loaded.load_s:.1f} s{wrote}",
                        highlight=False,
                    )
            load_s = time.monotonic() - started - written_s
            for cell in job.cells:
                CellRun(self, cell, workers, duet, job.done, writer, update, load_s).run(
                    first=cell is job.cells[0]
                )

    def wrote_weights(self, seconds: float) -> None:
        """A preset's weights written to the cache: the machine's one-time cost, which the budget
        leaves out, as it does the probes that are cached."""
        self.ledger.add("machine", seconds)
        self.started += seconds

    @contextlib.contextmanager
    def _stopped_after(self, workers: list[WorkerSession]) -> Iterator[list[WorkerSession]]:
        """session.stopped_after, with the stop on the ledger."""
        stopping = time.monotonic()
        try:
            with stopped_after(workers) as running:
                try:
                    yield running
                finally:
                    stopping = time.monotonic()
        finally:
            self.ledger.add("stop", time.monotonic() - stopping)


STALE_FACTOR = 2.0  # a run's rows this many times the pilot's spread: the machine is measured again


def stale_machine_line(
    planner: RunPlanner, schedule: ScheduleChoice, env: Env, threads: int
) -> str | None:
    """Where this run's rows scattered STALE_FACTOR times what the cached schedule pilot measured,
    the machine has changed since its threads and schedule were chosen: both caches are dropped, so
    the next run measures them again, and the line says so."""
    probe = next((p for p in schedule.probes if p.schedule == schedule.schedule), None)
    spread = planner.run_spread()
    if probe is None or spread is None or spread < STALE_FACTOR * probe.wall_sd:
        return None
    for path in (threads_cache_path(env), schedule_cache_path(env, threads)):
        path.unlink(missing_ok=True)
    return (
        f"this run's rows scattered {100 * spread:.1f}% a round, {spread / probe.wall_sd:.1f}x "
        f"the {100 * probe.wall_sd:.1f}% the cached pilot measured: the machine has changed since "
        "its BLAS threads and schedule were chosen; the next run measures them again"
    )


def run_planner(runner: Runner, cells: Sequence[Cell], env: Env) -> RunPlanner:
    """trials: plan's planner for this run: each cell's work from its shapes, this machine's
    cached costs, and the schedule pilot's spread."""
    exp, schedule = runner.exp, runner.schedule
    duet = schedule.schedule == Schedule.DUET
    builds = [b.name for b in runner.builds]

    def work(cell: Cell) -> PlanWork:
        one = runner.cell_work(cell.key)
        trials = runner.round_trials(duet)
        return PlanWork(
            round_flops=float(trials * one.prefill_flops),
            round_bytes=float(trials * one.gen_bytes),
            weight_bytes=len(runner.worker_builds(duet)) * weight_bytes(cell.model),
            warmups=max(exp.warmup, 1) * (2 if duet and len(builds) == 1 else 1),
            rows=len(METRICS) * len(comparison_pairs(exp, builds)),
        )

    peak = runner.peak
    roof = (peak.compute_roof("float32") if peak else None) or 1.0  # TFLOP/s
    bandwidth = (peak.memory_gbps if peak else None) or 10.0  # GB/s

    def seconds_of(flops: float, nbytes: float) -> float:
        return flops / (roof * 1e12) + nbytes / (bandwidth * 1e9)

    probe = next((p for p in schedule.probes if p.schedule == schedule.schedule), None)
    cache = cache_dir() / (
        f"plan-v{PLAN_CACHE_VERSION}-{machine_key(env)}-t{env.threads}-{schedule.schedule}.json"
    )
    return RunPlanner(
        exp,
        cells,
        builds,
        cache,
        work=work,
        seconds_of=seconds_of,
        pilot_sd=probe.wall_sd if probe else None,
        rows=table_rows(exp, builds),
    )


def pinned_cpus(env: dict[str, str]) -> list[int] | None:
    """The last `threads` cores this process may use, for the workers; the others stay with the
    runner and OS."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    threads = int(env.get("OPENBLAS_NUM_THREADS", len(cores)))
    return cores[-threads:] if threads < len(cores) else None


def peak_cache_path(env: Env) -> Path:
    # v3: keyed by machine_key, so two VMs of one CPU name (AVX-512 or not) keep their own peaks.
    return cache_dir() / f"peak-v3-{machine_key(env)}-t{env.threads}.json"


def measured_peak(worker_env: dict[str, str], env: Env) -> Peak | None:
    """The roof to hold each cell against. On a GPU, the known chip. On a CPU, measured under the
    workers' BLAS and thread count, best of several repeats, and cached per machine fingerprint and
    thread count (the cache is raised when a run achieves more: see raise_cached_peak)."""
    if env.backend != "cpu":
        return peak_for(env)
    path = peak_cache_path(env)
    probe = read_cached(path, PeakProbe)
    if probe is None:
        probe = probe_peaks_in(worker_env)
        write_cached(path, probe)
    return peak_for(env, probe)


def raise_cached_peak(env: Env, best: Rates, metrics: set[str]) -> str:
    """After a run that achieved more than the cached peak: the machine can do at least what it did,
    so the cached peak is raised to it, and later runs hold their trials against that."""
    path = peak_cache_path(env)
    probe = read_cached(path, PeakProbe)
    if probe is None:
        return f"peak underestimated: {', '.join(sorted(metrics))} exceeded the measured peak"
    raised = replace(
        probe,
        matmul_gflops=max(probe.matmul_gflops, 1000 * best.prefill_tflops),
        gemv_read_gbps=max(probe.gemv_read_gbps, best.gen_gbps or 0.0),
        raised_by_a_run=True,
    )
    write_cached(path, raised)
    return (
        f"peak underestimated: {', '.join(sorted(metrics))} exceeded this machine's measured "
        f"peak; those trials show no percentage, and the cached peak ({path}) is raised to what "
        "this run achieved"
    )


def build_fields(build: Build, env: Env) -> BuildFields:
    """A build as the run header records it; the current checkout's commit is the env's, and
    its environment only when it is another one (run --against-env, bisect --package)."""
    other = bool(build.packages)
    return BuildFields(
        commit=build.commit or env.git_commit,
        ref=build.ref,
        dirty=build.dirty if build.root else env.git_dirty,
        python=build.interpreter if other else None,
        packages=build.packages if other else {},
        label=build.label if other else None,
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
    # budget_s bounds the command's wall time but for the machine's one-time measurements (threads,
    # schedule and clock, peaks: minutes on a machine's first run, cached after); the probes of
    # the workers' environment, a second each run, count
    measuring = Stopwatch()
    probing = time.monotonic()
    worker_env, env, threads = worker_environment(options.blas, exp.threads, measuring=measuring)
    probes_s = time.monotonic() - probing - measuring.seconds
    say = None if options.quiet else partial(console.print, highlight=False)
    with measuring:
        schedule = choose_schedule(exp.schedule, env, worker_env, threads.threads, say=say)
    if schedule.schedule == Schedule.DUET:
        # two workers at once, one core each: one BLAS thread apiece, whatever threads chose
        worker_env, env = thread_env(worker_env, 1), replace(env, threads=1)
    elif threads.reason and not options.quiet:
        console.print(f"BLAS threads: {threads.threads} ({threads.reason})", highlight=False)
    if not options.quiet:
        console.print(schedule.line, highlight=False)
    if warning := blas_warning(env):
        console.print(f"[yellow]warning[/]: {warning}")
    run_id, done = resume_state(resume, exp) if resume else (new_run_id(), DoneWork())
    with measuring:
        peak = measured_peak(worker_env, env)
    started = options.started + measuring.seconds
    runner = Runner(exp, options, run_id, console, peak, worker_env, started, schedule)
    runner.ledger.add("machine", measuring.seconds)
    if exp.trials is Trials.PLAN:
        runner.planner = run_planner(runner, cells, env)
    with runner.ledger.phase("probes"):
        runner.ledger.add("probes", probes_s)
        before = preflight()
    with ResultsWriter(options.out) as writer:
        experiment = StoredExperiment(
            name=exp.name, file=exp.file, sha256=exp.sha256, content=exp.content
        )
        plugins = tuple(
            PluginFile(path=str(p.path), sha256=p.sha256) for p in load_plugins(exp.plugins)
        )
        builds = {b.name: build_fields(b, env) for b in runner.builds}
        writer.write(
            run_header(
                run_id,
                experiment,
                env,
                peak=peak,
                shard=f"{options.shard[0]}/{options.shard[1]}",
                resumed=resume is not None,
                plugins=plugins,
                builds=builds,
                preflight=before,
                pinned=options.pin,
                threads_choice=threads,
                schedule_choice=schedule,
                repos={m.repo: m.commit for m in exp.models if m.repo and m.commit},
                trials=exp.trials,
            )
        )
        console.print(
            f"results -> {options.out}  ({env.backend}, {env.device}, BLAS {env.blas}, "
            f"{env.threads} thread(s))"
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
                writer.write(sampler.summary(run_id))
                writer.write(runner.ledger.spent(run_id))
    stale = (
        stale_machine_line(runner.planner, schedule, env, threads.threads)
        if runner.planner
        else None
    )
    if stale and not options.quiet:
        console.print(f"[yellow]warning[/]: {stale}", highlight=False)
    closing = runner.planner.closing_line() if runner.planner else None
    if closing and not options.quiet:
        console.print(closing, highlight=False)
    if runner.above_peak and env.backend == "cpu":
        console.print(
            f"[yellow]warning[/]: {raise_cached_peak(env, runner.best, runner.above_peak)}"
        )
    return 0
