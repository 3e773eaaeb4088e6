"""The run header, the first record of every run, and its parts: each declared once, as the frozen
dataclass the writers fill and the readers get back (core.typed: `to_record` writes it,
`from_mapping` reads it), as mlx-lm's BaseModelArgs is both a model's args and their reader.

Today's writers fill every field. A header of an older writer may lack fields
(core.fileformat.upgrade brings older formats to today's shape), and a field it lacks reads as its
default here: "?" where a table shows it, None where readers ask whether it was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .experiment import Trials
from .fileformat import FORMAT, Clock, Record, utc_now
from .text import short_commit
from .typed import from_mapping

UNKNOWN_MACHINE = "unknown machine"


@dataclass(frozen=True)
class StoredExperiment:
    """The experiment a run executed, whole, so the results file stands on its own."""

    name: str = ""
    file: str | None = None  # None: a run of no experiment file (`fusebench kernels`)
    sha256: str | None = None
    content: str | None = None


@dataclass(frozen=True)
class Env:
    """The environment the workers ran in (measure.machine.env.collect_env): software, backend,
    machine, checkout."""

    fusebench: str = "?"
    mlx: str | None = "?"
    mlx_lm: str | None = "?"
    python: str = "?"
    backend: str = "?"  # "cpu", "metal" or "cuda"
    device: str = "?"
    blas: str = "?"  # the BLAS serving mlx's matmuls, with its path: "openblas (/usr/lib/...)"
    threads: int | None = None  # BLAS threads; None: left to the library
    cpu: str = "?"
    cores: int | None = None
    ram_bytes: int | None = None
    os: str = "?"
    hostname: str | None = "?"
    git_commit: str | None = None
    git_dirty: bool | None = None
    # whether mx.compile made a fused kernel here (on a CPU it needs a C++ compiler, and without one
    # it leaves every function as it was, silently); None: not checked (runs before 2026-12-06)
    compiles: bool | None = None

    @property
    def blas_family(self) -> str:
        """The BLAS without its path ("openblas"), which varies by distro."""
        return str(self.blas).split(" (")[0]

    @property
    def machine(self) -> str:
        """Which machine, for labelling tables: results from different ones are never pooled."""
        return f"{self.hostname} · {self.device} · {self.backend} · {self.blas_family}"

    @property
    def commit(self) -> str:
        """fusebench's git commit, "?" outside a checkout."""
        return self.git_commit or "?"


@dataclass(frozen=True)
class PluginFile:
    """A plugin file the run imported, and its digest."""

    path: str = "?"
    sha256: str = "?"


@dataclass(frozen=True)
class BuildFields:
    """One build a run measured: a checkout, or another environment with its own packages (run
    --against-env, bisect --package)."""

    commit: str | None = None  # None outside a git checkout
    ref: str | None = None  # what the user named
    dirty: bool | None = None  # uncommitted changes
    python: str | None = None  # another environment's interpreter
    packages: dict[str, str] = field(default_factory=dict)  # the versions that tell them apart
    label: str | None = None  # how tables name the build when a commit does not ("mlx 0.31.2")

    @property
    def short_commit(self) -> str:
        return short_commit(self.commit)


@dataclass(frozen=True)
class MachineLoad:
    """What else the machine was doing, over a second before the run: load average, and in cores,
    other processes' busy time and the hypervisor's steal time."""

    loadavg_1m: float = 0.0
    cores: int | None = None
    other_cores: float = 0.0
    steal_cores: float = 0.0


@dataclass(frozen=True)
class LoadSummary:
    """The same while a run measured, sampled every `interval_s`: means and maxima (a `load`
    record, written last; no samples where the machine cannot be sampled)."""

    KIND: ClassVar[str] = "load"

    run_id: str = "?"
    samples: int = 0
    interval_s: float = 0.0
    other_cores_mean: float = 0.0
    steal_cores_mean: float = 0.0
    loadavg_1m_mean: float = 0.0
    other_cores_max: float = 0.0
    steal_cores_max: float = 0.0
    loadavg_1m_max: float = 0.0


@dataclass(frozen=True)
class TimeSpent:
    """Where a run's time went (a `time` record, written last): seconds by phase (`PHASES`,
    measure.run.ledger), from the command's start to the run's last record. `machine` is the
    machine's one-time measurements, which its budget leaves out; `rounds` and `shares` measure what
    the answer reads."""

    KIND: ClassVar[str] = "time"

    run_id: str = "?"
    total_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    # trials: plan: the time from the command's start its first plan line said, before the first
    # timed round (None: no plan said one)
    said_s: float | None = None

    @property
    def measuring_s(self) -> float:
        return sum(self.phases.get(phase, 0.0) for phase in MEASURING_PHASES)


# The phases of a run's time, in the order a run meets them, and what each holds.
PHASES = {
    "machine": "the machine's one-time measurements (threads, schedule, peak; cached after)",
    "probes": "the workers' environment, probed every run",
    "plan": "the round plan",
    "load": "workers started and weights built or loaded",
    "kernels": "which kernels each variant runs",
    "warm-up": "warm-up rounds, which carry the correctness check",
    "rounds": "timed rounds",
    "fresh pairs": "fresh worker pairs and their warm-ups",
    "shares": "op-share rounds and depth rounds",
    "stop": "workers stopped",
    "other": "the rest: imports, the header, writing records, the summary",
}
MEASURING_PHASES = ("rounds", "shares")


@dataclass(frozen=True)
class PeakProbe:
    """This machine's measured peaks (measure.machine.peaks.probe_peaks), cached per machine and
    BLAS thread count: an fp32 matmul's GFLOP/s, a memory copy's GB/s (bytes read + written), an
    LM-head-sized matrix-vector read's GB/s (0 in a probe made before it was measured), and whether
    a run that achieved more raised them."""

    matmul_gflops: float
    matmul_shape: str
    copy_gbps: float
    copy_bytes: int
    gemv_read_gbps: float = 0.0
    raised_by_a_run: bool = False


@dataclass(frozen=True, kw_only=True)
class Peak:
    """A machine's peak: a known chip's as chips.yaml lists it, or one measured; the run header's
    `peak`, which its trials' roofline figures are shares of."""

    name: str = "?"
    match: tuple[str, ...] | None = None  # a known chip's patterns for the device name
    fp32_tflops: float | None = None
    bf16_tflops: float | None = None
    memory_gbps: float | None = None
    source: str = "?"
    confidence: str | None = None  # "published" or "approximate" (chips.yaml), "measured"
    note: str | None = None

    def compute_roof(self, dtype: str) -> float | None:
        """TFLOP/s a trial in `dtype` is held against: 16-bit dtypes against the bf16 figure (fp16
        runs at the same rate on every chip listed)."""
        return self.fp32_tflops if dtype == "float32" else self.bf16_tflops


@dataclass(frozen=True)
class Setting:
    """One thread count's probe (measure.machine.threads): mean sample seconds, SD of log sample
    times, and the samples, which give the choice its uncertainty."""

    threads: int
    mean_s: float
    log_sd: float
    samples: tuple[float, ...] = ()  # the sample seconds (before 2026-12-05: not kept)

    @property
    def precision_per_s(self) -> float:
        return 1.0 / (max(self.log_sd, 1e-4) ** 2 * self.mean_s)


@dataclass(frozen=True)
class ThreadChoice:
    """What `threads: auto` chose and why: the settings it measured (empty: it measured nothing)
    and the rule."""

    threads: int
    settings: tuple[Setting, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class ScheduleProbe:
    """One schedule's figures from the pilot (measure.run.pilot): SD of the pair's log ratio on each
    clock, the noisier metric's (prefill or gen; before 2026-12-04, of their sum; before
    2026-12-05 a robust scale), the seconds a pair took (mean), and each timed pair's wall-clock
    log ratios and seconds, which give the choice its uncertainty (before 2026-12-05: not kept)."""

    schedule: str
    wall_sd: float
    cpu_sd: float
    pair_s: float
    prefill_ratios: tuple[float, ...] = ()
    gen_ratios: tuple[float, ...] = ()
    pair_seconds: tuple[float, ...] = ()

    @property
    def precision_per_s(self) -> float:
        return 1.0 / (max(self.wall_sd, 1e-4) ** 2 * self.pair_s)


@dataclass(frozen=True)
class ScheduleChoice:
    """What `schedule` resolved to and why, the clock the intervals use and why, the pilot's
    figures (empty: nothing was measured), the cores a duet runs on."""

    schedule: str = "sequential"
    reason: str = ""
    probes: tuple[ScheduleProbe, ...] = ()
    cores: tuple[int, int] | None = None
    clock: Clock = Clock.WALL  # runs from before the clock was chosen used the wall clock
    clock_reason: str = ""

    @property
    def line(self) -> str:
        """The first screen's word on it."""
        return (
            f"schedule: {self.schedule} ({self.reason}); clock: {self.clock} ({self.clock_reason})"
        )


@dataclass(frozen=True)
class RunHeader:
    """The first record of a run: what ran and where. The runner fills peak ... repos; `fusebench
    ops` fills rounds; `fusebench kernels` neither."""

    KIND: ClassVar[str] = "run"

    run_id: str = "?"
    format: int = FORMAT
    experiment: StoredExperiment | None = None
    env: Env = Env()
    started_at: str = "?"
    peak: Peak | None = None  # the roof its trials are held against
    shard: str = "1/1"  # "I/N"
    resumed: bool = False
    plugins: tuple[PluginFile, ...] = ()
    # "current", and with run --against(-env) "reference"
    builds: dict[str, BuildFields] = field(default_factory=dict)
    preflight: MachineLoad | None = None  # None off Linux
    pinned: bool = False
    rounds: int | None = None  # `fusebench ops` runs
    threads_choice: ThreadChoice | None = None
    # None: a run from before duets, whose rounds were sequential
    schedule_choice: ScheduleChoice | None = None
    trials: Trials = Trials.AUTO  # the stopping rule (format 3 and before: read from `stopping`)
    repos: dict[str, str] = field(default_factory=dict)  # repo id -> its snapshot's commit

    @classmethod
    def read(cls, record: Record) -> RunHeader:
        return from_mapping(cls, record)

    @property
    def clock(self) -> Clock:
        """The clock the run's intervals use (the wall clock for runs from before the choice)."""
        return self.schedule_choice.clock if self.schedule_choice else Clock.WALL

    @property
    def machine(self) -> str:
        """core.fingerprint's machine label: runs on different machines are never pooled."""
        return self.env.machine

    @property
    def threads_reason(self) -> str:
        """Why `threads: auto` chose the run's thread count ("" when the experiment set it)."""
        return self.threads_choice.reason if self.threads_choice else ""


def run_header(
    run_id: str, experiment: StoredExperiment | None, env: Env, **parts: object
) -> RunHeader:
    """The first record of a run, started now: what ran and where, and the writer's own `parts`."""
    return RunHeader(
        run_id=run_id,
        experiment=experiment,
        env=env,
        started_at=utc_now(),
        **parts,  # type: ignore[arg-type]
    )
