"""`run --resume FILE`: what the interrupted run already recorded, so that the resumed one measures
nothing twice."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...core.experiment import Experiment
from ...core.fileformat import ResultsError
from ...core.results import Results, read_results
from ...core.typed import from_mapping
from .session import CURRENT


@dataclass(frozen=True)
class _Recorded:
    """Which work a results record holds: the fields of it that its kind has."""

    kind: str
    run_id: str | None = None
    cell: str | None = None
    build: str = CURRENT.name  # a run of a format before builds ran the current build only
    variant: str | None = None
    warmup: bool = False
    round: int | None = None


class DoneWork:
    """The work a run has recorded: cells it closed (skipped, failed) or stopped adding rounds to,
    and per cell and build its correctness and kernel facts, its trials, its depth rounds and its
    op-share rounds. A fresh run has done nothing."""

    def __init__(self) -> None:
        self._finished: set[str] = set()  # cell
        self._facts: set[tuple[str, str, str]] = set()  # (cell, build, "correctness" or "kernel")
        # (cell, build, variant, warmup, round)
        self._trials: set[tuple[str, str, str, bool, int]] = set()
        self._depths: set[tuple[str, str, str, int]] = set()  # (cell, build, variant, round)
        # (cell, round): the current build's op-share rounds
        self._shares: set[tuple[str, int]] = set()

    @classmethod
    def recorded(cls, results: Results, run_id: str) -> DoneWork:
        """What run `run_id` recorded in `results` (records of other runs in the file do not
        count)."""
        done = cls()
        for record in (from_mapping(_Recorded, record) for record in results.records):
            if record.run_id == run_id:
                done._add(record)
        return done

    def _add(self, record: _Recorded) -> None:
        kind, cell, build = record.kind, record.cell, record.build
        if kind == "trial":
            self._trials.add((cell, build, record.variant, record.warmup, record.round))
        elif kind in ("correctness", "kernel"):
            self._facts.add((cell, build, kind))
        elif kind == "depth":
            self._depths.add((cell, build, record.variant, record.round))
        elif kind == "share":
            self._shares.add((cell, record.round))
        elif kind in ("skip", "error", "stop"):
            self._finished.add(cell)

    def finished(self, cell: str) -> bool:
        """Whether the cell is closed or has stopped adding rounds: nothing of it is planned
        again."""
        return cell in self._finished

    def has_facts(self, cell: str, build: str, kind: str) -> bool:
        """Whether the build's correctness (or kernel) facts of the cell are recorded."""
        return (cell, build, kind) in self._facts

    def has_trial(self, cell: str, build: str, variant: str, warmup: bool, round_: int) -> bool:
        return (cell, build, variant, warmup, round_) in self._trials

    def has_depth(self, cell: str, build: str, variant: str, round_: int) -> bool:
        return (cell, build, variant, round_) in self._depths

    def has_share(self, cell: str, round_: int) -> bool:
        return (cell, round_) in self._shares


def resume_state(path: Path, exp: Experiment) -> tuple[str, DoneWork]:
    """The run id of the run FILE holds, and what it recorded; a ResultsError if FILE holds no run
    of `exp` as it is now (another experiment, or another version of its file)."""
    results = read_results([path])
    runs = results.headers
    if not runs:
        raise ResultsError(f"{path}: no run header; it is not a fusebench results file")
    run_id, header = next(iter(runs.items()))
    recorded = header.experiment.name if header.experiment else None
    if recorded != exp.name:
        raise ResultsError(
            f"{path}: holds a run of experiment {recorded!r}, not {exp.name!r}; resume it with "
            f"fusebench run {recorded} --resume {path}, or start a new run"
        )
    if header.experiment and header.experiment.sha256 != exp.sha256:
        raise ResultsError(
            f"{path}: was recorded from a different version of {exp.file} (sha256 differs); "
            "resume with the same experiment file, or start a new run"
        )
    return run_id, DoneWork.recorded(results, run_id)
