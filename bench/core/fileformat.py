"""The results file's format: its record kinds and the fields each must carry, the frame's columns
and metrics, the format version and the upgrade of older files to it, and the records of
`fusebench ops` and `fusebench kernels`.

Every writer (the runner, `fusebench ops`) stamps the version here and every reader (report, check,
baseline) checks fields and upgrades here, so the format is defined once; the records of a run and
of a cell are declared in core.header and core.cell.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .cell import (
    Agreement,
    CorrectnessRecord,
    DepthRecord,
    DepthSpeed,
    ErrorRecord,
    KernelFact,
    ShareRecord,
    SiteCalls,
    SkipRecord,
    StopRecord,
    TrialRecord,
)
from .errors import UserError
from .typed import required_fields, written_fields

T = TypeVar("T")

RECORD_KINDS = (
    "run",
    "trial",
    "correctness",
    "depth",
    "op",
    "share",
    "kernel",
    "site",
    "stop",
    "load",
    "time",
    "skip",
    "error",
    "fusion",
    "step",
    "replay",
    "confirm",
    "variant",
    "worker",
)


@dataclass(frozen=True, kw_only=True)
class OpRecord:
    """One timed sample of one op variant at one case (`fusebench ops`). Fields with defaults are
    those the statistics do not read (they name and describe the case)."""

    KIND: ClassVar[str] = "op"

    run_id: str
    op: str
    variant: str
    reference: str  # the op's reference variant, which the speed is paired against
    shape_label: str  # names the case: the sizes that produce it, its role, its shapes and dtype
    size: str = ""
    sizes: tuple[str, ...] = ()
    role: str = ""
    shape: tuple[int, ...] = ()
    arg_shapes: tuple[tuple[int, ...], ...] = ()
    dtype: str = ""
    round: int
    iterations: int = 1  # calls per sample
    seconds: float  # per call
    bytes: int  # read and written by one call
    flops: int | None  # of one call; None for pure data movement
    gbps: float | None = None
    gflops: float | None = None
    max_abs_err: float  # the output's largest deviation from the reference variant's
    note: str | None = None  # what the op's declaration says about this shape


# The columns a results frame adds to the records it reads (`Results.frame`).
FRAME_COLUMNS = (
    "machine",  # its run's machine label
    "trials",  # its run's stopping rule (core.experiment.Trials)
    "clock",  # the clock its run's intervals use (Clock)
    # each metric on the process CPU clock (cpu_clock_tps, analysis.stats.timed_trials)
    "prefill_cpu_tps",
    "gen_cpu_tps",
)
# A field of a trial, depth, correctness, op, share, site or kernel record, or a column a frame
# adds, as readers key on it: the column labels of `Results.frame`. Each field is declared once, in
# its record (core.cell, OpRecord above); Column.PREFILL_TPS is "prefill_tps".
COLUMN_RECORDS = (TrialRecord, ShareRecord, Agreement, DepthSpeed, OpRecord, SiteCalls, KernelFact)
Column = StrEnum(
    "Column",
    {
        name.upper(): name
        for names in (*map(written_fields, COLUMN_RECORDS), FRAME_COLUMNS)
        for name in names
    },
)


# Throughput metrics, all tokens/s and bigger-is-better, and the trial field holding each.
METRICS = ("prefill", "gen")
METRIC_COLUMNS = {"prefill": Column.PREFILL_TPS, "gen": Column.GEN_TPS}
# Each metric on the process CPU clock: the tok/s field, its wall seconds and CPU seconds, and the
# derived column (cpu_clock_tps).
CPU_CLOCK_COLUMNS = {
    "prefill": (Column.PREFILL_TPS, Column.PREFILL_S, Column.PREFILL_CPU_S, Column.PREFILL_CPU_TPS),
    "gen": (Column.GEN_TPS, Column.GEN_S, Column.GEN_CPU_S, Column.GEN_CPU_TPS),
}


def cpu_clock_tps(tps: T, wall_s: T, cpu_s: T) -> T:
    """A trial's throughput on the process CPU clock: the same tokens over the worker's CPU seconds
    (tok/s x wall s / CPU s). Arithmetic only, so one float or a whole column."""
    return tps * wall_s / cpu_s


# A trial's time to first token as mlx-lm's stream_generate reads it (after queuing the first decode
# step), and that as mlx-lm's "prompt_tps". Optional: trials recorded before them (and a
# `run --against` reference build of an older commit) lack them, so readers show them only where
# they are present.
TTFT_FIELDS = (Column.TTFT_S, Column.TTFT_TPS)
# A trial's roofline (measure.machine.roofline): achieved rates and their share of the machine's
# peak.
ROOFLINE_FIELDS = (
    Column.PREFILL_TFLOPS,
    Column.GEN_GBPS,
    Column.PREFILL_PCT_OF_PEAK,
    Column.GEN_PCT_OF_PEAK,
)
# What describes a cell, beside its measurements.
CELL_FIELDS = (
    Column.MODEL_KEY,
    Column.SIZE,
    Column.WORKLOAD,
    Column.PROMPT_TOKENS,
    Column.GEN_TOKENS,
    Column.BATCH,
    Column.DTYPE,
    Column.QUANTIZE,
)


# What the readers key on, per kind: a record lacking one is bad input, reported with its file, not
# a traceback.
# (Kernel facts and switched sites are left out: `fusebench kernels` writes them without a cell.)
REQUIRED_FIELDS = {
    record.KIND: required_fields(record)
    for record in (
        TrialRecord,
        CorrectnessRecord,
        DepthRecord,
        OpRecord,
        ShareRecord,
        StopRecord,
        SkipRecord,
        ErrorRecord,
    )
}


# The results format the run header's "format" field names. Each version is what readers must know
# to upgrade it:
# 1: the first build (no "format" field, no roofline: no "peak" in the header);
# 2: a trial's roofline fields, and the machine's "peak" in the header (no "format" field either);
# 3: runs drive workers trial by trial: headers carry "builds", "plugins", "preflight" and the env's
#    BLAS "threads"; trials their "build" (and step_s, above_peak); stop, load and kernel records.
#    Today's writers add "format".
# Optional fields added since (the TTFT fields) need no version: readers show them only where
# present.
FORMAT = 4


# One line of a results file as parsed: a JSON object whose "kind" says which fields it holds. The
# store and `upgrade` handle it whole; readers read it as the type that wrote it (core.typed).
Record = dict[str, Any]


class ResultsError(UserError):
    """A results file that cannot be used; the message names the file (and line)."""


class Clock(StrEnum):
    """The clock a run's intervals use (the header's `schedule_choice.clock`; chosen by
    measurement, measure.run.pilot): WALL, the trial's wall seconds (what tok/s means); CPU, the
    worker process's CPU seconds, which leave out what a KVM hypervisor stole and what other
    processes took. tok/s columns are always the wall clock's. Headers without it read as WALL."""

    WALL = "wall"
    CPU = "cpu"


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def header_format(header: Record) -> int:
    """The format a run header was written in: its "format" field, else inferred from what versions
    1 and 2 hold."""
    if "format" in header:
        if not isinstance(header["format"], int) or isinstance(header["format"], bool):
            raise ResultsError(
                f"run {header.get('run_id', '?')}: results format "
                f"{header['format']!r} is not a version"
            )
        return header["format"]
    if "builds" in header or "threads" in (header.get("env") or {}):
        # the field came after these (an ops header has no builds, but its env names the threads)
        return 3
    return 2 if "peak" in header else 1


def upgrade(record: Record, version: int) -> Record:
    """A record of a run written in format `version`, in today's shape: the one place readers know
    old formats.

    Fields that old formats lacked get the value today's writer gives when it has nothing to say (a
    header without a peak, a build with no reference, BLAS threads not set); what an old run never
    measured (step times, roofline rates of format 1) stays absent, as it is for today's records
    that lack it."""
    if version > FORMAT:
        raise ResultsError(
            f"run {record.get('run_id', '?')}: results format {version} is "
            f"newer than this fusebench reads ({FORMAT}); update fusebench"
        )
    if version < 2 and record.get("kind") == "run" and "rounds" not in record:
        # `fusebench ops` headers (with "rounds") have no peak in any format
        record = {**record, "peak": None}
    if version < 3:
        record = _to_3(record)
    if version < 4:
        record = _to_4(record)
    # A header names the format its records are now in, whatever it was written in.
    return {**record, "format": FORMAT} if record.get("kind") == "run" else record


def _to_3(record: Record) -> Record:
    """Format 2 -> 3: one build per run (the checkout that ran it), and BLAS threads left to the
    library."""
    if record.get("kind") == "run":
        env = {"threads": None, **(record.get("env") or {})}
        upgraded = {**record, "env": env}
        if "rounds" not in record:  # a run of the runner, not of `fusebench ops`
            current = {"commit": env.get("git_commit"), "ref": None, "dirty": env.get("git_dirty")}
            upgraded = {"plugins": [], "builds": {"current": current}, **upgraded}
        return upgraded
    if record.get("kind") in ("trial", "correctness", "depth"):
        return {**record, "build": record.get("build", "current")}
    return record


def _to_4(record: Record) -> Record:
    """Format 3 -> 4: the header names its stopping rule (`trials`, core.experiment.Trials) where it
    said only whether the rounds were fixed (`stopping`); a fixed run's budget or plan is not
    told apart from `trials: N` (the same interval), and a header without either stopped on its
    data."""
    if record.get("kind") != "run":
        return record
    upgraded = {key: value for key, value in record.items() if key != "stopping"}
    return {**upgraded, "trials": "fixed" if record.get("stopping") == "fixed" else "auto"}


def require_fields(
    path: str | Path,
    records: Iterable[Record],
    kind: str,
    fields: Sequence[str] | None = None,
) -> None:
    """Every record of `kind` carries `fields` (by default the kind's REQUIRED_FIELDS), or a
    ResultsError says which."""
    fields = REQUIRED_FIELDS[kind] if fields is None else fields
    for record in records:
        if record.get("kind", kind) != kind:
            continue
        missing = [f for f in fields if f not in record]
        if missing:
            where = ", ".join(
                f"{key} {record[key]}" for key in ("op", "variant", "round") if key in record
            )
            raise ResultsError(
                f"{path}: {kind} record ({where or '?'}) lacks field(s) {', '.join(missing)}"
            )


@dataclass(frozen=True)
class CellPlace:
    """Where a cell's record was measured: its machine, cell and build."""

    machine: str
    model_key: str
    size: str
    workload: str
    build: str


@dataclass(frozen=True)
class KernelRecord(CellPlace):
    """A stored kernel fact with the cell and machine it was recorded on."""

    fact: KernelFact


@dataclass(frozen=True)
class SiteRecord(CellPlace):
    """A stored switched name (SiteCalls) with the cell and machine it was recorded on."""

    site: SiteCalls
