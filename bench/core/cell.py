"""A cell's records: what a worker finds for a cell (a trial and what it measured, the variants'
agreement, decode speed at a depth, an op call's time, a kernel fact, a switched site) and the
records the runner writes of them and of how the cell ended (stopped, skipped, failed), each
declared once as the frozen dataclass that the worker sends, the runner writes and the readers get
back (core.typed).

A part marked FLAT is written inline, its fields beside the record's own, as a results file has
always held them. A field with a default is one an older writer may lack (it reads as the default);
the fields without one are what readers key on (`required_fields`), so a record lacking one is bad
input, named with its file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from .typed import FLAT

# The build a record names when it is the build under test (records of a one-build run name none),
# and the one `run --against` measures it against.
CURRENT_BUILD = "current"
REFERENCE_BUILD = "reference"
# run --against's control arm: the reference build's code in a place of its own
CONTROL_BUILD = "control"


@dataclass(frozen=True, kw_only=True)
class CellFields:
    """What every record of a cell carries, so each line of the results file stands on its own."""

    run_id: str
    cell: str
    model: str = "?"
    model_key: str
    size: str
    layers: int | None = None
    dtype: str = "?"
    quantize: str | None = None
    prompt_tokens: int
    gen_tokens: int
    batch: int
    workload: str


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What one trial measured: prefill and generation times and rates (tokens/s of the whole
    batch), each decode step's inter-token latency, the peak memory, and mlx-lm's own clock of the
    first token (see the worker's docstring)."""

    prefill_s: float | None = None  # None: a hand-written trial that records rates alone
    prefill_tps: float
    gen_s: float | None = None  # None: one generated token, no decode step
    gen_tps: float | None
    step_s: tuple[float, ...] = ()  # empty in trials of results format 1 and 2
    peak_memory_bytes: int | None = None  # the trial's
    # each phase's own peak: the prefill's, the decode steps' (the prefill's cache still held);
    # None before 2026-12-06
    prefill_peak_bytes: int | None = None
    gen_peak_bytes: int | None = None
    # mlx-lm's time to first token and its "prompt_tps"; None with no decode step queued, and from a
    # build of this protocol that predates them.
    ttft_s: float | None = None
    ttft_tps: float | None = None
    # The process's CPU seconds over prefill and gen, and when the trial began and ended (Unix
    # seconds); None from a build of this protocol that predates them.
    prefill_cpu_s: float | None = None
    gen_cpu_s: float | None = None
    started_unix_s: float | None = None
    ended_unix_s: float | None = None
    # What the machine did beside the trial, over its span (Linux; None elsewhere and before
    # 2026-12-05): every core's time the hypervisor stole, and every core's busy time that was not
    # this worker's (other processes, the harness's own parent included), in seconds.
    steal_s: float | None = None
    others_cpu_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Trial:
    """One trial of one variant: a timed round, or a warmup. `compile_s`: the whole trial's time
    when it was the variant's first (JIT and compile included), else None."""

    KIND: ClassVar[str] = "trial"

    variant: str
    # the full op assignment; None in trials written before runs recorded it
    ops: dict[str, str] | None = None
    round: int
    warmup: bool
    measured: Measured = field(metadata=FLAT)
    compile_s: float | None = None


@dataclass(frozen=True)
class Agreement:
    """One variant's logits and greedy tokens against the reference variant's, on the same
    prompt."""

    KIND: ClassVar[str] = "correctness"

    variant: str
    reference: str
    max_abs_err: float
    max_rel_err: float
    tokens_checked: int
    tokens_agree: int
    atol: float
    passed: bool


@dataclass(frozen=True)
class DepthSpeed:
    """One variant's decode speed after a prefill to a KV depth."""

    KIND: ClassVar[str] = "depth"

    variant: str
    round: int
    depth: int
    gen_tokens: int
    gen_s: float
    gen_tps: float


@dataclass(frozen=True)
class ShareTime:
    """One op call of a step (`phase`: prefill or decode) timed on its own: seconds per call of one
    implementation (`variant`), the calls per step, and mx.eval's fixed cost measured in the same
    round (measure.ops.shares)."""

    KIND: ClassVar[str] = "share"

    phase: str
    op: str
    variant: str
    call: str
    calls: int
    round: int
    seconds: float
    overhead_s: float


@dataclass(frozen=True)
class KernelFact:
    """One observed fact about the kernels behind an (op, variant) at one shape.

    status: for a fused-kernel probe, "fused", "fallback" or "unknown" (an mlx that cannot answer);
    for probe "graph", "single kernel", "N kernels", or "composed" when the graph has several
    kernels and none of them fused (no Compiled or mx.fast primitive).
    """

    KIND: ClassVar[str] = "kernel"

    op: str
    variant: str
    probe: str  # an op's fused-kernel probe (its probe_name), or "graph" (mx.export_to_dot)
    shape_label: str
    status: str
    reason: str
    phase: str | None = None
    head_dim: int | None = None
    # every primitive in the graph, in evaluation order
    primitives: tuple[str, ...] = ()
    kernels: int | None = None  # primitives that launch work (views left out)
    # the primitives among them that are fused kernels
    fused: tuple[str, ...] = ()
    backend: str = ""
    device: str = ""
    mlx_version: str = ""


@dataclass(frozen=True)
class SiteCalls:
    """A name an mlx-lm model calls an op through, switched while it runs
    (fusebench.models.switched), and the calls through it in one prefill of the cell's prompt and in
    one decode step."""

    KIND: ClassVar[str] = "site"

    op: str
    site: str  # module.name, e.g. "mlx_lm.models.qwen3.swiglu"
    prefill_calls: int
    decode_calls: int


@dataclass(frozen=True)
class Rates:
    """What a trial achieved (measure.machine.roofline): TFLOP/s of its prefill, GB/s of its
    generation (None where it did not generate)."""

    prefill_tflops: float
    gen_gbps: float | None

    def highest(self, other: Rates) -> Rates:
        """Each rate the higher of the two (one that only one side has, that side's)."""
        gens = [rate for rate in (self.gen_gbps, other.gen_gbps) if rate is not None]
        return Rates(max(self.prefill_tflops, other.prefill_tflops), max(gens, default=None))


@dataclass(frozen=True)
class PeakPercents:
    """Rates as % of the run's peak (None without a peak)."""

    prefill_pct_of_peak: float | None
    gen_pct_of_peak: float | None
    above_peak: tuple[str, ...] = ()  # the metrics whose rate exceeded the peak (format 3 on)


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """A trial as the results file holds it: its cell, what the worker measured, and what the
    runner adds: the build, the roofline (absent from results format 1), the worker process (pair)
    that ran it, and in a duet the arm beside it and its core."""

    KIND: ClassVar[str] = "trial"

    cell: CellFields = field(metadata=FLAT)
    trial: Trial = field(metadata=FLAT)
    build: str = CURRENT_BUILD
    rates: Rates | None = field(default=None, metadata=FLAT)
    of_peak: PeakPercents | None = field(default=None, metadata=FLAT)
    process: int | None = None
    beside: str | None = None
    core: int | None = None
    # In a cell whose first rounds weighed the schedules (issue 76): the schedule this trial's
    # round followed. It counts only where the cell's stop record names that schedule; None: a
    # round of the stop record's schedule.
    schedule: str | None = None


@dataclass(frozen=True, kw_only=True)
class ShareRecord:
    """An op call's time as the results file holds it: its cell, the time, the build."""

    KIND: ClassVar[str] = "share"

    cell: CellFields = field(metadata=FLAT)
    share: ShareTime = field(metadata=FLAT)
    build: str = CURRENT_BUILD
    # When an earlier run on this machine timed it (the same ops' code, mlx and BLAS threads) and
    # this run wrote that sample instead of timing the op again; None: timed by this run.
    reused_from: str | None = None


@dataclass(frozen=True, kw_only=True)
class CorrectnessRecord:
    """A variant's agreement with the reference as the results file holds it."""

    KIND: ClassVar[str] = "correctness"

    cell: CellFields = field(metadata=FLAT)
    agreement: Agreement = field(metadata=FLAT)
    build: str = CURRENT_BUILD


@dataclass(frozen=True, kw_only=True)
class DepthRecord:
    """A decode speed at a KV depth as the results file holds it."""

    KIND: ClassVar[str] = "depth"

    cell: CellFields = field(metadata=FLAT)
    depth: DepthSpeed = field(metadata=FLAT)
    build: str = CURRENT_BUILD


@dataclass(frozen=True, kw_only=True)
class KernelFactRecord:
    """A kernel fact as the results file holds it, with the cell it was observed in."""

    KIND: ClassVar[str] = "kernel"

    cell: CellFields = field(metadata=FLAT)
    fact: KernelFact = field(metadata=FLAT)
    build: str = CURRENT_BUILD


@dataclass(frozen=True, kw_only=True)
class SiteCallsRecord:
    """A switched name's calls as the results file holds them, with the cell."""

    KIND: ClassVar[str] = "site"

    cell: CellFields = field(metadata=FLAT)
    site: SiteCalls = field(metadata=FLAT)
    build: str = CURRENT_BUILD


@dataclass(frozen=True, kw_only=True)
class SkipRecord:
    """A cell the run did not measure (it would not fit, or the plan gave it no rounds), and why."""

    KIND: ClassVar[str] = "skip"

    cell: CellFields = field(metadata=FLAT)
    reason: str


@dataclass(frozen=True, kw_only=True)
class ErrorRecord:
    """A cell whose worker failed, and the worker's reason."""

    KIND: ClassVar[str] = "error"

    cell: CellFields = field(metadata=FLAT)
    reason: str


# The record each result of a worker but a trial is written as (a trial's carries the runner's
# roofline and process too: TrialRecord).
CellRecord = CorrectnessRecord | DepthRecord | ShareRecord | KernelFactRecord | SiteCallsRecord
_RECORD_OF: dict[type, type[CellRecord]] = {
    Agreement: CorrectnessRecord,
    DepthSpeed: DepthRecord,
    ShareTime: ShareRecord,
    KernelFact: KernelFactRecord,
    SiteCalls: SiteCallsRecord,
}


def cell_record(
    cell: CellFields,
    result: Agreement | DepthSpeed | ShareTime | KernelFact | SiteCalls,
    build: str,
) -> CellRecord:
    """A worker's result as its cell's record in the results file."""
    record = _RECORD_OF[type(result)]
    part = next(f.name for f in fields(record) if f.name not in ("cell", "build"))
    return record(cell=cell, build=build, **{part: result})


@dataclass(frozen=True)
class Forecast:
    """An undecided row after some rounds: the rounds that would decide it at its present estimate
    and spread (None: none would), and what they would take at the cell's pace."""

    rounds: int | None
    seconds: float | None


@dataclass(frozen=True)
class WeighedSchedule:
    """One schedule's rounds in a weighing: how many, the noisiest row's SD of a round's log ratio,
    and a round's mean seconds."""

    rounds: int
    sd: float
    round_s: float


@dataclass(frozen=True)
class ScheduleWeighing:
    """What a cell's first rounds, the schedules taking turns, measured and chose (analysis.
    schedule_gain): each schedule's rounds, the duet's gain in precision per second with its
    bounds (None: too few rounds to say), the schedule held before (`prior`) and the one kept; the
    kept schedule's rounds count toward the cell's rows, the other's are set aside."""

    sequential: WeighedSchedule
    duet: WeighedSchedule
    prior: str
    kept: str
    cap_s: float  # the most the schedule dropped could cost
    gain: float | None = None
    gain_low: float | None = None
    gain_high: float | None = None


@dataclass(frozen=True, kw_only=True)
class StopRecord:
    """Why a cell stopped adding rounds, how its rounds ran, each watched row's half-width (in
    percent, at the table's level), the pace of a round and each undecided row's forecast."""

    KIND: ClassVar[str] = "stop"

    cell: CellFields = field(metadata=FLAT)
    rounds: int
    reason: str
    # "duet" or "sequential" (a cell of a duet run that two copies did not fit ran sequentially);
    # files from before duets ran every cell sequentially
    schedule: str = "sequential"
    half_width_pct: dict[str, float] = field(default_factory=dict)
    round_s: float | None = None
    undecided: dict[str, Forecast] = field(default_factory=dict)
    weighing: ScheduleWeighing | None = None  # where the cell's first rounds weighed schedules
