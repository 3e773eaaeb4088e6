"""The noise file `fusebench calibrate` writes (results/baselines/noise-<machine>.json): this
machine's A/A noise bands per scope and metric, which `fusebench check` reads (analysis.noise
measures them; its docstring says what each figure means), and the stored speedups of a file from
before the history held them (`PastSpeedups`, which the history's points give today:
analysis.speedups)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .fingerprint import Fingerprint
from .header import StoredExperiment

NOISE_KIND = "fusebench-noise"


@dataclass(frozen=True)
class PastSpeedups:
    """One cell's stored speedups for one comparison and metric, one per run."""

    model_key: str
    size: str
    workload: str
    comparison: str  # "new vs baseline", as the history names a COMPARISON point
    metric: str
    speedups: tuple[float, ...]

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.model_key, self.workload, self.comparison, self.metric

    @property
    def runs(self) -> int:
        return len(self.speedups)


@dataclass(frozen=True)
class Band:
    """The noise of one metric in one scope (analysis.noise)."""

    mde_pct: float
    max_aa_slowdown_pct: float
    ci_half_width_pct: float
    comparisons: int


@dataclass(frozen=True)
class Noise:
    """The noise file, as `fusebench calibrate` writes it (core.typed.to_record) and
    commands.sources.load_noise reads it back: a field without a default that a file lacks makes
    it a malformed noise file."""

    KIND: ClassVar[str] = NOISE_KIND

    fingerprint: Fingerprint
    experiment: StoredExperiment  # name, file, sha256
    runs: int
    bands: dict[str, dict[str, Band]]  # scope -> metric -> band
    results: tuple[str, ...] = ()  # the calibration's results files
    created_at: str = "?"
    # a file written before calibrate added its runs to the history kept their speedups here (none
    # since); `history add NOISE` imports them (analysis.noise.noise_entries)
    speedup_history: tuple[PastSpeedups, ...] = ()

    def band(self, scope: str, metric: str) -> Band | None:
        return self.bands.get(scope, {}).get(metric)
