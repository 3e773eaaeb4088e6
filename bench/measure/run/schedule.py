"""The order of trials: who runs next to whom. The paired statistics are only as good as this order.

- Rounds alternate direction (ABBA): drift and position effects land on every variant alike.
- The shared baseline sits in the middle (`centre_order`): with three variants,
  `compiled baseline sdpa` and then the reverse, so each variant compared with the baseline runs
  right next to it in every round. Measured on this machine's committed runs: the baseline and a
  variant two slots away paired worse (SD of the log ratio 0.18 vs 0.14 for adjacent trials).
- Builds (`run --against`) are interleaved inside the round: each variant runs in every build back
  to back, so a variant's current/reference pair is as close as two trials can be, and always in
  the same order, so the builds' workers take strict turns and no worker runs two trials in a row.
  A worker's second trial in a row runs warm (its weights and kernels still in the caches): when
  the whole round was reversed, the first variant's current-build trial and the last variant's
  reference-build trial ran warm at every other round's start, and on the 2-core AVX2 VM the tiny
  preset's A/B of identical builds read prefill -14.6% (SE 0.9) for the one and +12.8% (SE 1.0)
  for the other in those rounds, about 0 in the rest (results/history-demo-biased/, 600 rounds).

Duet (`schedule: duet`, docs/duet.md): the two arms of a pair run at the same moment in two
workers, each pinned to its own core, so what the neighbours, the hypervisor and the clock do
in those seconds hits both. Across builds (`run --against`) the arms are the two builds' workers on
one variant, and they swap cores every round. For a comparison of variants two workers of one build
hold the same weights; a round runs each comparison once, as its own duet, and the workers swap
which variant each runs every round (each keeps its core), so a faster core or process cancels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """ABBA: the order flips every round."""
    return list(names) if round_index % 2 == 0 else list(names)[::-1]


def centre_order(variants: Sequence[str], comparisons: Sequence[tuple[str, str]]) -> list[str]:
    """The variants with the most-compared one (the shared baseline) in the middle, the rest around
    it in order."""
    counts = Counter(name for pair in comparisons for name in pair if pair[0] != pair[1])
    if len(variants) < 3 or not counts:
        return list(variants)
    hub = max(variants, key=lambda name: (counts[name], -list(variants).index(name)))
    others = [name for name in variants if name != hub]
    half = len(others) // 2
    return [*others[:half], hub, *others[half:]]


def round_plan(
    order: Sequence[str], builds: Sequence[str], round_index: int
) -> list[tuple[str, str]]:
    """(build, variant) in the order one round runs them: the variants in ABBA order, each in every
    build back to back, the builds always in the same order (strict turns)."""
    return [(build, variant) for variant in round_order(order, round_index) for build in builds]


@dataclass(frozen=True)
class Arm:
    """One trial of a duet: which worker (an index into the cell's workers) runs which variant of
    which build."""

    worker: int
    build: str
    variant: str


@dataclass(frozen=True)
class Duet:
    """Two trials started together. `round` is the round number both record (it picks the prompt),
    `cores[i]` the core `arms[i]`'s worker runs on."""

    round: int
    arms: tuple[Arm, Arm]
    cores: tuple[int, int]


def duet_plan(
    order: Sequence[str],
    builds: Sequence[str],
    comparisons: Sequence[tuple[str, str]],
    cycle: int,
    cores: tuple[int, int] = (0, 1),
) -> list[Duet]:
    """The duets of round `cycle`. Across two builds: every variant (ABBA order) with the builds'
    workers side by side, on cores swapped every round. Within one build: each comparison
    (baseline, new) once, its round numbered cycle * len(comparisons) + slot so a (variant, round)
    names one trial, the workers fixed to their cores and swapping variants every round."""
    flip = cycle % 2
    if len(builds) == 2:
        on = (cores[flip], cores[1 - flip])
        return [
            Duet(cycle, (Arm(0, builds[0], v), Arm(1, builds[1], v)), on)
            for v in round_order(order, cycle)
        ]
    pairs = [pair for pair in comparisons if pair[0] != pair[1]]
    build = builds[0]
    duets = []
    for slot, (baseline, new) in enumerate(pairs):
        arms = (Arm(flip, build, baseline), Arm(1 - flip, build, new))
        duets.append(Duet(cycle * len(pairs) + slot, arms, (cores[flip], cores[1 - flip])))
    return duets if flip == 0 else duets[::-1]
