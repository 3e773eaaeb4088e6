"""`trials: plan`: each cell's timed rounds, chosen before its first one to maximise the rows the
run's budget is expected to decide, then fixed, so no Δ has a say in how many rounds a row gets
and every row keeps the fixed-n t interval.

What a row is expected to decide
    A row of n rounds whose per-round log ratios scatter σ is decided when its interval, at the
    level the table prints it (Bonferroni's α/m over the table's m rows, which Holm never
    exceeds), lies within ±margin ("no change") or beyond 0 (faster, slower). Planned at Δ = 0,
    the case a fusion that does nothing on this backend presents and the hardest but for an
    effect on the margin itself: the mean is N(0, σ²/n) and the sample SD s independent of it
    ((n − 1) s² / σ² ~ χ²(n − 1)), so P(decided) = E_s[P(log(1 − margin) + h ≤ mean ≤
    log(1 + margin) − h)] with h = t · s / √n and t Student's quantile at n − 1 degrees of
    freedom, integrated over s at QUADRATURE quantiles of its χ² law (`decide_probability`). A gate
    row (a limit instead of a margin) is decided when its interval lies wholly above or below
    −limit.

The plan
    Each cell costs its setup (workers started, weights loaded, warm-ups, which carry the
    correctness check), its rounds at its pace, and what follows them (op shares, stopping its
    workers). A cell gets no rounds, and is never loaded, or at least MIN_PLANNED_ROUNDS: heavy
    tails make a t interval on fewer rounds slightly liberal (docs/statistics.md). Among the
    subsets of cells that fit the budget at that minimum, each is filled one round at a time,
    always with the round that adds the most expected decided rows per second, each cell until
    its rows are expected decided (each row but its share of the table's UNDECIDED_ROWS, or as
    far as max_rounds can) or the budget is spent; the subset expected to decide the most rows
    wins, and of those that decide enough the one that takes the least time. The budget is
    thus a cap, and the plan's `seconds` the time the table needs. With more than
    EXHAUSTIVE_CELLS cells only the run's order is tried, cell by cell (the cells that fit, in
    turn).

A cell whose spread is not known yet is planned at the spread `CellCost.sds` is given: the runner
gives the machine's (a cached earlier run of that cell, or this run's cells), and
measure.run.planning says which. A cell given no spread at all (nothing measured on this machine
yet) gets MIN_PLANNED_ROUNDS: its own rounds measure the spread the cells after it are planned at.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from ..core.experiment import MIN_PLANNED_ROUNDS
from .stopping import Goal

__all__ = [
    "MIN_PLANNED_ROUNDS",
    "CellCost",
    "CellPlan",
    "Plan",
    "decide_probability",
    "plan_rounds",
    "rounds_for",
    "widest_spread",
]

EXHAUSTIVE_CELLS = 10  # at most this many cells: every subset is tried
QUADRATURE = 48  # quantiles of the sample SD's law the decision probability is averaged over
UNDECIDED_ROWS = 0.5  # the rows of a whole table a plan may leave to chance: half a row


@dataclass(frozen=True)
class CellCost:
    """What one cell will cost, and how its rows scatter: the plan's input."""

    cell: str  # the cell's key
    label: str  # how the plan line names it ("E2B (2/35 layers) pp128 tg3 b1")
    setup_s: float  # workers started, weights loaded, warm-ups (0 once paid)
    round_s: float  # a timed round
    after_s: float = 0.0  # op shares and stopping its workers
    sds: tuple[float, ...] = ()  # each row's per-round log-ratio SD

    def cost_s(self, rounds: int) -> float:
        return 0.0 if rounds == 0 else self.setup_s + rounds * self.round_s + self.after_s


@dataclass(frozen=True)
class CellPlan:
    """A cell's planned rounds and the rows they are expected to decide."""

    cost: CellCost
    rounds: int
    expected: float

    @property
    def seconds(self) -> float:
        return self.cost.cost_s(self.rounds)


@dataclass(frozen=True)
class Plan:
    """Each cell's rounds, in the run's order."""

    cells: tuple[CellPlan, ...]
    budget_s: float
    rows: int = 0  # the rows of the whole table (the Bonferroni level's m)
    level: float = 0.95  # the level the rows are planned at
    margin_pct: float = 5.0
    notes: tuple[str, ...] = field(default=())

    def rounds(self, cell: str) -> int:
        return next((c.rounds for c in self.cells if c.cost.cell == cell), 0)

    @property
    def expected(self) -> float:
        return sum(c.expected for c in self.cells)

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.cells)

    def after(self, cell: str) -> float:
        """The seconds the cells after `cell` are planned to take."""
        keys = [c.cost.cell for c in self.cells]
        return sum(c.seconds for c in self.cells[keys.index(cell) + 1 :]) if cell in keys else 0.0


def decide_probability(sd_log: float, rounds: int, alpha: float, goal: Goal) -> float:
    """The probability that a row of `rounds` rounds at true Δ = 0 and per-round log-ratio SD
    `sd_log` is decided at two-sided level `alpha` (module docstring)."""
    if rounds < 2:
        return 0.0
    if sd_log <= 0.0:
        return 1.0
    df = rounds - 1
    t = float(special.stdtrit(df, 1.0 - alpha / 2.0))
    quantiles = (np.arange(QUADRATURE) + 0.5) / QUADRATURE
    s = sd_log * np.sqrt(special.chdtri(df, 1.0 - quantiles) / df)
    se = sd_log / math.sqrt(rounds)  # the mean's true spread
    half = t * s / math.sqrt(rounds)
    if goal.limit_pct is not None:
        # decided when the interval lies wholly above -limit (or below it; at Δ = 0, never)
        room = -math.log1p(-goal.limit_pct / 100.0)
        p = special.ndtr((room - half) / se)
    else:
        high, low = math.log1p(goal.margin_pct / 100.0), math.log1p(-goal.margin_pct / 100.0)
        p = np.clip(special.ndtr((high - half) / se) - special.ndtr((low + half) / se), 0.0, 1.0)
    return float(np.mean(p))


def rounds_for(sd_log: float, alpha: float, goal: Goal, probability: float = 0.8) -> int | None:
    """The fewest rounds at which a row of this spread is decided with `probability` (at Δ = 0),
    None beyond 10,000."""
    n = MIN_PLANNED_ROUNDS
    while decide_probability(sd_log, n, alpha, goal) < probability:
        n = n + max(1, n // 8)
        if n > 10_000:
            return None
    while n > 2 and decide_probability(sd_log, n - 1, alpha, goal) >= probability:
        n -= 1
    return n


def widest_spread(rounds: int, alpha: float, goal: Goal, probability: float = 0.8) -> float:
    """The largest per-round log-ratio SD at which `rounds` rounds decide a row with
    `probability` (at Δ = 0): what a plan that knows no spread yet can promise."""
    low, high = 0.0, 1.0
    for _ in range(40):  # bisection to 1e-12 of a unit SD
        middle = (low + high) / 2.0
        low, high = (
            (middle, high)
            if decide_probability(middle, rounds, alpha, goal) >= probability
            else (low, middle)
        )
    return low


def plan_rounds(
    costs: Sequence[CellCost],
    budget_s: float,
    *,
    rows: int,
    goal: Goal,
    max_rounds: int,
    alpha: float = 0.05,
    min_rounds: int = MIN_PLANNED_ROUNDS,
    until_decided: bool = False,
) -> Plan:
    """Each cell's rounds for a run with `budget_s` seconds left (module docstring). `rows` is the
    table's row count, whose Bonferroni level the rows are planned at. `until_decided`: no more
    rounds once the rows are expected decided (`_Expectation.enough`), the budget a cap and the
    plan's seconds the time the table needs; else the budget is spent."""
    level_alpha = alpha / max(1, rows)
    expect = _Expectation(level_alpha, goal)
    enough = [expect.enough(cost, rows, max_rounds) for cost in costs] if until_decided else None
    subsets: list[tuple[int, ...]]
    if len(costs) <= EXHAUSTIVE_CELLS:
        subsets = [
            chosen
            for k in range(len(costs), 0, -1)
            for chosen in itertools.combinations(range(len(costs)), k)
        ]
    else:
        subsets = [tuple(range(k)) for k in range(len(costs), 0, -1)]
    best: tuple[float, int, float] = (-1.0, 0, 0.0)  # rows, cells given rounds, -seconds
    rounds = [0] * len(costs)
    for chosen in subsets:
        filled = _fill(costs, chosen, budget_s, expect, (min_rounds, max_rounds), enough)
        if filled is None:
            continue
        rows_of = [expect.rows(costs[i], filled[i]) for i in chosen]
        if enough is not None:
            rows_of = [min(found, enough[i]) for found, i in zip(rows_of, chosen, strict=True)]
        # Past enough, the quicker plan wins; of plans alike, the one that measures more cells (a
        # cell whose spread is not known yet adds no expected row, but its rounds measure it).
        key = (
            round(sum(rows_of), 9),
            len(chosen),
            -round(sum(costs[i].cost_s(filled[i]) for i in chosen), 9),
        )
        if key > best:
            best, rounds = key, filled
    cells = tuple(
        CellPlan(cost, n, expect.rows(cost, n)) for cost, n in zip(costs, rounds, strict=True)
    )
    return Plan(cells, budget_s, rows, 1.0 - level_alpha, goal.margin_pct)


class _Expectation:
    """Expected decided rows of a cell at a round count, remembered (the fill asks often)."""

    def __init__(self, alpha: float, goal: Goal) -> None:
        self.alpha, self.goal = alpha, goal
        self.seen: dict[tuple[float, int], float] = {}

    def row(self, sd: float, rounds: int) -> float:
        key = (sd, rounds)
        if key not in self.seen:
            self.seen[key] = decide_probability(sd, rounds, self.alpha, self.goal)
        return self.seen[key]

    def rows(self, cost: CellCost, rounds: int) -> float:
        return sum(self.row(sd, rounds) for sd in cost.sds) if rounds else 0.0

    def enough(self, cost: CellCost, rows: int, max_rounds: int) -> float:
        """The expected decided rows of a cell past which a plan adds it no round: each of its
        rows decided but for its share of the table's UNDECIDED_ROWS, or as far as max_rounds can.
        A cell's own, so a plan made again at a later cell's start asks of it what the first did."""
        share = 1.0 - UNDECIDED_ROWS / max(1, rows)
        return sum(min(share, self.row(sd, max_rounds)) for sd in cost.sds)


def _fill(
    costs: Sequence[CellCost],
    chosen: Sequence[int],
    budget_s: float,
    expect: _Expectation,
    bounds: tuple[int, int],
    enough: Sequence[float] | None,
) -> list[int] | None:
    """The chosen cells at the fewest rounds `bounds` allow, then a round at a time where it buys
    the most expected rows per second, each cell until its `enough` rows are expected (a cell
    with no spread known then stays at the fewest); None when the chosen cells do not fit at the
    fewest."""
    min_rounds, max_rounds = bounds
    rounds = [0] * len(costs)
    for i in chosen:
        rounds[i] = min_rounds
    left = budget_s - sum(costs[i].cost_s(min_rounds) for i in chosen)
    if left < 0:
        return None

    def short(i: int) -> bool:
        return enough is None or expect.rows(costs[i], rounds[i]) < enough[i] - 1e-9

    while True:
        fits = [
            i for i in chosen if rounds[i] < max_rounds and costs[i].round_s <= left and short(i)
        ]
        if not fits:
            return rounds

        def worth(i: int) -> tuple[float, float]:
            gain = expect.rows(costs[i], rounds[i] + 1) - expect.rows(costs[i], rounds[i])
            # Where no round adds an expected row, the time goes to the latest cell: kept for the
            # cells still to run, whose plan at their start spends it on what they measure then.
            # With no spread known at all, time is shared evenly.
            later = float(i) if costs[i].sds else -rounds[i] * costs[i].round_s
            return round(gain / costs[i].round_s, 9), later

        pick = max(fits, key=worth)
        rounds[pick] += 1
        left -= costs[pick].round_s
