"""The order of trials, who runs next to whom: a schedule is a `RoundSchedule`, which lays a round
out as steps, and `place` and `send_step` are the one round driver, the pilot's and a cell's (each
collects what it sent). The paired statistics are only as good as this order (schedules.order).

Adding a schedule: a module beside this one with a `RoundSchedule` subclass, its name in
core.experiment's `Schedule`, and a line in this package's `SCHEDULES` (docs/architecture.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from ...machine.cores import pin

if TYPE_CHECKING:
    from ...job import Command

T = TypeVar("T")


class Process(Protocol):
    pid: int


class Worker(Protocol):
    """What a step needs of a worker (measure.run.session.WorkerSession is one)."""

    process: Process

    def send(self, command: Command) -> None: ...


@dataclass(frozen=True)
class Arm:
    """One trial of a step: which worker (an index into the cell's workers) runs which variant of
    which build."""

    worker: int
    build: str
    variant: str


@dataclass(frozen=True)
class Step:
    """Trials started together, then collected in turn: one arm, or a duet's two. `round` is the
    round number its trials record (it picks the prompt); `cores[i]`, where set, the core
    `arms[i]`'s worker runs on; `repin`: move the workers onto those cores first."""

    round: int
    arms: tuple[Arm, ...]
    cores: tuple[int, ...] | None = None
    repin: bool = False


@dataclass(frozen=True)
class Round:
    """The round a schedule lays out: its `index`, the variants in their `order` (centre_order),
    the builds' names, the (baseline, new) pairs a cell watches, the two cores a duet runs on, and
    which of the cell's worker pairs runs it."""

    index: int
    order: Sequence[str]
    builds: Sequence[str]
    comparisons: Sequence[tuple[str, str]] = ()
    cores: tuple[int, int] = (0, 1)
    pair: int = 0  # the cell's worker pair that runs it (counted from 0: freshpairs)


class RoundSchedule(ABC):
    """How a round's trials are laid out in time, across the workers of a cell."""

    name: ClassVar[str]
    # its arms run at once, one pinned worker a core, so each worker runs one BLAS thread
    one_core_each: ClassVar[bool] = False

    @abstractmethod
    def steps(self, at: Round) -> list[Step]:
        """The round's steps, in the order they run."""

    def worker_builds(self, builds: Sequence[T]) -> list[T]:
        """The build of each worker a model's cells run on: one per build."""
        return list(builds)

    def places(
        self, workers: int, cores: tuple[int, int], pinned: Sequence[int] | None
    ) -> list[Sequence[int] | None]:
        """The CPUs each worker may run on (None: any): `pinned` (run --pin) for each."""
        return [pinned] * workers

    def warmup_rounds(self, builds: Sequence[str]) -> int:
        """Warm-up rounds per warm-up the experiment asks for: one."""
        return 1

    def round_trials(
        self, order: Sequence[str], builds: Sequence[str], comparisons: Sequence[tuple[str, str]]
    ) -> int:
        """Trials a round runs."""
        return sum(len(step.arms) for step in self.steps(Round(0, order, builds, comparisons)))


def build_turns(count: int, pair: int) -> list[int]:
    """The order a cell's `pair` (counted from 0) gives its `count` builds, as indices (0 the
    current build, 1 the reference, 2 the control): the two compared builds swap every pair, so
    each goes first in half the pairs, and the control's turn moves every two pairs. A rotation of
    all three let the current build go before the reference in two pairs of three (411 trials
    against 216 in results/placement's 12 identical A/Bs of 2026-12-07)."""
    if count < 2:
        return list(range(count))
    compared = [0, 1] if pair % 2 == 0 else [1, 0]
    rest = list(range(2, count))
    at = (pair // 2 + len(compared)) % (len(compared) + 1) if rest else 0  # last, first, middle
    return [*compared[:at], *rest, *compared[at:]]


def place(step: Step, workers: Sequence[Worker]) -> None:
    """The step's workers moved onto its cores, where it says so (before any timing starts: a
    pilot's pair is timed from its first command)."""
    if step.repin and step.cores:
        for arm, core in zip(step.arms, step.cores, strict=True):
            pin(workers[arm.worker].process.pid, core)


def send_step(
    step: Step, workers: Sequence[Worker], commands: Sequence[Command | None]
) -> list[tuple[Arm, Command]]:
    """Every arm's command (`commands[i]` for `step.arms[i]`; None leaves that arm out) sent to its
    worker, all before any is collected, so a duet's trials run at once. Returns the arms sent with
    their commands, in the order to collect them."""
    sent = [(arm, command) for arm, command in zip(step.arms, commands, strict=True) if command]
    for arm, command in sent:
        workers[arm.worker].send(command)
    return sent
