"""The runner: expands an experiment into per-model jobs, runs each in its own worker process, and appends
every record to the results file as it arrives.

A model that will not fit is skipped before anything is loaded; a worker that crashes, runs out of memory or
passes the per-cell timeout costs an `error` record for that cell, and the suite goes on with a fresh worker.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from models.config import load_preset

from .env import blas_preload_env, blas_warning
from .memory import memory_verdict, model_config
from .report import print_summary
from .results import Results, ResultsError, ResultsWriter, read_results
from .roofline import achieved, cell_work, peak_for, percent_of_peak
from .spec import Cell, Experiment, ModelSpec, shard_cells
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


def size_label(model: ModelSpec) -> str:
    """`E2B`, or `E2B (2/35 layers)` for a truncated preset: a truncated model is never passed off as the real one."""
    if model.preset and model.layers:
        full = load_preset(model.preset)["num_hidden_layers"]
        if model.layers != full:
            return f"{model.size} ({model.layers}/{full} layers)"
    return model.size


def cell_meta(cell: Cell, run_id: str) -> dict[str, Any]:
    """The fields every record of a cell carries, so each line of the results file stands on its own."""
    m, w = cell.model, cell.workload
    return {
        "run_id": run_id,
        "cell": cell.key,
        "model": m.source,
        "model_key": m.key,
        "size": size_label(m),
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
        elif r["kind"] == "correctness":
            keys.add((r["cell"], "correctness"))
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


def worker_job(job: ModelJob, exp: Experiment) -> dict[str, Any]:
    m = job.model
    return {
        "model": {"preset": m.preset, "path": m.path, "layers": m.layers, "dtype": m.dtype, "quantize": m.quantize},
        "cells": [{"key": c.key, "workload": vars(c.workload)} for c in job.cells],
        "variants": exp.variants,
        "trials": exp.trials,
        "warmup": exp.warmup,
        "prefill_step_size": exp.prefill_step_size,
        "seed": exp.seed,
        "depths": list(exp.depths),
        "correctness": {
            "reference": exp.correctness.reference,
            "atol": exp.correctness.atol if exp.correctness.atol is not None else ATOL_BY_DTYPE[m.dtype],
            "tokens": exp.correctness.tokens,
        },
        "done": [list(k) for k in job.done if k[0] in {c.key for c in job.cells}],
    }


class WorkerFailed(Exception):
    def __init__(self, cell_key: str | None, reason: str) -> None:
        super().__init__(reason)
        self.cell_key = cell_key
        self.reason = reason


class Worker:
    """One worker process and the threads that read its events and keep the tail of its stderr."""

    def __init__(self, job: dict[str, Any], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.worker"],
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
        self.process.stdin.write(json.dumps(job))
        self.process.stdin.close()

    def _pump_events(self) -> None:
        for line in self.process.stdout:
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
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
        current: str | None = None
        deadline = float("inf")
        try:
            while True:
                if time.monotonic() > deadline:
                    raise WorkerFailed(current, f"timed out after {self.exp.timeout_s:g} s")
                try:
                    event = worker.events.get(timeout=1.0)
                except queue.Empty:
                    continue
                if event is None:
                    if worker.process.wait() != 0:
                        raise WorkerFailed(current, worker.failure_reason())
                    return
                current, deadline = self._handle(event, writer, update, current, deadline)
        finally:
            worker.stop()

    def _handle(self, event: dict, writer: ResultsWriter, update: Callable, current: str | None, deadline: float):
        if event["event"] == "cell":
            return event["key"], time.monotonic() + self.exp.timeout_s
        if event["event"] == "loaded":
            if not self.options.quiet:
                self.console.print(
                    f"{self.meta[event['cell']]['size']}: loaded {_count(event['parameters'])} parameters "
                    f"({event['weight_bytes'] / 2**30:.2f} GiB) in {event['load_s']:.1f} s",
                    highlight=False,
                )
            return current, deadline
        record = event["record"]
        self._write(writer, current, record)
        if record["kind"] == "trial":
            meta = self.meta[current]
            label = "warmup" if record["warmup"] else f"round {record['round'] + 1}/{self.exp.trials}"
            update(f"{meta['size']} {meta['workload']} {record['variant']} {label}", advance=1)
        elif record["kind"] == "correctness" and not record["passed"]:
            self.console.print(
                f"[red]correctness[/]: {record['variant']} differs from {record['reference']} on {current}: "
                f"max |Δlogit| {record['max_abs_err']:.3g} > {record['atol']:.3g}"
            )
        return current, deadline


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def default_out_path(exp: Experiment) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{exp.name}-{stamp}.jsonl"


def run_header(
    exp: Experiment, run_id: str, env: dict[str, Any], peak: dict[str, Any] | None, options: RunOptions, resumed: bool
) -> dict:
    return {
        "kind": "run",
        "run_id": run_id,
        "experiment": {"name": exp.name, "file": exp.file, "sha256": exp.sha256, "content": exp.content},
        "env": env,
        "peak": peak,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "shard": f"{options.shard[0]}/{options.shard[1]}",
        "resumed": resumed,
    }


def in_worker_environment(env: dict[str, str], expression: str) -> Any:
    """Evaluate `expression` (JSON-serializable) in a process started exactly as the workers are."""
    code = f"import json, bench.env as e; print(json.dumps({expression}))"
    probe = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(probe.stdout.strip().splitlines()[-1])


def worker_environment(blas: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The workers' environment (an optimized BLAS preloaded when there is one) and what it really loads."""
    env, _ = blas_preload_env(blas, os.environ)
    return env, in_worker_environment(env, "e.collect_env()")


def measured_peak(worker_env: dict[str, str], env: dict[str, Any]) -> dict[str, Any] | None:
    """The roof to hold each cell against: on a CPU, measured under the workers' BLAS; on a GPU, the known chip."""
    probe = in_worker_environment(worker_env, "e.probe_peaks()") if env["backend"] == "cpu" else None
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


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def select_models(exp: Experiment, only: str | None) -> Experiment:
    """`--only E2B,26b`: keep the models whose size label or preset is named."""
    if not only:
        return exp
    wanted = {name.strip().lower() for name in only.split(",") if name.strip()}
    known = {m.size.lower() for m in exp.models} | {(m.preset or "").lower() for m in exp.models}
    unknown = sorted(wanted - known)
    if unknown:
        choices = ", ".join(sorted({m.size for m in exp.models}))
        raise ResultsError(f"--only: {', '.join(unknown)} not in {exp.file}; choose from {choices}")
    models = tuple(m for m in exp.models if m.size.lower() in wanted or (m.preset or "").lower() in wanted)
    return dataclasses.replace(exp, models=models)


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
        writer.write(run_header(exp, run_id, env, peak, options, resumed=resume is not None))
        console.print(f"results -> {options.out}  ({env['backend']}, {env['device']}, BLAS {env['blas']})")
        try:
            runner.run(plan_jobs(cells, done), writer, worker_env)
        except KeyboardInterrupt:
            console.print(
                f"[yellow]interrupted[/]: every finished trial is in {options.out}; "
                f"finish with: fusebench run {exp.file} --resume {options.out}"
            )
            return 130
    print_summary(console, read_results([options.out]), [(c.baseline, c.new) for c in exp.comparisons])
    console.print(f"full report: fusebench report {options.out}")
    return 0
