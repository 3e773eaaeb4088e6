"""The runner: a run as a whole. It resolves what the machine decides (BLAS threads, the schedule
and the clock, the peak), writes the run header, starts each model's workers as its schedule places
them (measure.run.schedules, measure.run.session) and hands each cell to measure.run.cellrun with a
`CellContext`, and samples the machine's load meanwhile; every record is appended to the results
file as it arrives (measure.run.findings). docs/architecture.md "The run path" reads it in order.

A model that will not fit is skipped before anything is loaded; a worker that crashes, runs out of
memory or passes the per-cell timeout costs an `error` record for that cell, and the run goes on
with a fresh worker.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from ...core.cell import ErrorRecord, SkipRecord
from ...core.experiment import Cell, Experiment, ModelSpec, Schedule, Trials
from ...core.fileformat import METRICS, new_run_id
from ...core.flags import shard_cells
from ...core.header import (
    BuildFields,
    Env,
    PluginFile,
    StoredExperiment,
    ThreadChoice,
    run_header,
)
from ...core.results import ResultsWriter
from ...present.format import format_count
from ..builds.places import Places, places_for
from ..hub import with_repos_found
from ..job import Loaded
from ..machine.cores import pinned_cpus
from ..machine.env import (
    blas_warning,
    cache_dir,
    machine_key,
    thread_env,
)
from ..machine.load import LoadSampler, preflight
from ..machine.memory import memory_verdict, weight_bytes
from ..machine.peakcache import cached_peak, measured_peak, raise_cached_peak
from ..machine.probe import worker_environment
from ..machine.roofline import Peak
from ..ops.opcheck import check_ops_called
from ..plugins import load_plugins
from .cellcontext import CellContext, WeighSchedules
from .cellrun import CellRun
from .cellshares import shares_code
from .findings import Findings, Roofline
from .jobs import (
    ModelJob,
    RunOptions,
    cell_meta,
    comparison_pairs,
    honest_warnings,
    plan_jobs,
    print_dry_run,
    run_builds,
    table_rows,
    variant_order,
    variant_pairs,
)
from .ledger import ONE_TIME, RunTime
from .pairspreads import CACHE_VERSION as SPREADS_CACHE_VERSION
from .pairspreads import PairSpreads
from .pilot import ScheduleChoice, choose_schedule
from .planning import CACHE_VERSION as PLAN_CACHE_VERSION
from .planning import RunPlanner
from .progress import RunProgress
from .resume import DoneWork, resume_state
from .scaling import PlanWork
from .schedules import SCHEDULES
from .schedules.base import RoundSchedule
from .session import Build, WorkerFailed, WorkerMaker, WorkerSession, stopped_after
from .weighing import (
    WEIGHING_SHARE,
    Configuration,
    PlannedRows,
    cache_weighed,
    sd_upper_factor,
    stale_machine_line,
    weigh,
    weighs_schedules,
)

# A cell closed without rounds: skipped before it ran (too big, or planned none), or its worker
# failed.
Closed = SkipRecord | ErrorRecord


class Runner:
    """A run's models in turn, each on its workers, cell by cell (measure.run.cellrun)."""

    def __init__(
        self,
        exp: Experiment,
        options: RunOptions,
        run_id: str,
        console: Console,
        peak: Peak | None,
        worker_env: dict[str, str],
        run_time: RunTime,
        choice: ScheduleChoice,
    ) -> None:
        self.exp, self.options, self.console = exp, options, console
        self.choice = choice
        self.schedule = SCHEDULES[choice.schedule]
        self.builds = run_builds(options, sequential=not self.schedule.one_core_each)
        self.build_names = [build.name for build in self.builds]
        self.order = variant_order(exp)
        self.pairs = variant_pairs(exp)
        cells = {cell.key: cell for cell in exp.cells()}
        self.meta = {key: cell_meta(cell, run_id) for key, cell in cells.items()}
        self.roofline = Roofline(peak, cells)
        self.time = run_time
        pinned = pinned_cpus(worker_env) if options.pin else None
        self.workers = WorkerMaker(
            exp, tuple(self.builds), worker_env, choice.cores or (0, 1), pinned
        )
        self.planner: RunPlanner | None = None  # trials: plan
        self.spreads: PairSpreads | None = None  # with two builds
        self.weigh: WeighSchedules | None = None  # schedule: auto weighed in the first cell
        self.context: CellContext | None = None  # what the cells read of the run, once it runs

    def round_trials(self, schedule: RoundSchedule) -> int:
        return schedule.round_trials(self.order, self.build_names, self.pairs)

    def plan_from_the_start(self) -> None:
        """trials: plan: the plan of every cell, when this machine has measured enough to make it
        (else the first cell's setup makes it)."""
        assert self.planner is not None
        with self.time.phase("plan"):
            plan = self.planner.make(self.time.time_left_s())
        if self.options.quiet:
            return
        self.console.print(
            self.planner.line(plan, self.time.spent_s())
            if plan
            else "plan: made once the first size is set up (nothing measured on this machine "
            "at this configuration yet)",
            highlight=False,
        )

    def run(self, jobs: list[ModelJob], writer: ResultsWriter, load: LoadSampler) -> None:
        cells = sum(len(job.cells) for job in jobs)
        self.time.divide_among(cells)
        for job in jobs:
            check_ops_called(job.model, self.exp)
        if self.planner:
            self.plan_from_the_start()
        total = cells * (self.exp.rounds + self.exp.warmup) * self.round_trials(self.schedule)
        with RunProgress(self.console, total, self.options.quiet) as progress:
            context = CellContext(
                exp=self.exp,
                findings=Findings(writer, self.meta, self.roofline, load),
                time=self.time,
                workers=self.workers,
                order=self.order,
                planner=self.planner,
                spreads=self.spreads,
                progress=progress,
                console=self.console,
                quiet=self.options.quiet,
                weigh=self.weigh,
            )
            self.context = context
            for job in jobs:
                self._run_model(job, context)

    def schedule_kept(self, schedule: str, reason: str) -> None:
        """The weighing's choice: the schedule the run's later cells follow."""
        self.choice = replace(self.choice, schedule=Schedule(schedule), reason=reason)
        self.schedule = SCHEDULES[schedule]
        self.weigh = None
        assert self.context is not None
        self.context = replace(self.context, weigh=None)

    def _close_cells(
        self, findings: Findings, cells: list[Cell], closed: type[Closed], reason: str
    ) -> None:
        for cell in cells:
            self.time.cell_finished()
            findings.write(closed(cell=self.meta[cell.key], reason=reason))
        self.console.print(f"[yellow]{closed.KIND}[/]: {cells[0].model.size}: {reason}")

    def _run_model(self, job: ModelJob, context: CellContext) -> None:
        schedule = self._schedule_for(job.model)
        if self.weigh is not None and schedule is not SCHEDULES[Schedule.DUET]:
            self._no_weighing(f"{job.model.label}'s two copies of the weights do not fit")
        copies = len(schedule.worker_builds(self.builds))
        fits, reason = memory_verdict(job.model, self.exp, copies=copies)
        if not fits:
            self._close_cells(context.findings, job.cells, SkipRecord, reason)
            return
        unplanned = (
            [self.planner.skip_reason(c, self.time.time_left_s()) for c in job.cells]
            if self.planner
            else [None]
        )
        if all(unplanned) and self.planner:
            self._close_cells(context.findings, job.cells, SkipRecord, str(unplanned[0]))
            return
        pending = list(job.cells)
        while pending:
            context.progress.update(f"{job.model.size}: loading weights")
            try:
                self._run_workers(ModelJob(job.model, pending, job.done), schedule, context)
                return
            except WorkerFailed as failure:
                failed = [c for c in pending if failure.cell_key in (None, c.key)]
                self._close_cells(context.findings, failed, ErrorRecord, failure.reason)
                pending = [c for c in pending if c not in failed]

    def _schedule_for(self, model: ModelSpec) -> RoundSchedule:
        """The schedule this model's rounds follow: the run's, unless a round of it would run no
        trial (a duet of variants with nothing to pair) or its extra copies of the weights do not
        fit where one a build does (then sequential, said)."""
        sequential = SCHEDULES[Schedule.SEQUENTIAL]
        # a weighing runs both schedules on the duet's workers
        wanted = SCHEDULES[Schedule.DUET] if self.weigh else self.schedule
        if wanted is sequential or not self.round_trials(wanted):
            return sequential
        fits, reason = memory_verdict(
            model, self.exp, copies=len(wanted.worker_builds(self.builds))
        )
        alone, _ = memory_verdict(model, self.exp, copies=len(self.builds))
        if not fits and alone:
            if wanted is self.schedule:
                self.console.print(
                    f"{model.label}: sequential rounds, not {self.schedule.name}: its copies of "
                    f"the weights do not fit ({reason})",
                    highlight=False,
                )
            return sequential
        return wanted

    def _no_weighing(self, why: str) -> None:
        """The weighing given up before it began: the run keeps its schedule, and says why."""
        self.weigh = None
        if self.context is not None:
            self.context = replace(self.context, weigh=None)
        if not self.options.quiet:
            self.console.print(
                f"schedule: {self.schedule.name}, not weighed: {why}", highlight=False
            )

    def _say_loaded(self, label: str, build: str, loaded: Loaded) -> None:
        where = "" if len(self.builds) == 1 else f" ({build} build)"
        if loaded.not_kept:
            # said even when quiet: every run pays for making these weights until there is room
            self.console.print(
                f"warning: {label}{where}: its weights are made again on every run, the "
                f"weights cache cannot keep them ({loaded.not_kept}); `fusebench cache` shows "
                "what it holds",
                highlight=False,
            )
        if self.options.quiet:
            return
        wrote = (
            f" (and {loaded.written_s:.1f} s writing them to the weights cache, once)"
            if loaded.written_s
            else ""
        )
        self.console.print(
            f"{label}{where}: loaded {format_count(loaded.parameters)} "
            f"parameters ({loaded.weight_bytes / 2**30:.2f} GiB) in {loaded.load_s:.1f} s{wrote}",
            highlight=False,
        )

    def _run_workers(self, job: ModelJob, schedule: RoundSchedule, context: CellContext) -> None:
        started = time.monotonic()
        with self._stopped_after(self.workers.start(job.model, schedule)) as workers:
            context.findings.workers_started(job.model.key, workers)
            deadline = time.monotonic() + self.exp.timeout_s
            written_s = 0.0
            for worker in workers:
                loaded = worker.loaded(deadline, self.exp.timeout_s)
                # the workers load at once, so their writes overlap: the longest is what it cost
                written_s = max(written_s, loaded.written_s)
                self._say_loaded(job.model.label, worker.build.name, loaded)
            load_s = time.monotonic() - started - written_s
            self.time.add(ONE_TIME, written_s)  # a preset's weights written, once
            self.time.add("load", load_s)
            weighs = self.weigh is not None
            for cell in job.cells:
                # after the weighing, its workers run the schedule it kept
                now = self.schedule if weighs and self.weigh is None else schedule
                CellRun(self.context, cell, now, workers, job.done, load_s).run(
                    first=cell is job.cells[0]
                )

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
            self.time.add("stop", time.monotonic() - stopping)


def run_planner(
    exp: Experiment,
    cells: Sequence[Cell],
    env: Env,
    choice: ScheduleChoice,
    builds: Sequence[Build],
    roofline: Roofline,
) -> RunPlanner:
    """trials: plan's planner for a run of `builds` in the schedule chosen: each cell's work from
    its shapes (the roofline's), and this machine's cached costs and spreads."""
    names = [build.name for build in builds]
    cache, work = plan_basis(exp, env, choice, builds, roofline)
    return RunPlanner(
        exp, cells, names, cache, work=work, rows=table_rows(exp, names), code=shares_code(env, exp)
    )


def plan_basis(
    exp: Experiment,
    env: Env,
    choice: ScheduleChoice,
    builds: Sequence[Build],
    roofline: Roofline,
) -> tuple[Path, Callable[[Cell], PlanWork]]:
    """What a plan in the schedule chosen reads: its cache of this machine's costs and spreads, and
    each cell's work in a round of that schedule."""
    schedule = SCHEDULES[choice.schedule]
    names = [build.name for build in builds]
    trials = schedule.round_trials(variant_order(exp), names, variant_pairs(exp))
    warmup_rounds = schedule.warmup_rounds(names)

    def work(cell: Cell) -> PlanWork:
        one = roofline.work(cell.key)
        return PlanWork(
            round_flops=float(trials * one.prefill_flops),
            round_bytes=float(trials * one.gen_bytes),
            prefill_bytes=float(trials * one.prefill_bytes),
            weight_bytes=len(schedule.worker_builds(list(builds))) * weight_bytes(cell.model),
            warmups=max(exp.warmup, 1) * warmup_rounds,
            rows=len(METRICS) * len(comparison_pairs(exp, names)),
        )

    cache = cache_dir() / (
        f"plan-v{PLAN_CACHE_VERSION}-{machine_key(env)}-t{env.threads}-{choice.schedule}.json"
    )
    return cache, work


def pair_spreads(
    exp: Experiment, env: Env, choice: ScheduleChoice, builds: Sequence[str]
) -> PairSpreads:
    """The A/B rows' scatter cached for this machine, its BLAS threads and the schedule chosen."""
    name = f"pairs-v{SPREADS_CACHE_VERSION}-{machine_key(env)}-t{env.threads}-{choice.schedule}"
    return PairSpreads(cache_dir() / f"{name}.json", exp, builds)


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


# The workers' environment, and the thread count and schedule they run
Chosen = tuple[dict[str, str], Env, ThreadChoice, ScheduleChoice]


def configuration_from_runs(
    exp: Experiment, cells: Sequence[Cell], options: RunOptions, console: Console, chosen: Chosen
) -> Chosen:
    """`threads: auto` and `schedule: auto` with `trials: plan`: the probe's thread count and the
    cached (or safe) schedule, or another configuration where this experiment's runs here say it
    surely decides more rows, or as many sooner (measure.run.weighing). Weighs only what is
    cached: no probe, pilot or worker runs."""
    worker_env, env, threads, schedule = chosen
    cores = os.cpu_count() or 1
    if exp.trials is not Trials.PLAN or cores < 2:
        return chosen
    counts = [env.threads] if exp.threads is not None else [env.threads, 1, cores]
    kinds = (
        [schedule.schedule] if exp.schedule != Schedule.AUTO else [schedule.schedule, *SCHEDULES]
    )
    configurations = dict.fromkeys(Configuration(t, kind) for t in counts for kind in kinds)
    planned: dict[Configuration, tuple[PlannedRows, Chosen]] = {}
    for configuration in configurations:
        found = _planned_in(configuration, exp, cells, options, console, chosen)
        if found is not None:
            planned[configuration] = found
    incumbent = Configuration(env.threads, schedule.schedule)
    if incumbent not in planned or len(planned) < 2:
        return chosen
    others = [found for c, (found, _) in planned.items() if c != incumbent]
    builds = [options.current.name, *([options.reference.name] if options.reference else [])]
    winner, why = weigh(planned[incumbent][0], others, table_rows(exp, builds))
    worker_env, env, _, choice = planned[winner][1]
    if exp.schedule != Schedule.AUTO:
        kept = winner.threads == threads.threads
        reason = (
            f"{threads.reason}; {why}"
            if kept
            else f"{why} (the probe had chosen {threads.threads})"
        )
        return worker_env, env, ThreadChoice(winner.threads, threads.settings, reason), choice
    moved = "" if winner == incumbent else f" (had been {incumbent})"
    weighed = ThreadChoice(winner.threads, threads.settings, threads.reason)
    if winner.threads != threads.threads:
        weighed = replace(weighed, reason="weighed on this experiment's runs with the schedule")
    return worker_env, env, weighed, replace(choice, reason=f"{why}{moved}")


def _planned_in(
    configuration: Configuration,
    exp: Experiment,
    cells: Sequence[Cell],
    options: RunOptions,
    console: Console,
    chosen: Chosen,
) -> tuple[PlannedRows, Chosen] | None:
    """What the plan of the experiment's cached runs in `configuration` expects, and that
    configuration's workers; None where it cannot run here or has no run cached."""
    worker_env, env, threads, _ = chosen
    one_core_each = SCHEDULES[configuration.schedule].one_core_each
    if one_core_each and configuration.threads != 1:
        return None
    candidate = replace(env, threads=configuration.threads)
    choice = choose_schedule(Schedule(configuration.schedule), candidate, {}, candidate.threads)
    peak = cached_peak(candidate)
    if choice.schedule != configuration.schedule or peak is None:
        return None
    candidate_env = thread_env(worker_env, configuration.threads)
    builds = [options.current, *([options.reference] if options.reference else [])]
    roofline = Roofline(peak, {cell.key: cell for cell in cells})
    planner = run_planner(exp, cells, candidate, choice, builds, roofline)
    point, bounded = planner.make(exp.budget_s), planner.make(exp.budget_s, sd_upper_factor())
    if point is None or bounded is None:  # no cell of the experiment measured so
        return None
    found = PlannedRows(
        configuration, point.expected, point.seconds, bounded.expected, bounded.seconds
    )
    return found, (candidate_env, candidate, threads, choice)


def schedule_weighing(
    exp: Experiment,
    cells: Sequence[Cell],
    env: Env,
    runner: Runner,
    resumed: bool,
) -> WeighSchedules | None:
    """`schedule: auto` weighed on the run's first cell where it can be (measure.run.weighing);
    the schedule kept is cached as the next run's prior, and with trials: plan planned for."""
    choice = runner.choice
    if not weighs_schedules(exp, env, choice, len(runner.builds), resumed):
        return None

    def kept(schedule: str, line: str) -> None:
        weighed = cache_weighed(choice, schedule, line, env)
        if runner.planner is not None and schedule != choice.schedule:
            runner.planner.follow(*plan_basis(exp, env, weighed, runner.builds, runner.roofline))
        runner.schedule_kept(schedule, weighed.reason)
        if not runner.options.quiet:
            runner.console.print(f"schedule: {line}", highlight=False)

    return WeighSchedules(choice.schedule, WEIGHING_SHARE * (exp.budget_s or 0.0), kept)


def places_for_builds(runner: Runner) -> contextlib.AbstractContextManager[Places | None]:
    """Equivalent places for an A/B's builds (measure.builds.places); none for one build."""
    return places_for(runner.builds) if len(runner.builds) > 1 else contextlib.nullcontext()


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
    run_time = RunTime(options.started, exp.budget_s)
    with run_time.phase("probes"):
        worker_env, env, threads = worker_environment(
            options.blas, exp.threads, measuring=run_time.phase(ONE_TIME)
        )
    schedule = choose_schedule(exp.schedule, env, worker_env, threads.threads)
    if SCHEDULES[schedule.schedule].one_core_each:
        # workers at once, one core each: one BLAS thread apiece, whatever threads chose
        worker_env, env = thread_env(worker_env, 1), replace(env, threads=1)
    worker_env, env, threads, schedule = configuration_from_runs(
        exp, cells, options, console, (worker_env, env, threads, schedule)
    )
    if threads.reason and not options.quiet and not SCHEDULES[schedule.schedule].one_core_each:
        console.print(f"BLAS threads: {threads.threads} ({threads.reason})", highlight=False)
    if not options.quiet:
        console.print(schedule.line, highlight=False)
    if warning := blas_warning(env):
        console.print(f"[yellow]warning[/]: {warning}")
    run_id, done = resume_state(resume, exp) if resume else (new_run_id(), DoneWork())
    with run_time.phase(ONE_TIME):
        peak = measured_peak(worker_env, env)
    runner = Runner(exp, options, run_id, console, peak, worker_env, run_time, schedule)
    if exp.trials is Trials.PLAN:
        runner.planner = run_planner(exp, cells, env, schedule, runner.builds, runner.roofline)
    if len(runner.builds) > 1:
        runner.spreads = pair_spreads(exp, env, schedule, runner.build_names)
    runner.weigh = schedule_weighing(exp, cells, env, runner, resume is not None)
    if runner.weigh and not options.quiet:
        console.print(
            f"schedule: auto weighs sequential rounds against duets on the first size's rows "
            f"(the one dropped costs at most {runner.weigh.cap_s:.0f} s)",
            highlight=False,
        )
    with run_time.phase("probes"):
        before = preflight()
    with places_for_builds(runner) as places, ResultsWriter(options.out) as writer:
        runner.workers.places = places
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
                runner.run(plan_jobs(cells, done), writer, sampler)
            except KeyboardInterrupt:
                console.print(
                    f"[yellow]interrupted[/]: every finished trial is in {options.out}; "
                    f"finish with: fusebench run {exp.file} --resume {options.out}"
                )
                return 130
            finally:
                writer.write(sampler.summary(run_id))
                said = runner.planner.said_s if runner.planner else None
                writer.write(run_time.record(run_id, said))
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
    roofline = runner.roofline
    if roofline.above_peak and env.backend == "cpu":
        console.print(
            f"[yellow]warning[/]: {raise_cached_peak(env, roofline.best, roofline.above_peak)}"
        )
    return 0
