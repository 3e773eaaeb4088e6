"""Each history run's own report, for the dashboard's points to link to."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..analysis.study import build_study
from ..core.history import HistoryRun
from ..core.results import read_results
from .report import write_report


def write_run_reports(runs: Sequence[HistoryRun], folder: Path) -> dict[str, str]:
    """run_id -> its report's path relative to the site, for every run whose results file can
    still be read (a history outlives the files it was added from: those runs link nowhere)."""
    written = {}
    for path, mine in _by_source(runs).items():
        if not path.is_file():
            continue
        study = build_study(read_results([path]))
        for run in mine:
            out = folder / run.run_id
            write_report(study, study.planned, out, sources=[path])
            written[run.run_id] = f"{folder.name}/{run.run_id}/report.html"
    return written


def _by_source(runs: Sequence[HistoryRun]) -> dict[Path, list[HistoryRun]]:
    grouped: dict[Path, list[HistoryRun]] = {}
    for run in runs:
        grouped.setdefault(Path(run.source), []).append(run)
    return grouped
