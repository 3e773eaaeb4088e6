"""One worker process, driven one command at a time (see job.py), with its stderr kept for a failure
message; a model's workers started where a schedule places them (`WorkerMaker`)."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ...core.experiment import Experiment, ModelSpec
from ..job import (
    ATOL_BY_DTYPE,
    Command,
    Done,
    Gate,
    Loaded,
    Recorded,
    Result,
    WorkerJob,
    decode_event,
)
from ..launch import package_dirs
from ..machine.env import child_command, compile_failure, own_root
from ..machine.placement import placement_of
from .schedules.base import build_turns

if TYPE_CHECKING:
    from .schedules.base import RoundSchedule


@dataclass(frozen=True)
class Build:
    """The fusebench tree a worker imports: this one ("current"), or another checkout
    (`run --against`), and the Python that runs it: this one, or another environment's
    (`run --against-env`)."""

    name: str
    # None: this build; else another checkout, whose workers import its tree alone (child_command)
    root: Path | None = None
    commit: str | None = None
    dirty: bool | None = None
    ref: str | None = None  # what the user named: a git ref or a path (run --against REF)
    env: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # None: this interpreter; else another environment's (run --against-env)
    python: str | None = None
    label: str | None = None  # how tables name the build when a commit does not, e.g. "mlx 0.31.2"
    slot: str = ""  # the place its tree was copied to for an A/B (measure.builds.places)
    # the versions that tell environments apart
    packages: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    @property
    def package(self) -> str:
        """The name the build's code imports as: `fusebench` (mapped to bench/ by the checkout's
        pyproject.toml, or linked to it in a checkout from before the map), or `bench` in a checkout
        from before the one import package, whose workers may still speak this protocol."""
        if self.root is None or (self.root / "fusebench").is_dir():
            return "fusebench"
        return "fusebench" if "fusebench" in package_dirs(self.root) else "bench"

    def command(self, module: str) -> list[str]:
        """The command that runs the build's `module` in a child process."""
        return child_command(f"{self.package}.{module}", self.interpreter, self.root)

    def worker_env(self, base: dict[str, str]) -> dict[str, str]:
        """The workers' environment: `base` and what the build sets (run --against-env)."""
        return {**base, **self.env, "PYTHONUNBUFFERED": "1"}


CURRENT = Build("current")
# A worker whose input closed exits once its command is done; one still running this long after is
# killed.
STOP_WAIT_S = 10.0


class WorkerFailed(Exception):
    def __init__(self, cell_key: str | None, reason: str) -> None:
        super().__init__(reason)
        self.cell_key = cell_key
        self.reason = reason


class WorkerSession:
    """A worker process for one model and build: `loaded()` once, then `request(command)` for each
    command."""

    def __init__(
        self, job: WorkerJob, build: Build, env: dict[str, str], cpus: Sequence[int] | None = None
    ) -> None:
        self.build = build
        command, worker_env = build.command("measure.worker"), build.worker_env(env)
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=worker_env,
            cwd=build.root,
            text=True,
            # Pinning keeps the worker off the cores left for the runner and the OS (Linux only).
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        tree = build.root or own_root()
        self.placement = placement_of(command, worker_env, tree, self.process.pid, build.slot)
        self.set, self.turn = 0, 0  # which set of workers of the run, started in which turn
        self.events: queue.Queue = queue.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        threading.Thread(target=self._pump_events, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        self._send(job.to_json())

    def _send(self, line: str) -> None:
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except OSError:
            pass  # the worker is gone; the next wait reports why

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

    def _next(
        self, cell: str | None, deadline: float, timeout_s: float
    ) -> Loaded | Recorded | Done:
        while True:
            if time.monotonic() > deadline:
                raise WorkerFailed(cell, f"timed out after {timeout_s:g} s")
            try:
                event = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            if event is None:
                raise WorkerFailed(cell, self.failure_reason())
            return event

    def loaded(self, deadline: float, timeout_s: float) -> Loaded:
        event = self._next(None, deadline, timeout_s)
        if not isinstance(event, Loaded):
            raise WorkerFailed(None, f"worker said {event!r} before loading its model")
        return event

    def request(self, command: Command, deadline: float, timeout_s: float) -> list[Result]:
        """The results one command produces; WorkerFailed if the worker dies or the cell's time runs
        out."""
        self.send(command)
        return self.collect(command, deadline, timeout_s)

    def send(self, command: Command) -> None:
        """Start a command without waiting for it (a duet starts two workers' trials together)."""
        self._send(command.to_json())

    def collect(self, command: Command, deadline: float, timeout_s: float) -> list[Result]:
        """The results of the command sent last, once the worker says it is done."""
        results = []
        while not isinstance(event := self._next(command.cell.key, deadline, timeout_s), Done):
            if isinstance(event, Recorded):
                results.append(event.result)
        return results

    def failure_reason(self) -> str:
        code = self.process.wait()
        what = (
            "killed by the OS (out of memory?)" if code in (-9, 137) else f"exited with code {code}"
        )
        lines = [line.strip() for line in self.stderr_tail if line.strip()]
        prefix = "worker" if self.build.name == "current" else f"{self.build.name} build's worker"
        if compiled := compile_failure(lines):
            return f"{prefix} {what}: {compiled}"
        exceptions = [
            line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line)
        ]
        last = (exceptions or lines or [""])[-1]
        return f"{prefix} {what}" + (f": {last.strip()}" if last else "")

    def close_input(self) -> None:
        """Close the worker's input: it finishes what it runs and exits."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()


def worker_job(model: ModelSpec, exp: Experiment) -> WorkerJob:
    """The job a worker of this experiment is started with, for one of its models."""
    return WorkerJob(
        model=model,
        variants=exp.variants,
        prefill_step_size=exp.prefill_step_size,
        seed=exp.seed,
        correctness=Gate(
            reference=exp.correctness.reference,
            atol=exp.correctness.atol
            if exp.correctness.atol is not None
            else ATOL_BY_DTYPE[model.dtype],
            tokens=exp.correctness.tokens,
        ),
        plugins=exp.plugins,
    )


def stop_all(workers: Sequence[WorkerSession], *, kill: bool = False) -> None:
    """End the workers together: every input closed first, so they all finish and exit at once,
    then each waited for (and killed past STOP_WAIT_S); with `kill`, at once (after a failure).
    Stopping a pair costs one worker's exit, not two in turn."""
    running = [worker for worker in workers if worker.process.poll() is None]
    if not kill:
        for worker in running:
            worker.close_input()
        deadline = time.monotonic() + STOP_WAIT_S
        for worker in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for worker in running:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


@contextlib.contextmanager
def stopped_after(workers: Sequence[WorkerSession]) -> Iterator[Sequence[WorkerSession]]:
    """The workers, stopped when the block ends: closed so they finish, or killed when it raised
    (a failure, a timeout, Ctrl-C)."""
    try:
        yield workers
    except BaseException:
        stop_all(workers, kill=True)
        raise
    stop_all(workers)


class PlaceMaker(Protocol):
    """Where the next set of an A/B's workers starts (measure.builds.places.Places)."""

    def next(self) -> tuple[Build, ...]: ...


@dataclass
class WorkerMaker:
    """Starts a model's workers for a schedule: one per build (a duet of variants: two), each where
    the schedule places it, loading the model; with `places` (an A/B), each set of workers in
    fresh copies of the builds' trees (measure.builds.places)."""

    exp: Experiment
    builds: tuple[Build, ...]
    worker_env: dict[str, str]  # the environment variables each worker starts with
    cores: tuple[int, int]  # the two cores a duet runs on
    pinned: Sequence[int] | None  # run --pin: the CPUs a sequential worker runs on
    places: PlaceMaker | None = None
    sets: int = 0  # the sets of workers started so far in the run

    def start(
        self, model: ModelSpec, schedule: RoundSchedule, pair: int = 0
    ) -> list[WorkerSession]:
        """The workers, in the schedule's order, started in the turns a cell's `pair` gives them
        (its fresh pairs, counted from 0: schedules.base.build_turns): the two compared builds'
        workers swap every pair, the control's moves every two. The
        worker started second, loading beside the first, ran slower for its whole life in some
        pairs: on the Xeon VM after 11 hours up, in 4 of 15 pairs the second-started build's
        trials read 8.6-11.6% slower, never the first's, an offset the same build took at every
        pair (results/start-order). Rotating spreads it over the builds, where the interval's
        spread between processes holds it. Each worker knows its set (`WorkerSession.set`,
        counted through the run) and its turn in it."""
        builds = schedule.worker_builds(self.places.next() if self.places else self.builds)
        cpus = schedule.places(len(builds), self.cores, self.pinned)
        job = worker_job(model, self.exp)
        order = list(range(len(builds)))
        turns = build_turns(len(builds), pair)
        started = {i: WorkerSession(job, builds[i], self.worker_env, cpus[i]) for i in turns}
        for turn, i in enumerate(turns):
            started[i].set, started[i].turn = self.sets, turn
        self.sets += 1
        return [started[i] for i in order]
