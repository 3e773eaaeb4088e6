"""What a cell's run (measure.run.cellrun and the parts it hands work to: its warm-ups, the
fixing of its rounds, its op shares) needs of the run around it, and no more."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.experiment import Experiment
from .findings import Findings
from .session import WorkerMaker

if TYPE_CHECKING:
    from rich.console import Console

    from .ledger import RunTime
    from .pairspreads import PairSpreads
    from .planning import RunPlanner
    from .progress import RunProgress


@dataclass(frozen=True)
class WeighSchedules:
    """`schedule: auto`'s weighing in the run's first cell (analysis.schedule_gain): the schedule
    held before (`prior`), the most the schedule dropped may cost (`cap_s`), and what the run does
    with the one kept (`kept`: its plan and its later cells follow it)."""

    prior: str
    cap_s: float
    kept: Callable[[str, str], None]  # (schedule kept, the weighing's line)


@dataclass(frozen=True)
class CellContext:
    """What a cell's run needs of the run around it, and no more: where its findings go, the run's
    time and budget, how fresh workers start."""

    exp: Experiment
    findings: Findings
    time: RunTime
    workers: WorkerMaker
    order: tuple[str, ...]  # the variants in a round's order (schedules.base.centre_order)
    planner: RunPlanner | None  # trials: plan
    spreads: PairSpreads | None  # with two builds: what this machine's last A/B of a cell showed
    progress: RunProgress
    console: Console
    quiet: bool  # --quiet: only warnings and errors on the console
    weigh: WeighSchedules | None = None  # the run's first cell, with schedule: auto
