"""What a run will do, decided before it starts: the experiment's cells grouped into one job per
model, the comparisons a cell's stopping rule watches, the rows of its table, and the dry run's
plan (`run --dry-run`)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ...core.cell import CONTROL_BUILD, CellFields
from ...core.experiment import Cell, Experiment, ModelSpec, Schedule, Trials
from ...core.fileformat import METRICS
from ..machine.memory import memory_verdict
from .resume import DoneWork
from .schedules.order import centre_order
from .session import CURRENT, Build


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
    # run --against: the control arm, the reference's code once more in a place of its own, its
    # trials interleaved with the others' so the run reads what its setup makes of identical builds
    control: bool = False
    # time.monotonic() when the command began: budget_s counts from here, so a run's whole wall
    # time (reference tree, imports, probes, summary) is inside it
    started: float = field(default_factory=time.monotonic)


def run_builds(options: RunOptions, sequential: bool) -> list[Build]:
    """The builds a run's workers run: the current one, and with a reference build the reference
    and, where asked and the rounds are sequential, the control (a duet runs two workers at once:
    a third has no core)."""
    if options.reference is None:
        return [options.current]
    control = [replace(options.reference, name=CONTROL_BUILD)] if options.control else []
    return [options.current, options.reference, *(control if sequential else [])]


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


def table_rows(exp: Experiment, builds: Sequence[str]) -> int:
    """Rows of the table a cell's comparisons appear in, one Holm family: every model at this
    workload, both metrics, and every comparison (with a reference build every variant plus the
    pooled row)."""
    compared = len(exp.variants) + 1 if len(builds) > 1 else len(variant_pairs(exp))
    return len(exp.models) * compared * len(METRICS)


def variant_pairs(exp: Experiment) -> list[tuple[str, str]]:
    """The (baseline, new) variant pairs a cell of one build compares: the experiment's
    comparisons, or the first variant against each other one."""
    pairs = [(c.baseline, c.new) for c in exp.comparisons if c.baseline != c.new]
    if not pairs and not exp.comparisons:
        first, *others = exp.variants
        pairs = [(first, other) for other in others]
    return pairs


def variant_order(exp: Experiment) -> tuple[str, ...]:
    """The variants in a round's order: the compared ones at the centre (schedules.order)."""
    return tuple(centre_order(list(exp.variants), [(c.baseline, c.new) for c in exp.comparisons]))


def default_out_path(exp: Experiment) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{exp.name}-{stamp}.jsonl"


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
    rounds = exp.rounds_text()
    trials = len(cells) * len(exp.variants) * (exp.rounds + exp.warmup)
    order = " ".join(variant_order(exp))
    console.print(
        f"{trials} trials{'' if exp.trials is Trials.FIXED else ' at most'}: per variant and cell, "
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


def honest_warnings(exp: Experiment) -> list[str]:
    warnings = []
    if exp.warmup == 0 and exp.worker_rounds != 0:
        warnings.append(
            "warmup is 0: after each fresh worker pair, the first timed round of each variant "
            "includes JIT and compile time (a cell's first pair warms up in its correctness check)"
        )
    if exp.trials is Trials.FIXED and exp.rounds < 3:
        warnings.append(f"trials is {exp.rounds}: fewer than 3 paired rounds give no verdict")
    if (os.cpu_count() or 1) > 1 and exp.threads == os.cpu_count():
        warnings.append(
            f"threads is {exp.threads}, every core: anything else on the machine stalls a BLAS "
            "thread and the whole matmul waits (threads: auto measures which count pays here)"
        )
    return warnings
