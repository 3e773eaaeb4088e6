"""The run's progress bar: trials done of those planned, what runs now, the time spent and left."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RunProgress:
    """One bar over a run's trials, drawn when a trial ends and never while one runs: a redraw ten
    times a second is work beside the trial on a core it may need (issue 53: 2% of a core beside
    two BLAS threads made each step 24% slower). Hidden with --quiet."""

    def __init__(self, console: Console, trials: int, quiet: bool) -> None:
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("trials"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=quiet,
            transient=False,
            auto_refresh=False,
        )
        self._trials = trials

    def __enter__(self) -> RunProgress:
        self._bar.__enter__()
        self._task: TaskID = self._bar.add_task("starting", total=self._trials)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._bar.__exit__(kind, error, trace)

    def update(self, text: str, advance: int = 0, drop: int = 0) -> None:
        """What runs now; `advance` trials done; `drop` planned trials that will not run."""
        self._trials -= drop
        self._bar.update(
            self._task, description=text, advance=advance, total=self._trials, refresh=True
        )
