"""How the cells a run has measured here scale to one it has not (measure.run.planning): a
round by its roofline work at the paces their rounds showed, a load by its weight bytes, its
warm-ups and what follows its rounds by its round."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class MeasuredCell(Protocol):
    """What a cell measured here tells the scaling (planning.CellMeasure)."""

    load_s: float
    warmup_s: float
    warmups: int
    round_s: float
    after_s: float
    shares_s: float
    weight_bytes: int

    def paces(self) -> tuple[float | None, float]: ...

    @property
    def beyond(self) -> float: ...


@dataclass(frozen=True)
class PlanWork:
    """What a cell's round does and what it loads, from shapes alone (the roofline's work)."""

    round_flops: float  # the prefills' FLOPs
    round_bytes: float  # the generations' bytes
    prefill_bytes: float  # what the prefills read at memory speed (CellWork.prefill_bytes)
    weight_bytes: int
    warmups: int
    rows: int


@dataclass(frozen=True)
class Scale:
    """How the cells measured here scale to one that is not yet: its round from its roofline work
    at the paces their rounds showed, its load by its weight bytes, its warm-ups and what follows
    its rounds by its round (the medians over the cells measured)."""

    per_flop: float  # a prefill FLOP's seconds
    per_byte: float  # a byte's seconds, read by a generation or a prefill
    beyond: float  # a round's seconds per second of its trials' own clocks
    load_per_byte: float
    warm: float  # a warm-up round's seconds per round
    after: float  # what follows the rounds, per round

    @classmethod
    def of(cls, measured: Sequence[MeasuredCell]) -> Scale | None:
        """None with nothing measured."""
        measured = [m for m in measured if m.round_s > 0]
        if not measured:
            return None
        paces = [m.paces() for m in measured]
        per_bytes = [per_byte for per_byte, _ in paces if per_byte is not None]
        loaded = [m.load_s / m.weight_bytes for m in measured if m.load_s > 0 and m.weight_bytes]
        return cls(
            per_flop=statistics.median(per_flop for _, per_flop in paces),
            per_byte=statistics.median(per_bytes) if per_bytes else 0.0,
            beyond=statistics.median(m.beyond for m in measured),
            load_per_byte=statistics.median(loaded) if loaded else 0.0,
            warm=statistics.median(m.warmup_s / (max(1, m.warmups) * m.round_s) for m in measured),
            after=statistics.median((m.after_s + m.shares_s) / m.round_s for m in measured),
        )

    def round_s(self, work: PlanWork) -> float:
        reads = work.prefill_bytes + work.round_bytes
        return self.beyond * (self.per_flop * work.round_flops + self.per_byte * reads)
