"""What each run's header says, typed once, so the report and the gate read runs as fields rather
than as JSON keys.

A header (core.records.run_header) is a JSON object written by whichever fusebench ran it; records
of older formats are upgraded on read (core.records), and a field a run did not record reads as "?"
or None here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.fingerprint import blas_name, machine_label
from ..core.records import BuildFields, Env, RunHeader
from ..core.results import Results


@dataclass(frozen=True)
class Environment:
    """The machine and software a run measured on (the header's `env`)."""

    hostname: str = "?"
    device: str = "?"
    backend: str = "?"
    blas: str = "?"  # the BLAS family ("openblas"), without its path
    mlx: str = "?"
    commit: str = "?"  # fusebench's git commit
    dirty: bool = False  # uncommitted changes
    threads: int | None = None  # BLAS threads the run used
    cores: int | None = None


@dataclass(frozen=True)
class Build:
    """One of the two builds a `run --against` run measured (the header's `builds`): a checkout, or
    another environment with its own packages."""

    name: str  # "current" or "reference"
    commit: str
    dirty: bool
    label: str | None = None  # another environment's name ("mlx 0.31.2")
    packages: tuple[tuple[str, str], ...] = ()  # another environment's (package, version)
    python: str | None = None  # another environment's interpreter


@dataclass(frozen=True)
class Peak:
    """The machine's peak the run's roofline figures are shares of (measure.roofline)."""

    name: str
    fp32_tflops: float | None
    bf16_tflops: float | None
    memory_gbps: float | None
    source: str
    confidence: str


@dataclass(frozen=True)
class Preflight:
    """What else ran on the machine just before the run started."""

    other_cores: float  # other processes' CPU, in cores
    loadavg_1m: float


@dataclass(frozen=True)
class Run:
    """One run header."""

    run_id: str
    machine: str  # core.fingerprint.machine_label: runs on different machines are never pooled
    env: Environment
    builds: tuple[Build, ...]
    peak: Peak | None
    preflight: Preflight | None
    # why `threads: auto` chose the run's thread count ("" when the experiment set it)
    threads_reason: str = ""


@dataclass(frozen=True)
class Load:
    """Other processes' CPU and the hypervisor's steal, in cores, sampled while a run measured (a
    `load` record)."""

    run_id: str
    other_cores_mean: float
    other_cores_max: float
    steal_cores_mean: float


def runs(results: Results) -> dict[str, Run]:
    """Every run header of the results, by run id."""
    return {run_id: _run(run_id, header) for run_id, header in results.runs.items()}


def loads(results: Results) -> list[Load]:
    """The load records that hold samples."""
    return [
        Load(
            str(r.get("run_id")),
            r.get("other_cores_mean", 0.0),
            r.get("other_cores_max", 0.0),
            r.get("steal_cores_mean", 0.0),
        )
        for r in results.of_kind("load")
        if r.get("samples")
    ]


def environment(env: Env) -> Environment:
    return Environment(
        hostname=str(env.get("hostname", "?")),
        device=str(env.get("device", "?")),
        backend=str(env.get("backend", "?")),
        blas=blas_name(env),
        mlx=str(env.get("mlx", "?")),
        commit=str(env.get("git_commit") or "?"),
        dirty=bool(env.get("git_dirty")),
        threads=env.get("threads"),
        cores=env.get("cores"),
    )


def _run(run_id: str, header: RunHeader) -> Run:
    env = header.get("env") or {}
    peak, preflight = header.get("peak"), header.get("preflight")
    return Run(
        run_id=run_id,
        machine=machine_label(env),
        env=environment(env),
        builds=tuple(_build(name, build) for name, build in (header.get("builds") or {}).items()),
        peak=Peak(
            str(peak.get("name", "?")),
            peak.get("fp32_tflops"),
            peak.get("bf16_tflops"),
            peak.get("memory_gbps"),
            str(peak.get("source", "?")),
            str(peak.get("confidence", "?")),
        )
        if peak
        else None,
        preflight=Preflight(preflight.get("other_cores", 0.0), preflight.get("loadavg_1m", 0.0))
        if preflight
        else None,
        threads_reason=str((header.get("threads_choice") or {}).get("reason", "")),
    )


def _build(name: str, build: BuildFields) -> Build:
    return Build(
        name=name,
        commit=str(build.get("commit") or "?"),
        dirty=bool(build.get("dirty")),
        label=build.get("label"),
        packages=tuple((build.get("packages") or {}).items()),
        python=build.get("python"),
    )
