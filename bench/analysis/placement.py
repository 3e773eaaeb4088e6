"""What differed between an A/B's builds' workers beyond their code: their placements
(core.placement), compared field by field, and which slots each build took."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, fields

from ..core.placement import EXPECTED_TO_DIFFER, WorkerRecord


@dataclass(frozen=True)
class PlacementDifference:
    """A placement field whose values were not the same for every build's workers: each build's
    values (sorted, as text)."""

    field: str
    by_build: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class PlacementSummary:
    """The builds' placements in one run or more: how many workers each build started, the slots
    each took (slot -> workers), and the fields that differed between builds."""

    workers: dict[str, int]
    slots: dict[str, dict[str, int]]
    differences: tuple[PlacementDifference, ...]

    @property
    def alike(self) -> bool:
        return not self.differences


def summarize_placement(records: Sequence[WorkerRecord]) -> PlacementSummary | None:
    """The builds' placements compared; None without records of two builds or more (a run of one
    build, or a file from before placements were recorded). A field differs when a build's set of
    values is not every other build's: the tree and its slot are expected to (they rotate)."""
    builds = list(dict.fromkeys(record.build for record in records))
    if len(builds) < 2:
        return None
    values: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    slots: dict[str, Counter[str]] = {build: Counter() for build in builds}
    for record in records:
        slots[record.build][record.placement.slot] += 1
        for item in fields(record.placement):
            if item.name not in EXPECTED_TO_DIFFER:
                value = getattr(record.placement, item.name)
                values[item.name][record.build].add(str(value))
    differences = tuple(
        PlacementDifference(name, {b: tuple(sorted(by_build[b])) for b in builds})
        for name, by_build in values.items()
        if len({frozenset(by_build[b]) for b in builds}) > 1
    )
    workers = Counter(record.build for record in records)
    return PlacementSummary(
        {b: workers[b] for b in builds},
        {b: dict(sorted(slots[b].items())) for b in builds},
        differences,
    )
