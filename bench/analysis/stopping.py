"""When a cell has enough rounds (`trials: auto`): a precision target on the interval the table prints, planned in
stages from the rounds' spread, never from an estimate's sign or size.

The target
    `precision` is a 95% half-width in percent as the table prints it: the Holm-adjusted interval of a row. Holm's
    level for a row is never below Bonferroni's, 1 − α/m for a table of m rows, so a half-width reached at the
    Bonferroni level is at most that wide in print. (The old rule looked at each row's unadjusted 95% half-width,
    and the printed, Holm-widened one came out 1.2–1.8x wider in an 8-row table.)
    With `precision` ≤ 50·ln(1 + margin) percent (2.4% for a 5% margin) every row is conclusive by construction: an
    interval of log half-width h that contains a ratio of 1 lies within [e^−2h, e^2h] ⊂ [1 − margin, 1 + margin], so
    the row reads "no change"; one that does not contain 1 reads "faster" or "slower".

Stages, not a look after every round
    Stopping at the first round whose sample SD happens to be small biases that SD down, so the final interval is too
    narrow: looking after every round lifted the A/A false-claim rate from 5.0% to 6.0–6.7% and cut coverage to
    93.3–94.0% at noise ≥ 3% (simulated). Here the rounds are planned as in Stein's two-stage procedure: a pilot of
    `pilot` rounds gives each row's log-ratio SD, and from it the rounds that row needs at its print level
    (`inference.rounds_needed`); the cell runs to the largest such count and stops there (a plan may allow
    `extensions` re-plans from all rounds so far; the runner allows none: each re-plan is one more look, and
    measured here it only spent a small model's share on rows that were narrow enough in print already).
    Simulated by `python tests/test_stopping.py` (seeded; 4 000 A/A tables of 8 rows per noise model, 6–30 rounds
    a cell): the false-claim rate per table was 4.98% with 2% normal noise, 0.97% with 2% noise plus 40% stalls on
    5% of trials, 4.38% with Student-t(3) noise; each row's unadjusted 95% interval covered 94.6%, 97.0%, 95.3%.

Time
    A cell also stops when the run's time budget says so (see `RoundBudget`): it gets an even share of what the
    cells before it left, so a cell that reaches its target early passes its time on; a round that would not fit
    the share is not started, and the table says "inconclusive (±X%)" for rows that then miss the target. Even
    shares, not shares weighted by a round's cost: small models' short trials are the noisiest per round (E2B's
    paired SD 2–4% against 31B's 1–3% here), so they need more rounds for the same width; weighting by cost gave
    E2B 9 rounds and left 4 of its rows inconclusive, where even shares gave it 21 and every row conclusive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .inference import rounds_needed

__all__ = ["RoundBudget", "StagePlan", "print_level", "target_for_margin"]


def print_level(rows_in_table: int, alpha: float = 0.05) -> float:
    """The confidence level no row of an m-row Holm table is printed below (Bonferroni's)."""
    return 1.0 - alpha / max(1, rows_in_table)


def target_for_margin(margin_pct: float) -> float:
    """The largest half-width (percent) that makes every row conclusive at this "no change" margin."""
    return 100.0 * math.sinh(math.log1p(margin_pct / 100.0) / 2.0)


@dataclass(frozen=True)
class StagePlan:
    """The staged rule for one cell: `pilot` rounds first, then the planned count, re-planned at most
    `extensions` times, never past `max_rounds`."""

    target_pct: float
    level: float
    pilot: int
    max_rounds: int
    extensions: int = 0

    def planned(self, sds: Sequence[float]) -> int:
        """Rounds every row needs for the target, from its log-ratio SD (NaN rows are ignored)."""
        needs = [rounds_needed(sd, self.target_pct, self.level) for sd in sds if math.isfinite(sd)]
        return min(self.max_rounds, max([self.pilot, *needs]))

    def next_stop(self, rounds: int, sds: Sequence[float], looks: int) -> int:
        """After `rounds` rounds (at a planned stop, `looks` of them so far), the round count to run to; equal to
        `rounds` when the cell is done."""
        if rounds < self.pilot:
            return self.pilot
        if looks > self.extensions or rounds >= self.max_rounds:
            return rounds
        return max(rounds, self.planned(sds))


@dataclass(frozen=True)
class RoundBudget:
    """The run's time for timed rounds, shared among its cells in the order they run."""

    total_s: float
    cells: int

    def share_s(self, spent_s: float, cells_done: int) -> float:
        """Seconds the next cell may spend: an even share of what the cells before it left, so a cell that
        finishes early passes its time on."""
        left = max(0.0, self.total_s - spent_s)
        return left / max(1, self.cells - cells_done)
