"""The staged stopping rule (analysis.stopping), simulated as the runner applies it: A/A tables of 4 cells × 2
metrics, each cell's rounds planned from its own rows, Holm across the table at the end. Seeded, so the rates are
the same on every machine; `python tests/test_stopping.py` prints them (the figures in analysis.stopping)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.analysis.inference import adjust, paired_estimate, verdict
from bench.analysis.stopping import RoundBudget, StagePlan, print_level, target_for_margin

CELLS, METRICS_PER_CELL, MAX_ROUNDS, TARGET_PCT, MARGIN_PCT = 4, 2, 30, 2.4, 5.0
ROWS = CELLS * METRICS_PER_CELL


def _normal(rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    return rng.normal(0.0, 0.02, size)


def _stalls(rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    # 2% lognormal trial noise, and 5% of trials (either arm) 40% slower: a heavy tail on both sides.
    noise = rng.normal(0.0, 0.02, size)
    return noise + np.where(rng.random(size) < 0.05, math.log(0.6), 0.0)


def _student_t(rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    return 0.015 * rng.standard_t(3, size)


NOISE = {"normal 2%": _normal, "2% + 40% stalls": _stalls, "student-t(3)": _student_t}


def _cell_rounds(rng: np.random.Generator, noise, plan: StagePlan) -> list[tuple[np.ndarray, np.ndarray]]:
    """One cell's rows (baseline, new throughputs per round) after the staged rule stopped it."""
    base = np.exp(noise(rng, (METRICS_PER_CELL, MAX_ROUNDS)))
    new = np.exp(noise(rng, (METRICS_PER_CELL, MAX_ROUNDS)))  # A/A: the same distribution
    rounds, looks, stop = plan.pilot, 0, plan.pilot
    while True:
        if rounds >= stop:
            sds = [paired_estimate(base[m, :rounds], new[m, :rounds]).sd_log for m in range(METRICS_PER_CELL)]
            stop = plan.next_stop(rounds, sds, looks)
            looks += 1
            if stop <= rounds:
                break
        rounds += 1
    return [(base[m, :rounds], new[m, :rounds]) for m in range(METRICS_PER_CELL)]


def simulate(noise, tables: int, seed: int = 0) -> tuple[float, float, float]:
    """(family-wise false-claim rate per table, unadjusted 95% coverage per row, mean rounds per cell)."""
    rng = np.random.default_rng(seed)
    plan = StagePlan(TARGET_PCT, print_level(ROWS), pilot=6, max_rounds=MAX_ROUNDS)
    false_tables = covered = rounds = 0
    for _ in range(tables):
        rows = [row for _ in range(CELLS) for row in _cell_rounds(rng, noise, plan)]
        estimates = [paired_estimate(b, n) for b, n in rows]
        words = [verdict(a, margin_pct=MARGIN_PCT).word for a in adjust(estimates)]
        false_tables += any(w in ("faster", "slower") for w in words)
        covered += sum(e.low <= 1.0 <= e.high for e in estimates)
        rounds += sum(len(b) for b, _ in rows) / METRICS_PER_CELL
    return false_tables / tables, covered / (tables * ROWS), rounds / (tables * CELLS)


@pytest.mark.parametrize("name", list(NOISE))
def test_the_staged_rule_keeps_false_claims_and_coverage(name):
    false_rate, coverage, _ = simulate(NOISE[name], tables=600, seed=1)
    # 600 tables: a 5% rate has an SD of 0.9%; 4 800 rows: coverage's SD is 0.3%.
    assert false_rate <= 0.05 + 0.015
    assert coverage >= 0.94


def test_a_width_at_the_target_makes_every_row_conclusive():
    target = target_for_margin(MARGIN_PCT)
    assert 2.4 <= target < 2.5
    half = math.asinh(target / 100.0)
    for centre in np.linspace(-half, half, 21):  # any interval of that width that contains a ratio of 1
        assert math.exp(centre + half) <= 1.05 + 1e-12 and math.exp(centre - half) >= 0.95


def test_a_quick_cell_passes_its_time_on():
    budget = RoundBudget(270.0, 4)
    assert budget.share_s(0.0, 0) == pytest.approx(67.5)
    assert budget.share_s(30.0, 1) == pytest.approx(80.0)  # the first cell used 30 s of its 67.5
    assert budget.share_s(300.0, 3) == 0.0


def test_the_plan_never_passes_max_rounds_and_stops_after_its_extensions():
    plan = StagePlan(2.4, print_level(8), pilot=6, max_rounds=12, extensions=1)
    assert plan.next_stop(3, [0.1], 0) == 6
    assert plan.next_stop(6, [0.5], 0) == 12
    assert plan.next_stop(6, [0.001], 0) == 6  # already narrow: done after the pilot
    assert plan.next_stop(9, [0.5], 2) == 9  # the one extension was used
    assert StagePlan(2.4, print_level(8), pilot=6, max_rounds=12).next_stop(9, [0.5], 1) == 9  # none by default


if __name__ == "__main__":
    for label, model in NOISE.items():
        fw, cov, mean_rounds = simulate(model, tables=4000, seed=2)
        print(f"{label}: false-claim rate per 8-row table {fw:.2%}, 95% coverage per row {cov:.2%}, "
              f"{mean_rounds:.1f} rounds per cell")
