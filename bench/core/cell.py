"""A cell's records: what a worker finds for a cell (a trial and what it measured, the variants'
agreement, decode speed at a depth, an op call's time) and the trial and share records the runner
writes of them, each declared once as the frozen dataclass that the worker sends, the runner writes
and the readers get back (core.typed).

A part marked FLAT is written inline, its fields beside the record's own, as a results file has
always held them. A field with a default is one an older writer may lack (it reads as the default);
the fields without one are what readers key on (`required_fields`), so a record lacking one is bad
input, named with its file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .typed import FLAT

# The build a record names when it is the build under test (records of a one-build run name none),
# and the one `run --against` measures it against.
CURRENT_BUILD = "current"
REFERENCE_BUILD = "reference"


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
    peak_memory_bytes: int | None = None
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
    round (measure.shares)."""

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
class Rates:
    """What a trial achieved (measure.roofline): TFLOP/s of its prefill, GB/s of its generation
    (None where it did not generate)."""

    prefill_tflops: float
    gen_gbps: float | None

    def highest(self, other: Rates) -> Rates:
        """Each rate the higher of the two (one that only one side has, that side's)."""
        gens = [rate for rate in (self.gen_gbps, other.gen_gbps) if rate is not None]
        return Rates(max(self.prefill_tflops, other.prefill_tflops), max(gens, default=None))


@dataclass(frozen=True)
class PeakShares:
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
    shares: PeakShares | None = field(default=None, metadata=FLAT)
    process: int | None = None
    beside: str | None = None
    core: int | None = None


@dataclass(frozen=True, kw_only=True)
class ShareRecord:
    """An op call's time as the results file holds it: its cell, the time, the build."""

    KIND: ClassVar[str] = "share"

    cell: CellFields = field(metadata=FLAT)
    share: ShareTime = field(metadata=FLAT)
    build: str = CURRENT_BUILD


@dataclass(frozen=True)
class Forecast:
    """An undecided row after some rounds: the rounds that would decide it at its present estimate
    and spread (None: none would), and what they would take at the cell's pace."""

    rounds: int | None
    seconds: float | None


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
