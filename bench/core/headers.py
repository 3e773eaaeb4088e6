"""A run header, and the load a run sampled, read back as types (core.typed.from_mapping), so the
report, the gate and the commands read fields rather than JSON keys.

The writers build the JSON (core.records: RunHeader and its parts); records of older formats are
upgraded on read (core.records.upgrade), and a field a run did not record reads as its default here:
"?" where a table shows it, None where readers ask whether it was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .records import FORMAT, Clock, RunHeader, Stopping
from .text import short_commit
from .typed import from_mapping

UNKNOWN_MACHINE = "unknown machine"


@dataclass(frozen=True)
class ExperimentInfo:
    """The experiment a run executed (core.records.StoredExperiment)."""

    name: str = ""
    file: str | None = None
    sha256: str | None = None
    content: str | None = None


@dataclass(frozen=True)
class EnvInfo:
    """The environment the workers ran in (core.records.Env)."""

    fusebench: str = "?"
    mlx: str | None = "?"
    mlx_lm: str | None = "?"
    python: str = "?"
    backend: str = "?"
    device: str = "?"
    blas: str = "?"  # with its path: "openblas (/usr/lib/...)"
    threads: int | None = None  # BLAS threads; None: left to the library
    cpu: str = "?"
    cores: int | None = None
    ram_bytes: int | None = None
    os: str = "?"
    hostname: str | None = "?"
    git_commit: str | None = None
    git_dirty: bool | None = None

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
class BuildInfo:
    """One build a run measured (core.records.BuildFields): a checkout, or another environment
    with its own packages."""

    commit: str | None = None  # None outside a git checkout
    ref: str | None = None  # what the user named
    dirty: bool | None = None  # uncommitted changes
    python: str | None = None  # another environment's interpreter
    packages: dict[str, str] = field(default_factory=dict)  # another environment's versions
    label: str | None = None  # another environment's name ("mlx 0.31.2")

    @property
    def short_commit(self) -> str:
        return short_commit(self.commit)


@dataclass(frozen=True)
class PeakInfo:
    """The machine's peak the run's roofline figures are shares of (measure.roofline.Peak)."""

    name: str = "?"
    fp32_tflops: float | None = None
    bf16_tflops: float | None = None
    memory_gbps: float | None = None
    source: str = "?"
    confidence: str = "?"


@dataclass(frozen=True)
class MachineLoadInfo:
    """What else ran on the machine just before the run started (core.records.MachineLoad)."""

    loadavg_1m: float = 0.0
    cores: int | None = None
    other_cores: float = 0.0  # other processes' CPU, in cores
    steal_cores: float = 0.0


@dataclass(frozen=True)
class ThreadChoiceInfo:
    """How `threads: auto` chose the run's BLAS threads (measure.threads.ThreadChoice)."""

    threads: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class ScheduleChoiceInfo:
    """The schedule a run used and why (measure.duet.ScheduleChoice)."""

    schedule: str = "sequential"
    reason: str = ""
    clock: Clock = Clock.WALL  # runs from before the clock was chosen used the wall clock
    clock_reason: str = ""


@dataclass(frozen=True)
class PluginInfo:
    path: str = "?"
    sha256: str = "?"


@dataclass(frozen=True)
class RunInfo:
    """One run header (core.records.RunHeader)."""

    run_id: str = "?"
    format: int = FORMAT
    experiment: ExperimentInfo | None = None
    env: EnvInfo = EnvInfo()
    started_at: str = "?"
    peak: PeakInfo | None = None
    shard: str = "1/1"
    resumed: bool = False
    plugins: tuple[PluginInfo, ...] = ()
    # "current", and with run --against(-env) "reference"
    builds: dict[str, BuildInfo] = field(default_factory=dict)
    preflight: MachineLoadInfo | None = None  # None off Linux
    pinned: bool = False
    rounds: int | None = None  # `fusebench ops` runs
    threads_choice: ThreadChoiceInfo | None = None
    # None: a run from before duets, whose rounds were sequential
    schedule_choice: ScheduleChoiceInfo | None = None
    stopping: Stopping = Stopping.ADAPTIVE
    repos: dict[str, str] = field(default_factory=dict)  # repo id -> snapshot commit

    @classmethod
    def read(cls, header: RunHeader) -> RunInfo:
        return from_mapping(cls, header)

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


@dataclass(frozen=True)
class LoadInfo:
    """Other processes' CPU and the hypervisor's steal, in cores, sampled while a run measured (a
    `load` record: core.records.LoadSummary)."""

    run_id: str = "?"
    samples: int = 0
    other_cores_mean: float = 0.0
    other_cores_max: float = 0.0
    steal_cores_mean: float = 0.0
