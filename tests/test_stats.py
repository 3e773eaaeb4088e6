"""Pin bench.stats against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bench.analysis.stats import (
    RatioCI,
    bootstrap_ratio_ci,
    bootstrap_ratio_of_medians_ci,
    compare,
    compare_runs,
    holm,
    mann_whitney_min_p,
    mann_whitney_p,
    paired_ratios,
    paired_speedups,
    regression,
    summarize,
    summary_table,
    verdict,
)
from bench.present.format import format_ci, format_delta, format_tps

# --- summarize -------------------------------------------------------------------------------------


def test_summarize_odd_length():
    s = summarize([5, 1, 4, 2, 3])
    assert s.n == 5
    assert (s.median, s.q1, s.q3, s.iqr) == (3.0, 2.0, 4.0, 2.0)
    assert (s.min, s.max, s.mean) == (1.0, 5.0, 3.0)
    # sample variance = (4+1+0+1+4)/4 = 2.5
    assert s.cv == pytest.approx(math.sqrt(2.5) / 3.0)


def test_summarize_even_length_uses_linear_interpolation():
    s = summarize([1, 2, 3, 4])
    # positions 0.75 / 1.5 / 2.25 in the sorted array
    assert (s.q1, s.median, s.q3) == (1.75, 2.5, 3.25)
    assert s.iqr == 1.5
    # sample variance = (2.25+0.25+0.25+2.25)/3 = 5/3
    assert s.cv == pytest.approx(math.sqrt(5 / 3) / 2.5)


def test_summarize_single_value_has_zero_cv():
    s = summarize([7.0])
    assert (s.n, s.median, s.iqr, s.cv, s.min, s.max) == (1, 7.0, 0.0, 0.0, 7.0, 7.0)


def test_summarize_drops_nan_and_rejects_empty():
    assert summarize([1.0, np.nan, 3.0]).median == 2.0
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([np.nan])


# --- paired_ratios ---------------------------------------------------------------------------------


def test_paired_ratios():
    r = paired_ratios([100.0, 200.0, 50.0], [110.0, 180.0, 75.0])
    np.testing.assert_allclose(r, [1.1, 0.9, 1.5])


def test_paired_ratios_drops_nan_pairs():
    r = paired_ratios([100.0, np.nan, 50.0, 10.0], [110.0, 180.0, 75.0, np.nan])
    np.testing.assert_allclose(r, [1.1, 1.5])


def test_paired_ratios_length_mismatch():
    with pytest.raises(ValueError):
        paired_ratios([1.0, 2.0], [1.0])


# --- bootstrap_ratio_ci ----------------------------------------------------------------------------


def test_bootstrap_is_reproducible_with_seed():
    ratios = np.random.default_rng(123).lognormal(0.1, 0.05, size=20)
    a = bootstrap_ratio_ci(ratios, seed=7)
    b = bootstrap_ratio_ci(ratios, seed=7)
    assert a == b
    assert a.ratio == pytest.approx(float(np.median(ratios)))
    assert a.low <= a.ratio <= a.high
    assert a.n == 20


def test_bootstrap_collapses_when_all_ratios_equal():
    ci = bootstrap_ratio_ci([1.25] * 10)
    assert (ci.ratio, ci.low, ci.high) == (1.25, 1.25, 1.25)


def test_bootstrap_single_ratio_is_degenerate_and_empty_raises():
    ci = bootstrap_ratio_ci([1.3])
    assert (ci.ratio, ci.low, ci.high, ci.n) == (1.3, 1.3, 1.3, 1)
    with pytest.raises(ValueError):
        bootstrap_ratio_ci([])


def test_bootstrap_ci_coverage():
    true_ratio, n, experiments = 1.1, 15, 300
    rng = np.random.default_rng(2024)
    covered = 0
    for i in range(experiments):
        baseline = rng.lognormal(np.log(100.0), 0.2, size=n)
        # Lognormal noise with median 1 around the true ratio: the population median ratio is 1.1.
        new = baseline * true_ratio * rng.lognormal(0.0, 0.05, size=n)
        ci = bootstrap_ratio_ci(paired_ratios(baseline, new), resamples=2000, seed=i)
        covered += ci.low <= true_ratio <= ci.high
    assert 0.88 <= covered / experiments <= 0.99


def test_ratio_ci_percent_properties():
    ci = RatioCI(ratio=1.166, low=1.121, high=1.203, n=10)
    assert ci.delta_pct == pytest.approx(16.6)
    assert ci.low_pct == pytest.approx(12.1)
    assert ci.high_pct == pytest.approx(20.3)


# --- mann_whitney_p / holm -------------------------------------------------------------------------


def test_mann_whitney_separated_and_degenerate():
    assert mann_whitney_p([1, 2, 3, 4, 5, 6, 7, 8], [11, 12, 13, 14, 15, 16, 17, 18]) < 0.01
    assert mann_whitney_p([5.0, 5.0, 5.0], [5.0, 5.0, 5.0]) == 1.0
    assert mann_whitney_p([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert mann_whitney_p([1.0], [2.0, 3.0, 4.0]) == 1.0


def test_holm_hand_worked():
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> raised to 0.06 for monotonicity
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_handles_empty():
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    assert holm([0.2]) == pytest.approx([0.2])


# --- verdict / regression --------------------------------------------------------------------------


def _ci(low: float, high: float) -> RatioCI:
    return RatioCI(ratio=(low + high) / 2, low=low, high=high, n=10)


def test_verdict():
    assert verdict(_ci(1.05, 1.10)) == "faster"
    assert verdict(_ci(0.90, 0.95)) == "slower"
    assert verdict(_ci(0.98, 1.04)) == "≈"  # straddles 1
    assert verdict(_ci(1.0, 1.04)) == "≈"  # touches 1
    assert verdict(_ci(1.005, 1.015), noise_pct=2.0) == "≈"  # inside the noise band
    assert verdict(_ci(1.005, 1.03), noise_pct=2.0) == "faster"  # pokes out of the band
    assert verdict(_ci(0.985, 0.995), noise_pct=2.0) == "≈"
    assert verdict(_ci(1.05, 1.10), significant=False) == "≈"


def test_regression():
    assert regression(_ci(0.80, 0.90), max_regression_pct=5.0)  # whole CI below 0.95
    assert not regression(_ci(0.80, 0.97), max_regression_pct=5.0)  # optimistic end within allowance
    assert not regression(_ci(0.90, 1.02), max_regression_pct=0.0)  # straddles 1
    # A bad point estimate alone never counts.
    assert not regression(RatioCI(ratio=0.5, low=0.4, high=1.01, n=3), max_regression_pct=5.0)


# --- formatting ------------------------------------------------------------------------------------


def test_format_delta_and_ci():
    ci = RatioCI(ratio=1.166, low=1.121, high=1.203, n=10)
    assert format_delta(ci) == "+16.6%"
    assert format_ci(ci) == "[+12.1%, +20.3%]"
    assert format_delta(RatioCI(ratio=0.968, low=0.95, high=0.99, n=10)) == "-3.2%"
    assert format_ci(RatioCI(ratio=0.968, low=0.95, high=0.99, n=10)) == "[-5.0%, -1.0%]"
    assert format_delta(RatioCI(ratio=0.9996, low=0.99, high=1.01, n=10)) == "+0.0%"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (18777.4, "18,777"),
        (153.8, "153.8"),
        (153.84, "153.8"),
        (999.9, "999.9"),
        (999.96, "1,000"),
        (1000, "1,000"),
        (1234567.8, "1,234,568"),
        (0.0, "0.0"),
        (float("nan"), "n/a"),
    ],
)
def test_format_tps(value: float, expected: str):
    assert format_tps(value) == expected


# --- summary_table / compare (DataFrame level) ----------------------------------------------------


def _trial(variant: str, round_: int, prefill: float, gen: float | None, **overrides) -> dict:
    row = {
        "machine": "host · cpu · cpu · openblas", "size": "E2B", "model_key": "e2b:layers=2:float32:none",
        "workload": "pp128 tg32 b1", "run_id": "run1", "cell": "e2b|pp128", "variant": variant, "round": round_,
        "warmup": False, "prefill_tps": prefill, "gen_tps": np.nan if gen is None else gen,
    }
    return {**row, **overrides}


def _grid() -> pd.DataFrame:
    """Baseline prefill 100..104, new exactly 1.25x per round; gen 10 vs 11 (ratio 1.1); plus a wild warmup."""
    rows = []
    for r in range(5):
        rows.append(_trial("baseline", r, 100.0 + r, 10.0))
        rows.append(_trial("compiled", r, (100.0 + r) * 1.25, 11.0))
    rows.append(_trial("baseline", 0, 1.0, 1.0, warmup=True))
    rows.append(_trial("compiled", 0, 1e6, 1e6, warmup=True))
    return pd.DataFrame(rows)


def test_summary_table_excludes_warmups_and_knows_every_metric():
    table = summary_table(_grid())
    row = table[(table.variant == "baseline") & (table.metric == "prefill")].iloc[0]
    assert (row.n, row["median"], row.q1, row.q3, row.iqr) == (5, 102.0, 101.0, 103.0, 2.0)
    assert len(table) == 4  # 2 variants x 2 metrics


def test_summary_table_drops_metric_without_values():
    rows = [_trial("baseline", r, 100.0, None) for r in range(3)]
    assert list(summary_table(pd.DataFrame(rows)).metric) == ["prefill"]


def test_compare_medians_and_delta_are_exact():
    table = compare(_grid(), "baseline", "compiled", ["prefill", "gen"])
    prefill, gen = table.iloc[0], table.iloc[1]
    assert (prefill.metric, gen.metric) == ("prefill", "gen")
    assert prefill.baseline_median == 102.0
    assert prefill.new_median == pytest.approx(127.5)
    assert prefill.n_pairs == 5
    assert (prefill.ratio, prefill.low, prefill.high) == pytest.approx((1.25, 1.25, 1.25))
    assert prefill.delta_pct == pytest.approx(25.0)
    assert gen.delta_pct == pytest.approx(10.0)
    # Perfectly separated 5 vs 5: the exact Mann-Whitney minimum, then Holm over the 2 rows.
    assert prefill.p_value == pytest.approx(2 / 252)
    assert prefill.p_holm == pytest.approx(min(1.0, 2 * min(table.p_value)), rel=1e-6)
    assert list(table.verdict) == ["faster", "faster"]


def test_compare_pairs_by_round_not_by_sorted_value():
    # Drift: baseline and new both climb; per-round ratios are exactly 0.9, though new's median beats baseline's.
    rows = []
    for r, level in enumerate([100.0, 150.0, 200.0, 250.0]):
        rows += [_trial("a", r, level, None), _trial("b", r, level * 0.9, None)]
    row = compare(pd.DataFrame(rows), "a", "b", "prefill").iloc[0]
    assert row.ratio == pytest.approx(0.9)
    assert row.delta_pct == pytest.approx(-10.0)


def test_compare_never_pools_machines():
    other = _grid().assign(machine="other · cuda · cuda · cublas", prefill_tps=lambda f: f.prefill_tps * 10)
    table = compare(pd.concat([_grid(), other]), "baseline", "compiled", "prefill")
    assert list(table.machine) == ["host · cpu · cpu · openblas", "other · cuda · cuda · cublas"]
    assert list(table.baseline_median) == [102.0, 1020.0]


def test_compare_holm_demotes_marginal_rows():
    # Each of 4 cells is separated 5 vs 5 (p = 0.0079), but Holm over 4 rows needs p < 0.0125 first, then
    # 0.0167, ...: all pass. Over 8 rows (two metrics with equal p) the first step needs p < 0.00625: none pass.
    rows = []
    for size in ["E2B", "E4B", "26B", "31B"]:
        for r in range(5):
            rows += [_trial("a", r, 100.0 + r, 10.0 + r, size=size), _trial("b", r, 120.0 + r, 20.0 + r, size=size)]
    frame = pd.DataFrame(rows)
    one_metric = compare(frame, "a", "b", "prefill")
    assert list(one_metric.verdict) == ["faster"] * 4
    both = compare(frame, "a", "b", ["prefill", "gen"])
    assert both.p_holm.min() == pytest.approx(8 * 2 / 252)
    assert set(both.verdict) == {"≈"}
    assert mann_whitney_min_p(5, 5) * 8 > 0.05


def test_compare_missing_side_and_a_a():
    rows = [_trial("a", r, 100.0 + r, None) for r in range(4)]
    missing = compare(pd.DataFrame(rows), "a", "b", "prefill").iloc[0]
    assert (missing.n_pairs, missing.verdict) == (0, "n/a")
    assert math.isnan(missing.delta_pct) and math.isnan(missing.p_holm)
    a_a = compare(pd.DataFrame(rows), "a", "a", "prefill").iloc[0]
    # Rounds 0/1 and 2/3 pair up: 101/100 and 103/102.
    assert a_a.n_pairs == 2
    assert a_a.ratio == pytest.approx(np.median([101 / 100, 103 / 102]))


def test_compare_rejects_unknown_metric():
    with pytest.raises(ValueError, match="prefill, gen"):
        compare(_grid(), "baseline", "compiled", "latency")


def test_mann_whitney_min_p():
    assert mann_whitney_min_p(5, 5) == pytest.approx(2 / 252)
    assert mann_whitney_min_p(1, 5) == 1.0
    assert mann_whitney_p(range(5), range(10, 15)) == pytest.approx(mann_whitney_min_p(5, 5))


# --- bootstrap_ratio_of_medians_ci (unpaired: a run against a stored baseline) ---------------------


def test_ratio_of_medians_point_estimate_and_reproducibility():
    baseline, new = [100.0, 102.0, 98.0, 101.0, 99.0], [80.0, 81.0, 79.0, 82.0, 78.0]
    a = bootstrap_ratio_of_medians_ci(baseline, new, seed=3)
    assert a == bootstrap_ratio_of_medians_ci(baseline, new, seed=3)
    assert a.ratio == pytest.approx(80.0 / 100.0)
    # Every resampled median lies within each side's range, so the CI is bounded by the extreme ratios.
    assert 78.0 / 102.0 <= a.low <= a.ratio <= a.high <= 82.0 / 98.0
    assert a.n == 5


def test_ratio_of_medians_unequal_sizes_nan_and_degenerate_cases():
    ci = bootstrap_ratio_of_medians_ci([10.0, np.nan, 10.0, 10.0], [12.0, 12.0])
    assert (ci.ratio, ci.low, ci.high, ci.n) == (1.2, 1.2, 1.2, 2)
    single = bootstrap_ratio_of_medians_ci([10.0], [11.0, 12.0, 13.0])
    assert (single.low, single.high, single.n) == (single.ratio, single.ratio, 1)
    with pytest.raises(ValueError):
        bootstrap_ratio_of_medians_ci([], [1.0])
    with pytest.raises(ValueError):
        bootstrap_ratio_of_medians_ci([0.0, 0.0], [1.0, 1.0])


def test_ratio_of_medians_ci_coverage():
    true_ratio, n, experiments = 0.9, 12, 300
    rng = np.random.default_rng(7)
    covered = 0
    for i in range(experiments):
        baseline = rng.lognormal(np.log(100.0), 0.05, size=n)
        new = rng.lognormal(np.log(100.0 * true_ratio), 0.05, size=n)
        ci = bootstrap_ratio_of_medians_ci(baseline, new, seed=i, resamples=2000)
        covered += ci.low <= true_ratio <= ci.high
    # The percentile bootstrap of a median is a little liberal at n = 12; it must still be near 95%.
    assert 0.85 <= covered / experiments <= 0.99


def test_compare_runs_matches_cells_across_hosts_and_lists_one_sided_cells():
    baseline = _grid()
    # Today's run on another host name: compiled 20% slower on prefill, gen unchanged; plus a cell the baseline lacks.
    today = _grid().assign(machine="ci-runner-7 · cpu · cpu · openblas", run_id="run2")
    today.loc[today["variant"] == "compiled", "prefill_tps"] *= 0.8
    extra = pd.DataFrame([_trial("sdpa", r, 50.0, 5.0, run_id="run2") for r in range(3)])
    table = compare_runs(baseline, pd.concat([today, extra], ignore_index=True))
    rows = table.set_index(["variant", "metric"])
    compiled = rows.loc[("compiled", "prefill")]
    assert compiled["ratio"] == pytest.approx(0.8)
    assert compiled["high"] < 1.0 and (compiled["n_baseline"], compiled["n_new"]) == (5, 5)
    assert rows.loc[("baseline", "gen"), "ratio"] == pytest.approx(1.0)
    sdpa = rows.loc[("sdpa", "prefill")]
    assert (sdpa["n_baseline"], sdpa["n_new"]) == (0, 3) and math.isnan(sdpa["ratio"])
    # Warmups never count: the baseline's wild warmup values are not in its medians.
    assert rows.loc[("compiled", "gen"), "baseline_median"] == 11.0


def test_paired_speedups_cancel_load_shared_by_a_round():
    # Round 3 ran on a busy machine: both variants at half speed; the speedup stays exactly 1.25.
    rows = []
    for r in range(5):
        load = 0.5 if r == 3 else 1.0
        rows += [_trial("baseline", r, 100.0 * load, 10.0 * load), _trial("compiled", r, 125.0 * load, None)]
    rows.append(_trial("compiled", 0, 1e6, 1e6, warmup=True))
    speedups = paired_speedups(pd.DataFrame(rows), "baseline", "compiled")
    assert list(speedups["round"]) == [0, 1, 2, 3, 4]
    assert set(speedups["variant"]) == {"compiled/baseline"}
    assert speedups["prefill_tps"].tolist() == pytest.approx([1.25] * 5)
    assert speedups["gen_tps"].isna().all()
    table = compare_runs(speedups, speedups.assign(prefill_tps=speedups["prefill_tps"] * 0.9))
    assert table.set_index("metric").loc["prefill", "ratio"] == pytest.approx(0.9)
    assert list(table["metric"]) == ["prefill"]
