"""What a results file holds: record kinds, the fields each kind must carry, the metrics, the run
header.

Every writer (the runner, `fusebench ops`) builds its header here and every reader (report, check,
baseline) checks fields here, so the format is defined once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, TypedDict, TypeVar

from .errors import UserError

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
    "skip",
    "error",
)


class Column(StrEnum):
    """A field of a trial, depth, correctness, op or share record, as readers key on it: the column
    labels of `Results.frame`, declared once (each record's fields below are drawn from these)."""

    RUN_ID = "run_id"
    MACHINE = "machine"  # not in the record: Results.frame adds its run's machine label
    # not in the record: Results.frame adds to trials how their run decided its rounds (Stopping)
    STOPPING = "stopping"
    # not in the record: Results.frame adds to trials the clock their run's intervals use (Clock)
    CLOCK = "clock"
    CELL = "cell"
    MODEL = "model"
    MODEL_KEY = "model_key"
    SIZE = "size"
    LAYERS = "layers"
    DTYPE = "dtype"
    QUANTIZE = "quantize"
    WORKLOAD = "workload"
    PROMPT_TOKENS = "prompt_tokens"
    GEN_TOKENS = "gen_tokens"
    BATCH = "batch"
    VARIANT = "variant"
    OPS = "ops"  # a trial's variant's full op assignment
    BUILD = "build"
    PROCESS = "process"  # which worker process measured a trial
    ROUND = "round"
    WARMUP = "warmup"
    PREFILL_TPS = "prefill_tps"
    GEN_TPS = "gen_tps"
    PREFILL_S = "prefill_s"
    GEN_S = "gen_s"
    PREFILL_CPU_S = "prefill_cpu_s"  # the worker process's CPU seconds over the prefill
    GEN_CPU_S = "gen_cpu_s"
    # not in the record: analysis.stats.timed_trials derives them (cpu_clock_tps)
    PREFILL_CPU_TPS = "prefill_cpu_tps"
    GEN_CPU_TPS = "gen_cpu_tps"
    STEP_S = "step_s"
    COMPILE_S = "compile_s"
    PEAK_MEMORY_BYTES = "peak_memory_bytes"
    TTFT_S = "ttft_s"
    TTFT_TPS = "ttft_tps"
    PREFILL_TFLOPS = "prefill_tflops"
    GEN_GBPS = "gen_gbps"
    PREFILL_PCT_OF_PEAK = "prefill_pct_of_peak"
    GEN_PCT_OF_PEAK = "gen_pct_of_peak"
    ABOVE_PEAK = "above_peak"
    DEPTH = "depth"
    REFERENCE = "reference"
    MAX_ABS_ERR = "max_abs_err"
    MAX_REL_ERR = "max_rel_err"
    TOKENS_CHECKED = "tokens_checked"
    TOKENS_AGREE = "tokens_agree"
    ATOL = "atol"
    PASSED = "passed"
    OP = "op"
    SHAPE_LABEL = "shape_label"
    SECONDS = "seconds"
    BYTES = "bytes"
    FLOPS = "flops"
    PHASE = "phase"
    CALL = "call"
    CALLS = "calls"
    OVERHEAD_S = "overhead_s"


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


TRIAL_FIELDS = (
    Column.RUN_ID,
    Column.CELL,
    Column.MODEL_KEY,
    Column.SIZE,
    Column.WORKLOAD,
    Column.PROMPT_TOKENS,
    Column.GEN_TOKENS,
    Column.BATCH,
    Column.VARIANT,
    Column.ROUND,
    Column.WARMUP,
    Column.PREFILL_TPS,
    Column.GEN_TPS,
)
DEPTH_FIELDS = (
    Column.RUN_ID,
    Column.MODEL_KEY,
    Column.SIZE,
    Column.BATCH,
    Column.VARIANT,
    Column.ROUND,
    Column.DEPTH,
    Column.GEN_TOKENS,
    Column.GEN_TPS,
)
CORRECTNESS_FIELDS = (
    Column.RUN_ID,
    Column.MODEL_KEY,
    Column.SIZE,
    Column.WORKLOAD,
    Column.PROMPT_TOKENS,
    Column.GEN_TOKENS,
    Column.BATCH,
    Column.VARIANT,
    Column.REFERENCE,
    Column.MAX_ABS_ERR,
    Column.MAX_REL_ERR,
    Column.TOKENS_CHECKED,
    Column.TOKENS_AGREE,
    Column.ATOL,
    Column.PASSED,
)
OP_FIELDS = (
    Column.RUN_ID,
    Column.OP,
    Column.VARIANT,
    Column.REFERENCE,
    Column.SHAPE_LABEL,
    Column.ROUND,
    Column.SECONDS,
    Column.BYTES,
    Column.FLOPS,
    Column.MAX_ABS_ERR,
)
# A trial's time to first token as mlx-lm's stream_generate reads it (after queuing the first decode
# step), and that as mlx-lm's "prompt_tps". Optional: trials recorded before them (and a
# `run --against` reference build of an older commit) lack them, so readers show them only where
# they are present.
TTFT_FIELDS = (Column.TTFT_S, Column.TTFT_TPS)
# A trial's roofline (measure.roofline): achieved rates and their share of the machine's peak.
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
# An op call of a step timed on its own (measure.shares), for the share table and the expected Δ.
SHARE_FIELDS = (
    Column.RUN_ID,
    Column.CELL,
    Column.PHASE,
    Column.OP,
    Column.VARIANT,
    Column.CALL,
    Column.CALLS,
    Column.ROUND,
    Column.SECONDS,
    Column.OVERHEAD_S,
)
# What the readers key on, per kind: a record lacking one is bad input, reported with its file, not
# a traceback.
REQUIRED_FIELDS = {
    "trial": TRIAL_FIELDS,
    "correctness": CORRECTNESS_FIELDS,
    "depth": DEPTH_FIELDS,
    "op": OP_FIELDS,
    "share": SHARE_FIELDS,
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
FORMAT = 3


# One line of a results file as parsed: a JSON object whose "kind" says which fields it holds. The
# store and `upgrade` handle it whole; readers take typed views of it (core.typed, core.headers).
Record = dict[str, Any]


class ResultsError(UserError):
    """A results file that cannot be used; the message names the file (and line)."""


# --- what today's writers write -------------------------------------------------------------------
# A header read from an older file may lack what these declare (see `upgrade`); readers read it as a
# core.headers.RunInfo, whose defaults stand for what came later.


class Env(TypedDict, total=False):
    """The environment the workers ran in (measure.env.collect_env): software, backend, machine,
    checkout."""

    fusebench: str
    mlx: str | None
    mlx_lm: str | None
    python: str
    backend: str  # "cpu", "metal" or "cuda"
    device: str
    blas: str  # the BLAS serving mlx's matmuls, with its path: "openblas (/usr/lib/...)"
    threads: int | None  # BLAS threads; None: left to the library
    cpu: str
    cores: int | None
    ram_bytes: int | None
    os: str
    hostname: str | None
    git_commit: str | None
    git_dirty: bool | None


class StoredExperiment(TypedDict):
    """The experiment a run executed, whole, so the results file stands on its own (None: a run of
    no experiment file, `fusebench kernels`)."""

    name: str
    file: str | None
    sha256: str | None
    content: str | None


class PluginFile(TypedDict):
    path: str
    sha256: str


class BuildEnvironment(TypedDict, total=False):
    """A build's Python environment, where a run compares two (run --against-env, bisect
    --package)."""

    python: str
    packages: dict[str, str]  # the versions that tell the environments apart
    label: str  # how tables name the build when a commit does not, e.g. "mlx 0.31.2"


class BuildFields(BuildEnvironment):
    """One build a run measured: the commit (None outside a git checkout), what the user named,
    uncommitted changes."""

    commit: str | None
    ref: str | None
    dirty: bool | None


class MachineLoad(TypedDict):
    """What else the machine was doing, over a second before the run: load average, and in cores,
    other processes' busy time and the hypervisor's steal time."""

    loadavg_1m: float
    cores: int | None
    other_cores: float
    steal_cores: float


class LoadSummary(TypedDict):
    """The same while the run measured, sampled every `interval_s`: means and maxima."""

    samples: int
    interval_s: float
    other_cores_mean: float
    steal_cores_mean: float
    loadavg_1m_mean: float
    other_cores_max: float
    steal_cores_max: float
    loadavg_1m_max: float


class StoredPeak(TypedDict, total=False):
    """What the header keeps of a measure.roofline.Peak."""

    name: str
    fp32_tflops: float
    bf16_tflops: float | None
    memory_gbps: float
    source: str
    confidence: str  # "published" or "approximate" (chips.yaml), "measured"


class Stopping(StrEnum):
    """How a run decided its rounds (the header's `stopping`), which says which interval is valid
    (analysis.inference): FIXED, a number set before the run (the fixed-n t interval is exact);
    ADAPTIVE, rounds added until the rows were decided (trials: auto), whose intervals must be
    confidence sequences. Headers without the field read as ADAPTIVE, the interval they were
    always read with."""

    FIXED = "fixed"
    ADAPTIVE = "adaptive"


class Clock(StrEnum):
    """The clock a run's intervals use (the header's `schedule_choice.clock`; chosen by
    measurement, measure.duet): WALL, the trial's wall seconds (what tok/s means); CPU, the worker
    process's CPU seconds, which leave out what a KVM hypervisor stole and what other processes
    took. tok/s columns are always the wall clock's. Headers without it read as WALL."""

    WALL = "wall"
    CPU = "cpu"


class StoredScheduleChoice(TypedDict):
    """measure.duet.ScheduleChoice.to_json: the schedule the run used, why, the pilot's figures,
    and the clock its intervals use and why."""

    schedule: str
    reason: str
    probes: list[dict[str, float | str]]
    cores: list[int] | None
    clock: str
    clock_reason: str


class StoredThreadChoice(TypedDict):
    """measure.threads.ThreadChoice.to_json: how `threads: auto` chose, and why."""

    threads: int
    settings: list[dict[str, float]]  # each thread count's probe (measure.threads.Setting)
    reason: str


class _Header(TypedDict):
    kind: str  # "run"
    run_id: str
    format: int
    experiment: StoredExperiment
    env: Env
    started_at: str


class RunHeader(_Header, total=False):
    """The first record of a run. The runner adds peak ... pinned; `fusebench ops` adds rounds."""

    peak: StoredPeak | None  # the roof its trials are held against
    shard: str  # "I/N"
    resumed: bool
    plugins: list[PluginFile]
    builds: dict[str, BuildFields]  # "current", and with run --against(-env) "reference"
    preflight: MachineLoad | None  # None off Linux
    pinned: bool
    rounds: int
    threads_choice: StoredThreadChoice
    schedule_choice: StoredScheduleChoice
    stopping: str  # a Stopping
    repos: dict[str, str]  # each Hugging Face repo id run -> its snapshot's commit hash


class CellFields(TypedDict):
    """What every record of a cell carries, so each line of the results file stands on its own."""

    run_id: str
    cell: str
    model: str
    model_key: str
    size: str
    layers: int | None
    dtype: str
    quantize: str | None
    prompt_tokens: int
    gen_tokens: int
    batch: int
    workload: str


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_header(run_id: str, experiment: StoredExperiment, env: Env, **extra: object) -> RunHeader:
    """The first record of a run: what ran (the experiment's name, file, sha256 and content) and
    where."""
    return {
        "kind": "run",
        "run_id": run_id,
        "format": FORMAT,
        "experiment": StoredExperiment(**experiment),
        "env": Env(**env),
        "started_at": utc_now(),
        **extra,
    }


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


# The build a record names when it is the build under test (records of a one-build run name none),
# and the one `run --against` measures it against.
CURRENT_BUILD = "current"
REFERENCE_BUILD = "reference"


# --- kernel facts ---------------------------------------------------------------------------------


@dataclass
class KernelFact:
    """One observed fact about the kernels behind an (op, variant) at one shape.

    status: for a fused-kernel probe, "fused", "fallback" or "unknown" (an mlx that cannot answer);
    for probe "graph", "single kernel", "N kernels", or "composed" when the graph has several
    kernels and none of them fused (no Compiled or mx.fast primitive).
    """

    op: str
    variant: str
    probe: str  # an op's fused-kernel probe (its probe_name), or "graph" (mx.export_to_dot)
    shape_label: str
    status: str
    reason: str
    phase: str | None = None
    head_dim: int | None = None
    # every primitive in the graph, in evaluation order
    primitives: list[str] = field(default_factory=list)
    kernels: int | None = None  # primitives that launch work (views left out)
    # the primitives among them that are fused kernels
    fused: list[str] = field(default_factory=list)
    backend: str = ""
    device: str = ""
    mlx_version: str = ""
    kind: str = "kernel"

    def to_dict(self) -> Record:
        return asdict(self)


@dataclass(frozen=True)
class SiteCalls:
    """A name an mlx-lm model calls an op through, switched while it runs (models.switched), and
    the calls through it in one prefill of the cell's prompt and in one decode step."""

    KIND: ClassVar[str] = "site"

    op: str
    site: str  # module.name, e.g. "mlx_lm.models.qwen3.swiglu"
    prefill_calls: int
    decode_calls: int


class CellPlace(TypedDict):
    """Where a cell's record was measured: what KernelRecord and SiteRecord carry beside it."""

    machine: str
    model_key: str
    size: str
    workload: str
    build: str


@dataclass(frozen=True)
class KernelRecord:
    """A stored kernel fact with the cell and machine it was recorded on."""

    machine: str
    model_key: str
    size: str
    workload: str
    build: str
    fact: KernelFact


@dataclass(frozen=True)
class SiteRecord:
    """A stored switched name (SiteCalls) with the cell and machine it was recorded on."""

    machine: str
    model_key: str
    size: str
    workload: str
    build: str
    site: SiteCalls
