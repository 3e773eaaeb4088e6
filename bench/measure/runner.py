"""The runner: expands an experiment into per-model jobs, runs each in its own worker process, and appends
every record to the results file as it arrives.

A model that will not fit is skipped before anything is loaded; a worker that crashes, runs out of memory or
passes the per-cell timeout costs an `error` record for that cell, and the suite goes on with a fresh worker.
"""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from ..core.records import ResultsError, new_run_id, run_header
from ..core.results import Results, ResultsWriter, read_results
from ..core.spec import Cell, Experiment, ModelSpec, shard_cells
from ..present.format import format_count
from .env import blas_warning
from .job import CellJob, CellStarted, Gate, Loaded, ModelRef, Recorded, WorkerJob, decode_event
from .memory import memory_verdict, model_config
from .plugins import load_plugins
from .probe import probe_in, worker_environment
from .roofline import achieved, cell_work, peak_for, percent_of_peak
from .worker import ATOL_BY_DTYPE


@dataclass
class ModelJob:
    model: ModelSpec
    cells: list[Cell]
    done: set[tuple] = field(default_factory=set)


@dataclass
class RunOptions:
    out: Path
    blas: str = "auto"
    quiet: bool = False
    shard: tuple[int, int] = (1, 1)
    dry_run: bool = False


def cell_meta(cell: Cell, run_id: str) -> dict[str, Any]:
    """The fields every record of a cell carries, so each line of the results file stands on its own."""
    m, w = cell.model, cell.workload
    return {
        "run_id": run_id,
        "cell": cell.key,
        "model": m.source,
        "model_key": m.key,
        "size": m.label,
        "layers": m.layers,
        "dtype": m.dtype,
        "quantize": m.quantize,
        "prompt_tokens": w.prompt_tokens,
        "gen_tokens": w.gen_tokens,
        "batch": w.batch,
        "workload": w.label,
    }


def done_keys(results: Results, run_id: str) -> set[tuple]:
    """What a resumed run must not repeat."""
    keys: set[tuple] = set()
    for r in results.records:
        if r.get("run_id") != run_id:
            continue
        if r["kind"] == "trial":
            keys.add((r["cell"], r["variant"], r["warmup"], r["round"]))
        elif r["kind"] in ("correctness", "kernel"):
            keys.add((r["cell"], "correctness" if r["kind"] == "correctness" else "kernels"))
        elif r["kind"] == "depth":
            keys.add((r["cell"], r["variant"], "depth", r["round"]))
        elif r["kind"] in ("skip", "error"):
            keys.add((r["cell"], "closed"))
    return keys


def plan_jobs(cells: Iterable[Cell], done: set[tuple]) -> list[ModelJob]:
    jobs: dict[str, ModelJob] = {}
    for cell in cells:
        if (cell.key, "closed") in done:
            continue
        jobs.setdefault(cell.model.key, ModelJob(cell.model, [], done)).cells.append(cell)
    return list(jobs.values())


def remaining_trials(job: ModelJob, exp: Experiment) -> int:
    total = 0
    for cell in job.cells:
        for variant in exp.variants:
            total += sum((cell.key, variant, True, w) not in job.done for w in range(exp.warmup))
            total += sum((cell.key, variant, False, r) not in job.done for r in range(exp.trials))
    return total


def worker_job(job: ModelJob, exp: Experiment) -> WorkerJob:
    m = job.model
    keys = {c.key for c in job.cells}
    return WorkerJob(
        model=ModelRef(m.preset, m.path, m.layers, m.dtype, m.quantize),
        cells=tuple(CellJob(c.key, c.workload.prompt_tokens, c.workload.gen_tokens, c.workload.batch)
                    for c in job.cells),
        variants=exp.variants,
        trials=exp.trials,
        warmup=exp.warmup,
        prefill_step_size=exp.prefill_step_size,
        seed=exp.seed,
        depths=tuple(exp.depths),
        correctness=Gate(
            reference=exp.correctness.reference,
            atol=exp.correctness.atol if exp.correctness.atol is not None else ATOL_BY_DTYPE[m.dtype],
            tokens=exp.correctness.tokens,
        ),
        plugins=exp.plugins,
        done=frozenset(k for k in job.done if k[0] in keys),
    )


class WorkerFailed(Exception):
    def __init__(self, cell_key: str | None, reason: str) -> None:
        super().__init__(reason)
        self.cell_key = cell_key
        self.reason = reason


class Worker:
    """One worker process and the threads that read its events and keep the tail of its stderr."""

    def __init__(self, job: WorkerJob, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.measure.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, "PYTHONUNBUFFERED": "1"},
            text=True,
        )
        self.events: queue.Queue = queue.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        threading.Thread(target=self._pump_events, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        self.process.stdin.write(job.to_json())
        self.process.stdin.close()

    def _pump_events(self) -> None:
        for line in self.process.stdout:
            try:
                self.events.put(decode_event(line))
            except ValueError:
                self.stderr_tail.append(line.rstrip())
        self.events.put(None)

    def _pump_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr_tail.append(line.rstrip())

    def failure_reason(self) -> str:
        code = self.process.wait()
        what = "killed by the OS (out of memory?)" if code in (-9, 137) else f"exited with code {code}"
        lines = [line.strip() for line in self.stderr_tail if line.strip()]
        exceptions = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line)]
        last = (exceptions or lines or [""])[-1]
        return f"worker {what}" + (f": {last.strip()}" if last else "")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Runner:
    def __init__(
        self, exp: Experiment, options: RunOptions, run_id: str, console: Console, peak: dict[str, Any] | None
    ) -> None:
        self.exp = exp
        self.peak = peak
        self.cells = {cell.key: cell for cell in exp.cells()}
        self.work: dict[str, dict[str, Any]] = {}
        self.options = options
        self.run_id = run_id
        self.console = console
        self.meta = {cell.key: cell_meta(cell, run_id) for cell in exp.cells()}

    def run(self, jobs: list[ModelJob], writer: ResultsWriter, worker_env: dict[str, str]) -> None:
        total = sum(remaining_trials(job, self.exp) for job in jobs)
        with self._progress() as progress:
            task = progress.add_task("starting", total=total)
            for job in jobs:
                self._run_model(
                    job,
                    writer,
                    worker_env,
                    lambda text, advance=0: progress.update(task, description=text, advance=advance),
                )

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

    def _write(self, writer: ResultsWriter, cell_key: str, record: dict[str, Any]) -> None:
        if record["kind"] == "trial":
            record = {**record, **self._roofline(cell_key, record)}
        writer.write({"kind": record["kind"], **self.meta[cell_key], **record})

    def _work(self, cell_key: str) -> dict[str, Any]:
        if cell_key not in self.work:
            m, w = self.cells[cell_key].model, self.cells[cell_key].workload
            self.work[cell_key] = cell_work(
                model_config(m), w.prompt_tokens, w.gen_tokens, w.batch, dtype=m.dtype, quantize=m.quantize
            )
        return self.work[cell_key]

    def _roofline(self, cell_key: str, trial: dict[str, Any]) -> dict[str, Any]:
        """Achieved TFLOP/s and GB/s of a trial, and their share of this machine's peak."""
        rates = achieved(trial, self._work(cell_key))
        return {**rates, **percent_of_peak(rates, self.peak, self.cells[cell_key].model.dtype)}

    def _close_cells(self, writer: ResultsWriter, cells: list[Cell], kind: str, reason: str) -> None:
        for cell in cells:
            self._write(writer, cell.key, {"kind": kind, "reason": reason})
        self.console.print(f"[yellow]{kind}[/]: {cells[0].model.size}: {reason}")

    def _run_model(self, job: ModelJob, writer: ResultsWriter, env: dict[str, str], update: Callable) -> None:
        fits, reason = memory_verdict(job.model, self.exp)
        if not fits:
            self._close_cells(writer, job.cells, "skip", reason)
            return
        pending = list(job.cells)
        while pending:
            update(f"{job.model.size}: loading weights")
            try:
                self._run_worker(ModelJob(job.model, pending, job.done), writer, env, update)
                return
            except WorkerFailed as failure:
                failed = [c for c in pending if failure.cell_key in (None, c.key)]
                self._close_cells(writer, failed, "error", failure.reason)
                pending = [c for c in pending if c not in failed]

    def _run_worker(self, job: ModelJob, writer: ResultsWriter, env: dict[str, str], update: Callable) -> None:
        worker = Worker(worker_job(job, self.exp), env)
        clock = CellClock(self.exp.timeout_s)
        try:
            while True:
                if clock.expired():
                    raise WorkerFailed(clock.cell, f"timed out after {self.exp.timeout_s:g} s")
                try:
                    event = worker.events.get(timeout=1.0)
                except queue.Empty:
                    continue
                if event is None:
                    if worker.process.wait() != 0:
                        raise WorkerFailed(clock.cell, worker.failure_reason())
                    return
                self._handle(event, writer, update, clock)
        finally:
            worker.stop()

    def _handle(self, event: CellStarted | Loaded | Recorded, writer: ResultsWriter, update: Callable,
                clock: CellClock) -> None:
        if isinstance(event, CellStarted):
            clock.start(event.key)
        elif isinstance(event, Loaded):
            if not self.options.quiet:
                self.console.print(
                    f"{self.meta[event.cell]['size']}: loaded {format_count(event.parameters)} parameters "
                    f"({event.weight_bytes / 2**30:.2f} GiB) in {event.load_s:.1f} s",
                    highlight=False,
                )
        else:
            self._record(event.record, writer, update, clock.cell)

    def _record(self, record: dict[str, Any], writer: ResultsWriter, update: Callable, cell: str) -> None:
        self._write(writer, cell, record)
        if record["kind"] == "trial":
            meta = self.meta[cell]
            label = "warmup" if record["warmup"] else f"round {record['round'] + 1}/{self.exp.trials}"
            update(f"{meta['size']} {meta['workload']} {record['variant']} {label}", advance=1)
        elif record["kind"] == "correctness" and not record["passed"]:
            self.console.print(
                f"[red]correctness[/]: {record['variant']} differs from {record['reference']} on {cell}: "
                f"max |Δlogit| {record['max_abs_err']:.3g} > {record['atol']:.3g}"
            )


class CellClock:
    """The cell a worker is measuring and when its time runs out; each cell gets the experiment's timeout anew."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.cell: str | None = None
        self.deadline = float("inf")

    def start(self, cell: str) -> None:
        self.cell, self.deadline = cell, time.monotonic() + self.timeout_s

    def expired(self) -> bool:
        return time.monotonic() > self.deadline


def default_out_path(exp: Experiment) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{exp.name}-{stamp}.jsonl"


def measured_peak(worker_env: dict[str, str], env: dict[str, Any]) -> dict[str, Any] | None:
    """The roof to hold each cell against: on a CPU, measured under the workers' BLAS; on a GPU, the known chip."""
    probe = probe_in(worker_env, "peaks") if env["backend"] == "cpu" else None
    return peak_for(env, probe)


def resume_state(path: Path, exp: Experiment) -> tuple[str, set[tuple]]:
    results = read_results([path])
    runs = results.runs
    if not runs:
        raise ResultsError(f"{path}: no run header; it is not a fusebench results file")
    run_id, header = next(iter(runs.items()))
    if header["experiment"]["sha256"] != exp.sha256:
        raise ResultsError(
            f"{path}: was recorded from a different version of {exp.file} (sha256 differs); "
            "resume with the same experiment file, or start a new run"
        )
    return run_id, done_keys(results, run_id)


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
        console.print(f"variant [bold]{name}[/]: " + ", ".join(f"{op}={v}" for op, v in ops.items()))
    trials = len(cells) * len(exp.variants) * (exp.trials + exp.warmup)
    console.print(f"{trials} trials ({exp.warmup} warmup + {exp.trials} timed rounds per variant and cell)")


def honest_warnings(exp: Experiment) -> list[str]:
    warnings = []
    if exp.warmup == 0:
        warnings.append("warmup is 0: the first timed round of each variant includes JIT and compile time")
    if exp.trials < 3:
        warnings.append(f"trials is {exp.trials}: fewer than 3 paired rounds give no meaningful confidence interval")
    return warnings


def run_experiment(exp: Experiment, options: RunOptions, console: Console, resume: Path | None = None) -> int:
    cells = shard_cells(exp.cells(), *options.shard)
    if options.dry_run:
        print_dry_run(exp, cells, console)
        return 0
    for warning in honest_warnings(exp):
        console.print(f"[yellow]warning[/]: {warning}")
    worker_env, env = worker_environment(options.blas)
    if warning := blas_warning(env):
        console.print(f"[yellow]warning[/]: {warning}")
    run_id, done = resume_state(resume, exp) if resume else (new_run_id(), set())
    peak = measured_peak(worker_env, env)
    runner = Runner(exp, options, run_id, console, peak)
    with ResultsWriter(options.out) as writer:
        experiment = {"name": exp.name, "file": exp.file, "sha256": exp.sha256, "content": exp.content}
        plugins = [{"path": str(p.path), "sha256": p.sha256} for p in load_plugins(exp.plugins)]
        writer.write(run_header(run_id, experiment, env, peak=peak, shard=f"{options.shard[0]}/{options.shard[1]}",
                                resumed=resume is not None, plugins=plugins))
        console.print(f"results -> {options.out}  ({env['backend']}, {env['device']}, BLAS {env['blas']})")
        try:
            runner.run(plan_jobs(cells, done), writer, worker_env)
        except KeyboardInterrupt:
            console.print(
                f"[yellow]interrupted[/]: every finished trial is in {options.out}; "
                f"finish with: fusebench run {exp.file} --resume {options.out}"
            )
            return 130
    return 0
