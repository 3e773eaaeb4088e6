"""`schedule: sequential`: one trial after another in ABBA order. Builds (`run --against`) are
interleaved inside the round: each variant runs in every build back to back, so a variant's
current/reference pair is as close as two trials can be, in the same order throughout a worker
pair, so the builds' workers take strict turns and no worker runs two trials in a row; the order
rotates from one fresh pair to the next. A worker's second trial
in a row runs warm (its weights and kernels still in the caches): when the whole round was
reversed, the first variant's current-build trial and the last variant's reference-build trial ran
warm at every other round's start, and on the 2-core AVX2 VM the tiny preset's A/B of identical
builds read prefill -14.6% (SE 0.9) for the one and +12.8% (SE 1.0) for the other in those rounds,
about 0 in the rest (results/history-demo-biased/, 600 rounds)."""

from __future__ import annotations

from collections.abc import Sequence

from ....core.cell import CONTROL_BUILD
from ....core.experiment import Schedule
from .base import Arm, Round, RoundSchedule, Step, build_turns
from .order import round_order


def round_plan(
    order: Sequence[str], builds: Sequence[str], round_index: int, pair: int = 0
) -> list[tuple[str, str]]:
    """(build, variant) in the order one round runs them: the variants in ABBA order, each in every
    build back to back, the builds in the same order throughout a worker pair (strict turns) and
    in turns that change from a cell's pair to the next (`build_turns`), so no build always runs
    a variant first: a trial right after another process ran the same variant may find its
    kernels' code warm. The
    control (the reference's code in a place of its own) runs one variant a pair, the pairs taking
    the variants in turn (`control_variant`): it measures the places, which every variant shares,
    at a third of the cost of running them all (warm-ups included)."""
    turns = [builds[i] for i in build_turns(len(builds), pair)]
    return [
        (build, variant)
        for variant in round_order(order, round_index)
        for build in turns
        if build != CONTROL_BUILD or variant == control_variant(order, pair)
    ]


def control_variant(order: Sequence[str], pair: int) -> str:
    """The variant the control runs in a cell's `pair` (counted from 0)."""
    return order[pair % len(order)]


class Sequential(RoundSchedule):
    name = Schedule.SEQUENTIAL

    def steps(self, at: Round) -> list[Step]:
        return [
            Step(at.index, (Arm(list(at.builds).index(build), build, variant),))
            for build, variant in round_plan(at.order, at.builds, at.index, at.pair)
        ]
