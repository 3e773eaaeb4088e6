"""`schedule: duet` (docs/duet.md): the two arms of a pair run at the same moment in two workers,
each pinned to its own core, so what the neighbours, the hypervisor and the clock do in those
seconds hits both. Across builds (`run --against`) the arms are the two builds' workers on one
variant, and they swap cores every round. For a comparison of variants two workers of one build
hold the same weights; a round runs each comparison once, as its own duet, and the workers swap
which variant each runs every round (each keeps its core), so a faster core or process cancels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from ....core.experiment import Schedule
from .base import Arm, Round, RoundSchedule, Step
from .order import round_order

T = TypeVar("T")


def duet_plan(
    order: Sequence[str],
    builds: Sequence[str],
    comparisons: Sequence[tuple[str, str]],
    cycle: int,
    cores: tuple[int, int] = (0, 1),
) -> list[Step]:
    """The duets of round `cycle`. Across two builds: every variant (ABBA order) with the builds'
    workers side by side, on cores swapped every round. Within one build: each comparison
    (baseline, new) once, its round numbered cycle * len(comparisons) + slot so a (variant, round)
    names one trial, the workers fixed to their cores and swapping variants every round."""
    flip = cycle % 2
    on = (cores[flip], cores[1 - flip])
    if len(builds) == 2:
        return [
            Step(cycle, (Arm(0, builds[0], v), Arm(1, builds[1], v)), on, repin=True)
            for v in round_order(order, cycle)
        ]
    pairs = [pair for pair in comparisons if pair[0] != pair[1]]
    build = builds[0]
    duets = []
    for slot, (baseline, new) in enumerate(pairs):
        arms = (Arm(flip, build, baseline), Arm(1 - flip, build, new))
        duets.append(Step(cycle * len(pairs) + slot, arms, on))
    return duets if flip == 0 else duets[::-1]


class Duet(RoundSchedule):
    name = Schedule.DUET
    one_core_each = True

    def steps(self, at: Round) -> list[Step]:
        return duet_plan(at.order, at.builds, at.comparisons, at.index, at.cores)

    def worker_builds(self, builds: Sequence[T]) -> list[T]:
        """A comparison of variants runs on two workers of its one build."""
        return [builds[0], builds[0]] if len(builds) == 1 else list(builds)

    def places(
        self, workers: int, cores: tuple[int, int], pinned: Sequence[int] | None
    ) -> list[Sequence[int] | None]:
        """Each worker on its own core."""
        return [[core] for core in cores[:workers]]

    def warmup_rounds(self, builds: Sequence[str]) -> int:
        """In a duet of variants twice as many, so each worker has run every variant before the
        timed rounds (the workers swap variants every round)."""
        return 2 if len(builds) == 1 else 1
