"""trials: plan's planner (analysis.planner): the probability a row is decided, checked against a
simulation of the same design; and plans that fit the budget, give a cell none or at least the
minimum, and go where the rows decide."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import special

from fusebench.analysis.planner import CellCost, decide_probability, plan_rounds, rounds_for
from fusebench.analysis.stopping import Goal
from fusebench.core.experiment import MIN_PLANNED_ROUNDS

GOAL = Goal(5.0)
ALPHA = 0.05 / 8


def simulated_decided(sd: float, n: int, alpha: float, draws: int = 40_000) -> float:
    """The share of rows decided (no change within ±5%, or beyond 0) when n normal rounds of
    spread sd and Δ = 0 get the fixed-n t interval."""
    rng = np.random.default_rng(7)
    rounds = rng.normal(0.0, sd, size=(draws, n))
    mean, s = rounds.mean(axis=1), rounds.std(axis=1, ddof=1)
    half = special.stdtrit(n - 1, 1.0 - alpha / 2.0) * s / np.sqrt(n)
    inside = (mean - half >= np.log1p(-0.05)) & (mean + half <= np.log1p(0.05))
    beyond = (mean - half > 0) | (mean + half < 0)
    return float(np.mean(inside | beyond))


@pytest.mark.parametrize(("sd", "n"), [(0.02, 8), (0.03, 8), (0.03, 14), (0.05, 24), (0.08, 40)])
def test_the_decision_probability_matches_a_simulation_of_the_design(sd: float, n: int):
    # The planner counts "no change" only (a false "faster" at Δ = 0 happens at most alpha).
    assert decide_probability(sd, n, ALPHA, GOAL) == pytest.approx(
        simulated_decided(sd, n, ALPHA), abs=0.015
    )


def test_more_rounds_never_decide_less_and_a_quiet_row_is_decided_at_once():
    probabilities = [decide_probability(0.04, n, ALPHA, GOAL) for n in range(2, 60)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(probabilities))
    assert decide_probability(0.001, 8, ALPHA, GOAL) == pytest.approx(1.0)
    assert decide_probability(0.2, 8, ALPHA, GOAL) < 0.01


def test_rounds_for_is_the_fewest_that_reach_the_probability():
    n = rounds_for(0.03, ALPHA, GOAL)
    assert n is not None
    assert (
        decide_probability(0.03, n, ALPHA, GOAL)
        >= 0.8
        > decide_probability(0.03, n - 1, ALPHA, GOAL)
    )


def costs(sd: float = 0.02) -> list[CellCost]:
    """Four sizes as the default job's on a 2-core VM at one BLAS thread (seconds measured there
    on 2026-12-04), four rows each."""
    return [
        CellCost("e2b", "E2B", 6.0, 3.0, 1.0, (sd,) * 4),
        CellCost("e4b", "E4B", 12.0, 5.7, 1.0, (sd,) * 4),
        CellCost("26b", "26B", 30.0, 10.7, 1.0, (sd,) * 4),
        CellCost("31b", "31B", 28.0, 18.4, 1.0, (sd,) * 4),
    ]


@pytest.mark.parametrize("budget", [60.0, 150.0, 320.0, 500.0, 900.0])
@pytest.mark.parametrize("sd", [0.015, 0.03, 0.06])
def test_a_plan_fits_its_budget_and_gives_each_cell_none_or_the_minimum(budget: float, sd: float):
    plan = plan_rounds(costs(sd), budget, rows=8, goal=GOAL, max_rounds=60)
    assert plan.seconds <= budget + 1e-9
    assert all(c.rounds == 0 or MIN_PLANNED_ROUNDS <= c.rounds <= 60 for c in plan.cells)


def test_the_dearest_size_goes_when_all_four_cannot_have_their_minimum():
    # 8 rounds of all four take 302 s plus 76 s of setup: more than 320 s.
    plan = plan_rounds(costs(0.015), 320.0, rows=8, goal=GOAL, max_rounds=60)
    assert [c.rounds > 0 for c in plan.cells] == [True, True, True, False]
    assert plan.expected == pytest.approx(12.0, abs=0.05)
    # with room for all four, all four get rounds and decide their rows
    wide = plan_rounds(costs(0.015), 500.0, rows=8, goal=GOAL, max_rounds=60)
    assert all(c.rounds for c in wide.cells) and wide.expected > 15.5


def test_rounds_go_where_they_decide_not_evenly():
    # A noisy cheap size and a quiet dear one: the quiet one needs few rounds; the rest go to the
    # noisy one, which an even split would leave undecided.
    cells = [
        CellCost("noisy", "A", 0.0, 1.0, 0.0, (0.05,) * 4),
        CellCost("quiet", "B", 0.0, 5.0, 0.0, (0.01,) * 4),
    ]
    plan = plan_rounds(cells, 100.0, rows=8, goal=GOAL, max_rounds=60)
    assert plan.rounds("quiet") == MIN_PLANNED_ROUNDS
    assert plan.rounds("noisy") == 60
    assert plan.expected > 7.0


def test_a_bigger_budget_never_expects_fewer_rows():
    expected = [
        plan_rounds(costs(0.03), b, rows=8, goal=GOAL, max_rounds=60).expected
        for b in range(60, 900, 60)
    ]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(expected))


def test_without_a_known_spread_the_time_is_shared_evenly():
    cells = [CellCost(k, k, 0.0, 2.0, 0.0) for k in ("a", "b")]
    plan = plan_rounds(cells, 80.0, rows=4, goal=GOAL, max_rounds=60)
    assert plan.rounds("a") == plan.rounds("b") == 20


def test_a_gate_row_is_decided_against_the_limit():
    gate = Goal(5.0, limit_pct=5.0)
    # one-sided: at Δ = 0 a row is decided when its interval clears -5%
    assert decide_probability(0.03, 12, ALPHA, gate) > decide_probability(0.03, 12, ALPHA, GOAL)


def test_a_plan_until_decided_takes_the_time_the_table_needs_and_the_budget_is_a_cap():
    decided = plan_rounds(
        costs(0.015), 900.0, rows=16, goal=GOAL, max_rounds=60, until_decided=True
    )
    spent = plan_rounds(costs(0.015), 900.0, rows=16, goal=GOAL, max_rounds=60)
    # every row but half a row of the table expected decided, in less than the budget spent
    assert decided.expected >= 16 - 0.5 - 1e-6 and decided.seconds < spent.seconds <= 900.0
    assert all(c.rounds >= MIN_PLANNED_ROUNDS for c in decided.cells)
    # where the table needs more than the cap, the cap decides what it can, as spending it does
    capped = plan_rounds(costs(0.015), 320.0, rows=16, goal=GOAL, max_rounds=60, until_decided=True)
    assert capped.expected == pytest.approx(
        plan_rounds(costs(0.015), 320.0, rows=16, goal=GOAL, max_rounds=60).expected, abs=0.05
    )


@pytest.mark.parametrize("sd", [0.015, 0.025, 0.03])
def test_a_plan_made_again_at_a_later_cell_asks_of_it_what_the_first_did(sd: float):
    first = plan_rounds(costs(sd), 900.0, rows=16, goal=GOAL, max_rounds=60, until_decided=True)
    left = 900.0 - first.cells[0].seconds
    again = plan_rounds(costs(sd)[1:], left, rows=16, goal=GOAL, max_rounds=60, until_decided=True)
    assert [c.rounds for c in again.cells] == [c.rounds for c in first.cells[1:]]
    assert first.seconds == pytest.approx(first.cells[0].seconds + again.seconds)


def test_until_decided_a_cell_without_a_spread_gets_the_fewest_rounds():
    cells = [CellCost(k, k, 0.0, 2.0, 0.0) for k in ("a", "b")]
    plan = plan_rounds(cells, 80.0, rows=4, goal=GOAL, max_rounds=60, until_decided=True)
    assert plan.rounds("a") == plan.rounds("b") == MIN_PLANNED_ROUNDS


def test_the_widest_spread_is_where_the_rounds_stop_deciding():
    from fusebench.analysis.planner import widest_spread

    goal, alpha = Goal(5.0), 0.05 / 16
    widest = widest_spread(8, alpha, goal)
    assert rounds_for(widest, alpha, goal) <= 8 < rounds_for(widest * 1.02, alpha, goal)
    assert widest_spread(16, alpha, goal) > widest
