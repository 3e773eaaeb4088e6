"""The confidence sequence (analysis.sequential) and the stopping rule built on it
(analysis.stopping), checked exactly where a formula allows and by a small seeded run of
benchmarks/sequential_coverage.py where it does not: the false-claim rate, the coverage at the
stopping round, and the gate's three outcomes at the slow VM's noise. Seeded, so the figures are the
same on every machine; the full run's figures are the benchmark's."""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from fusebench.analysis import sequential
from fusebench.analysis.allocation import Components
from fusebench.analysis.inference import paired_estimate, rounds_needed
from fusebench.analysis.stopping import Goal, Row, print_level, target_for_margin
from fusebench.core.cell import Measured, Trial
from fusebench.core.spec import parse_experiment
from fusebench.measure.run import cellstop
from fusebench.measure.run.cellstop import MIN_BUDGET_ROUNDS, CellStop, RoundCosts
from fusebench.measure.run.pairspreads import PairSpreads


def _benchmark(name: str) -> types.ModuleType:
    """A module of benchmarks/, imported by its name (the process pool pickles its functions by
    module name)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_benchmark("own_tree")  # the script imports it first, as when it runs from benchmarks/
sim = _benchmark("sequential_coverage")


def _martingale(x: np.ndarray, mu: float) -> float:
    """M_n(mu) straight from its definition, for checking the closed forms."""
    n, s, v = x.size, float(np.sum(x - mu)), float(np.sum((x - mu) ** 2))
    rho = sequential.RHO
    return math.sqrt(rho / (n + rho)) * (1.0 - s * s / ((n + rho) * v)) ** (-n / 2.0)


def test_the_interval_is_where_the_mixture_martingale_stays_below_one_over_alpha():
    x = np.random.default_rng(3).normal(0.02, 0.05, 15)
    half = sequential.half_width_log(x.size, float(x.std(ddof=1)), 0.05)
    edge = x.mean() + half
    assert _martingale(x, edge) == pytest.approx(1 / 0.05, rel=1e-9)
    assert _martingale(x, edge - 1e-4) < 20.0 < _martingale(x, edge + 1e-4)
    assert sequential.p_value(x.size, float(x.mean()), float(x.std(ddof=1))) == pytest.approx(
        min(1.0, 1.0 / _martingale(x, 0.0)), rel=1e-9
    )


def test_the_interval_is_unbounded_early_and_narrows_like_a_t_interval_later():
    assert math.isinf(sequential.half_width_log(2, 0.05, 0.05 / 8))
    assert math.isfinite(sequential.half_width_log(6, 0.05, 0.05 / 8))  # the pilot's round count
    widths = [sequential.half_width_log(n, 0.05, 0.05) for n in range(6, 200)]
    assert all(b < a for a, b in itertools.pairwise(widths))
    # Wider than a fixed-n t interval at every n: the price of looking after every round.
    from scipy import stats

    for n in (8, 20, 60):
        assert sequential.half_width_log(n, 0.05, 0.05) > stats.t.ppf(
            0.975, n - 1
        ) * 0.05 / math.sqrt(n)


def test_the_paired_estimate_prints_the_sequence_and_its_p_value_is_dual_to_it():
    rng = np.random.default_rng(0)
    base = np.exp(rng.normal(0, 0.03, 12))
    new = base * np.exp(rng.normal(0.02, 0.02, 12))
    est = paired_estimate(base, new)
    half = sequential.half_width_log(est.n, est.sd_log, 0.05)
    assert (est.low, est.high) == pytest.approx(
        (math.exp(est.mean_log - half), math.exp(est.mean_log + half))
    )
    level = 1.0 - est.p_value
    low, high = est.interval(min(level + 1e-9, 1 - 1e-12))
    assert low == pytest.approx(1.0, abs=1e-6) or high == pytest.approx(1.0, abs=1e-6)


def test_rounds_to_reach_is_the_first_round_count_narrow_enough():
    for sd, target in ((0.02, 0.01), (0.08, 0.045), (0.11, 0.02)):
        n = sequential.rounds_to_reach(target, sd, 0.05 / 8)
        assert (
            sequential.half_width_log(n, sd, 0.05 / 8)
            <= target
            < sequential.half_width_log(n - 1, sd, 0.05 / 8)
        )
    assert rounds_needed(0.05, 2.0, 0.95) == sequential.rounds_to_reach(
        math.asinh(0.02), 0.05, 0.05
    )


def test_a_row_is_decided_by_a_verdict_or_by_the_side_of_the_limit():
    margin = Goal(5.0)
    assert Row(0.10, 0.02, 12, 0.05, margin).decided  # faster
    assert Row(0.0, 0.01, 12, 0.05, margin).decided  # no change within ±5%
    assert not Row(0.03, 0.08, 12, 0.05, margin).decided
    gate = Goal(5.0, limit_pct=5.0)
    assert Row(0.0, 0.01, 12, 0.05, gate).decided  # inside the limit
    assert Row(-0.30, 0.02, 12, 0.05, gate).decided  # beyond it
    assert not Row(-0.05, 0.05, 12, 0.05, gate).decided  # across it
    # A precision target asks for a narrow interval besides the decision.
    assert not Row(0.10, 0.05, 12, 0.05, Goal(5.0, target_pct=1.0)).decided


def test_the_forecast_is_the_round_count_at_which_the_row_would_be_decided():
    row = Row(0.0, 0.08, 6, 0.05 / 8, Goal(5.0))
    n = row.rounds_to_decide()
    assert (
        Row(0.0, 0.08, n, 0.05 / 8, Goal(5.0)).decided
        and not Row(0.0, 0.08, n - 1, 0.05 / 8, Goal(5.0)).decided
    )
    # on the limit
    assert Row(math.log(0.95), 0.05, 6, 0.05, Goal(5.0, limit_pct=5.0)).rounds_to_decide() is None


def test_the_print_level_and_the_target_for_a_margin():
    assert print_level(8) == pytest.approx(1 - 0.05 / 8)
    assert target_for_margin(5.0) == pytest.approx(2.4, abs=0.05)


def test_the_replayed_rounds_are_the_slow_vms_own():
    ratios = sim.replay_ratios()
    assert ratios.size > 100 and abs(ratios.mean()) < 1e-9
    assert 0.04 < ratios.std() < 0.12  # the 4-11% per-round SD the slow VM showed


@pytest.mark.parametrize(
    "model", [sim.MODELS[1], sim.MODELS[3], sim.MODELS[4]], ids=lambda m: m.name
)
def test_a_a_tables_claim_little_and_the_stopped_intervals_cover(model):
    tally, rounds = sim.comparison_tables(model, 0.0, tables=15, max_rounds=60, seed=7)
    assert tally.false_tables <= 2  # of 15 tables; at α = 5% the full run's rate is the benchmark's
    assert tally.covered / tally.rows >= 0.9
    assert min(rounds) >= sim.PILOT


def test_a_large_effect_is_called_in_the_right_direction():
    tally, _ = sim.comparison_tables(sim.MODELS[0], 0.20, tables=5, max_rounds=60, seed=1)
    assert tally.wrong_rows == 0


def test_the_gate_never_passes_what_it_could_not_see():
    # The slow VM's noise with the round cap of a small budget: the answer must be "cannot tell",
    # not "passed".
    slowed = sim.gate_runs(sim.MODELS[1], 0.10, runs=10, max_rounds=8, seed=5)
    assert slowed.passed == 0 and slowed.cannot_tell + slowed.failed == 10
    same = sim.gate_runs(sim.MODELS[0], 0.0, runs=10, max_rounds=60, seed=5)
    assert same.failed <= 1


def test_a_fresh_pair_of_workers_every_few_rounds_keeps_coverage_that_one_pair_loses():
    # A process offset half the per-round SD: with one pair of workers per run nothing can see it,
    # and the intervals cover less than they say; with a fresh pair every 6 rounds the spread
    # between pairs widens them.
    one_pair = sim.process_runs(sim.MODELS[0], 0.5, 0, runs=30, max_rounds=30, seed=7)
    fresh = sim.process_runs(sim.MODELS[0], 0.5, sim.WORKER_ROUNDS, runs=30, max_rounds=30, seed=7)
    assert fresh.covered / fresh.rows >= 0.95
    assert one_pair.covered / one_pair.rows < fresh.covered / fresh.rows


BUDGET_EXPERIMENT = """\
name: budget
models: [{preset: tiny, layers: 2}]
variants:
  baseline: {geglu: unfused}
  compiled: {geglu: compiled}
workloads: {prompt_tokens: 8, gen_tokens: 2}
trials: budget
budget_s: 60
max_rounds: 40
"""


def _trial(variant: str, round_: int, tps: float) -> Trial:
    measured = Measured(prefill_s=0.1, prefill_tps=tps, gen_s=0.1, gen_tps=tps)
    return Trial(variant=variant, round=round_, warmup=False, measured=measured)


def _fixed(exp, builds: list[str], allowance_s: float, costs: RoundCosts) -> int:
    stop = CellStop(exp, builds, allowance_s=allowance_s)
    stop.expect(costs)
    return stop.fix_rounds()


def test_trials_budget_fixes_the_rounds_its_share_holds_and_no_data_end_them_sooner():
    exp = parse_experiment(BUDGET_EXPERIMENT)
    assert _fixed(exp, ["current"], 105.0, RoundCosts(10.0)) == 10
    assert _fixed(exp, ["current"], 5.0, RoundCosts(10.0)) == MIN_BUDGET_ROUNDS
    assert _fixed(exp, ["current"], 1e6, RoundCosts(10.0)) == exp.rounds
    stop = CellStop(exp, ["current"], allowance_s=1e6)
    stop.expect(RoundCosts(1.0))
    stop.fix_rounds()
    for round_ in range(exp.rounds):  # compiled twice as fast, every round: decided at once
        stop.add("current", _trial("baseline", round_, 100.0), process=0)
        stop.add("current", _trial("compiled", round_, 200.0 + round_ % 3), process=0)
        if round_ + 1 < exp.rounds:
            assert stop.stop_reason(round_ + 1) is None
    assert stop.stop_reason(exp.rounds) == "fixed from the budget"


def test_trials_budget_counts_the_fresh_worker_pairs_between_its_rounds_and_the_stop_after():
    exp = parse_experiment(BUDGET_EXPERIMENT + "worker_rounds: 6\n")
    # 13 rounds of 10 s need fresh pairs before rounds 7 and 13: 130 s + 2 x 20 s = 170 s, and
    # stopping the last pair 5 s more
    costs = RoundCosts(10.0, fresh_pair_s=20.0, stop_s=5.0)
    assert _fixed(exp, ["a", "b"], 176.0, costs) == 13
    assert _fixed(exp, ["a", "b"], 174.0, costs) == 12


def test_worker_rounds_auto_chooses_the_rounds_a_pair_with_the_rounds_the_budget_holds():
    # the Zen 4's gate cell (results/placement): 9 s rounds, a fresh pair 25 s, 300 s left; the
    # count analysis.allocation chooses across the pair offsets machines show, not the 6 of old
    exp = parse_experiment(BUDGET_EXPERIMENT.replace("max_rounds: 40", "max_rounds: 60"))
    assert exp.worker_rounds is None  # auto, the default
    stop = CellStop(exp, ["a", "b"], allowance_s=300.0)
    stop.expect(RoundCosts(9.0, fresh_pair_s=25.0))
    assert (stop.fix_rounds(), stop.rounds_per_pair) == (14, 2)
    assert [stop.pairs_started(n) for n in (2, 3, 14)] == [0, 1, 6]
    one_build = CellStop(exp, ["current"], allowance_s=300.0)  # no fresh pairs to choose
    one_build.expect(RoundCosts(9.0))
    assert (one_build.fix_rounds(), one_build.rounds_per_pair) == (33, 0)


def test_before_the_first_round_the_gate_says_whether_its_limit_is_in_reach(tmp_path: Path):
    exp = parse_experiment(BUDGET_EXPERIMENT.replace("max_rounds: 40", "max_rounds: 60"))
    stop = CellStop(exp, ["a", "b"], allowance_s=300.0)
    stop.expect(RoundCosts(9.0, fresh_pair_s=25.0))
    stop.fix_rounds()  # 14 rounds in 7 pairs
    # before any A/B of the cell here: the scatter its rounds can decide the limit at
    first = stop.limit_forecast(None).text
    assert first.startswith("the -2% limit: no A/B of this cell measured here yet; 14 rounds in")
    assert "7 pairs decide a row that scatters up to" in first
    calm = {"a row": Components(within=0.01, between=0.002, pairs=7, rounds=14)}
    assert stop.limit_forecast(calm).text.startswith(
        "the -2% limit: in reach of 14 rounds in 7 pairs"
    )
    noisy = {"calm": calm["a row"], "noisy": Components(0.06, 0.0, 7, 14)}
    forecast = stop.limit_forecast(noisy)
    line = forecast.text
    assert forecast.in_reach is False
    assert line.startswith("the -2% limit: out of reach of 14 rounds in 7 pairs (its widest row")
    assert "would reach it (--budget)" in line
    # what a cell's A/B measured is read back by the next one on this machine
    spreads = PairSpreads(tmp_path / "pairs.json", exp, ["a", "b"])
    cell = exp.cells()[0]
    assert spreads.read(cell) is None
    spreads.write(cell, noisy)
    assert spreads.read(cell).rows == noisy
    assert PairSpreads(tmp_path / "pairs.json", exp, ["a"]).read(cell) is None  # one build


class _Clock:
    """A stand-in for cellstop's clock, so a budget's stop is checked at set times, not timed."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_a_budget_stops_before_a_round_whose_fresh_pair_or_the_final_stop_would_overrun(
    monkeypatch: pytest.MonkeyPatch,
):
    exp = parse_experiment(BUDGET_EXPERIMENT + "worker_rounds: 6\n")
    clock = _Clock()
    monkeypatch.setattr(cellstop, "time", clock)
    stop = CellStop(exp, ["a", "b"], allowance_s=100.0)
    stop.expect(RoundCosts(10.0, fresh_pair_s=20.0, stop_s=5.0))
    stop.planned = exp.rounds  # fixed far beyond the share, as a too-cheap estimate would
    clock.now = 85.0  # round 4 (10 s) and the stop (5 s) fit the 15 s left
    assert stop.stop_reason(3) is None
    clock.now = 86.0
    assert stop.stop_reason(3) == "budget"
    clock.now = 65.0  # round 7 needs a fresh pair first: 20 + 10 + 5 s, the 35 s left
    assert stop.stop_reason(6) is None
    clock.now = 66.0
    assert stop.stop_reason(6) == "budget"


def test_the_budget_plans_with_the_rounds_and_fresh_pairs_it_measured():
    exp = parse_experiment(BUDGET_EXPERIMENT + "worker_rounds: 6\n")
    stop = CellStop(exp, ["a", "b"], allowance_s=100.0)
    stop.expect(RoundCosts(10.0, fresh_pair_s=20.0))
    stop.round_took(12.0)
    stop.round_took(14.0)
    stop.fresh_pair_took(30.0, stop_s=4.0)
    stop.fresh_pair_took(25.0, stop_s=6.0)
    assert stop.costs == RoundCosts(13.0, fresh_pair_s=30.0, stop_s=6.0)


def test_the_budget_judges_the_next_round_at_the_slowest_pace_a_round_took(
    monkeypatch: pytest.MonkeyPatch,
):
    exp = parse_experiment(BUDGET_EXPERIMENT)
    clock = _Clock()
    monkeypatch.setattr(cellstop, "time", clock)
    stop = CellStop(exp, ["a", "b"], allowance_s=100.0)
    stop.expect(RoundCosts(10.0, stop_s=5.0))
    stop.planned = exp.rounds
    stop.round_took(8.0)
    stop.round_took(12.0)  # a mean of 10 s, the slowest 12 s
    clock.now = 83.0  # 17 s left: a 12 s round and the 5 s stop fit
    assert stop.stop_reason(2) is None
    clock.now = 84.0  # 16 s left: a round at the mean would fit, one as slow as the slowest not
    assert stop.stop_reason(2) == "budget"
