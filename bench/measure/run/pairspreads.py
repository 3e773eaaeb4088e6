"""What an A/B's rows scattered on this machine, within a worker pair and between pairs
(analysis.allocation.Components), kept per cell, so the next A/B of the cell says before its first
round which limit its rounds can decide (CellStop.limit_forecast). Cached per machine, BLAS threads
and schedule, as the plan's costs are; a cell's latest A/B replaces the one before (the noise
moves with the hour)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...analysis.allocation import Components
from ...core.experiment import Cell, Experiment
from ..machine.env import read_cached, write_cached
from .planning import cache_signature, now_iso

CACHE_VERSION = 1


@dataclass(frozen=True)
class CellSpreads:
    """One cell's rows as its latest A/B here measured them, and when."""

    rows: dict[str, Components]
    measured_at: str


@dataclass(frozen=True)
class _Cached:
    cells: dict[str, CellSpreads] = field(default_factory=dict)


class PairSpreads:
    """The cache of a run's configuration (`path`): read at a cell's fixing, written at its end."""

    def __init__(self, path: Path, exp: Experiment, builds: Sequence[str]) -> None:
        self.path, self.exp, self.builds = path, exp, list(builds)

    def read(self, cell: Cell) -> CellSpreads | None:
        cached = read_cached(self.path, _Cached) or _Cached()
        return cached.cells.get(cache_signature(cell, self.exp, self.builds))

    def write(self, cell: Cell, rows: Mapping[str, Components]) -> None:
        if not rows:
            return
        cached = read_cached(self.path, _Cached) or _Cached()
        signature = cache_signature(cell, self.exp, self.builds)
        cells = {**cached.cells, signature: CellSpreads(dict(rows), now_iso())}
        write_cached(self.path, _Cached(cells))
