"""Pin bench.stats against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fusebench.analysis.stats import (
    ALL_VARIANTS,
    RatioCI,
    bootstrap_ratio_of_medians_ci,
    compare,
    compare_builds,
    compare_runs,
    paired_speedups,
    summarize,
    summary_table,
)
from fusebench.present.format import format_ci, format_delta, format_tps, verdict_text

# --- summarize ------------------------------------------------------------------------------------


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


def test_ratio_ci_percent_properties():
    ci = RatioCI(ratio=1.166, low=1.121, high=1.203, n=10)
    assert ci.delta_pct == pytest.approx(16.6)
    assert ci.low_pct == pytest.approx(12.1)
    assert ci.high_pct == pytest.approx(20.3)


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
        (12.34, "12.3"),
        (2.634, "2.63"),
        (9.996, "10.0"),
        (0.0, "0.00"),
        (float("nan"), "n/a"),
    ],
)
def test_format_tps(value: float, expected: str):
    assert format_tps(value) == expected


# --- summary_table / compare (DataFrame level) ----------------------------------------------------


def _trial(variant: str, round_: int, prefill: float, gen: float | None, **overrides) -> dict:
    row = {
        "machine": "host · cpu · cpu · openblas",
        "size": "E2B",
        "model_key": "e2b:layers=2:float32:none",
        "workload": "pp128 tg32 b1",
        "run_id": "run1",
        "cell": "e2b|pp128",
        "variant": variant,
        "round": round_,
        "warmup": False,
        "prefill_tps": prefill,
        "gen_tps": np.nan if gen is None else gen,
    }
    return {**row, **overrides}


def _grid() -> pd.DataFrame:
    """Baseline prefill 100..104, new exactly 1.25x per round; gen 10 vs 11 (ratio 1.1); plus a wild
    warmup."""
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


def test_compare_means_and_delta_are_exact_and_agree():
    table = compare(_grid(), "baseline", "compiled", ["prefill", "gen"])
    prefill, gen = table
    assert (prefill.metric, gen.metric) == ("prefill", "gen")
    assert prefill.baseline_gmean == pytest.approx(
        float(np.exp(np.mean(np.log([100, 101, 102, 103, 104]))))
    )
    assert prefill.new_gmean / prefill.baseline_gmean - 1 == pytest.approx(
        prefill.delta_pct / 100, abs=1e-12
    )
    assert prefill.n_pairs == 5 and prefill.excluded == 0
    # Exactly 1.25x every round: zero spread, so the interval is the point and the verdict is
    # certain.
    assert (
        prefill.ratio,
        prefill.low,
        prefill.high,
        prefill.adj_low,
        prefill.adj_high,
    ) == pytest.approx((1.25,) * 5)
    assert prefill.delta_pct == pytest.approx(25.0)
    assert gen.delta_pct == pytest.approx(10.0)
    assert [row.verdict.word for row in table] == ["faster", "faster"]


def test_compare_pairs_by_round_not_by_sorted_value():
    # Drift: baseline and new both climb; per-round ratios are exactly 0.9, though new's median
    # beats baseline's.
    rows = []
    for r, level in enumerate([100.0, 150.0, 200.0, 250.0]):
        rows += [_trial("a", r, level, None), _trial("b", r, level * 0.9, None)]
    (row,) = compare(pd.DataFrame(rows), "a", "b", "prefill")
    assert row.ratio == pytest.approx(0.9)
    assert row.delta_pct == pytest.approx(-10.0)
    assert row.verdict.word == "slower"


def test_compare_builds_pools_the_variants_round_by_round():
    # Round r: variant a's current build is 0.9x the reference, variant b's 0.8x (prefill) and 1.0x
    # (gen); round 3 lacks b's current trial, so the pooled row leaves it out while a's own row
    # keeps it.
    rows = []
    for r in range(4):
        level = 100.0 + 10 * r
        rows += [
            _trial("a", r, level, level, build="reference"),
            _trial("a", r, level * 0.9, level * 0.9, build="current"),
            _trial("b", r, level, level, build="reference"),
        ]
        if r < 3:
            rows.append(_trial("b", r, level * 0.8, level, build="current"))
    rows = compare_builds(pd.DataFrame(rows))
    table = {(row.variant, row.metric): row for row in rows}
    pooled = table[ALL_VARIANTS, "prefill"]
    # the geometric mean of the variants' ratios
    assert pooled.ratio == pytest.approx(math.sqrt(0.9 * 0.8))
    assert pooled.n_pairs == 3 and table["a", "prefill"].n_pairs == 4
    assert table[ALL_VARIANTS, "gen"].ratio == pytest.approx(math.sqrt(0.9))
    assert list(dict.fromkeys(row.variant for row in rows)) == ["a", "b", ALL_VARIANTS]


def test_compare_never_pools_machines():
    other = _grid().assign(
        machine="other · cuda · cuda · cublas", prefill_tps=lambda f: f.prefill_tps * 10
    )
    here, there = compare(pd.concat([_grid(), other]), "baseline", "compiled", "prefill")
    assert [here.machine, there.machine] == [
        "host · cpu · cpu · openblas",
        "other · cuda · cuda · cublas",
    ]
    assert there.baseline_gmean == pytest.approx(10 * here.baseline_gmean)


def test_compare_holm_widens_every_row_of_a_table():
    # Four cells, each with the same noisy +5%: alone a row's interval is the plain t-interval; in
    # the table of 8 rows each is widened to its Holm level, and the verdict follows the adjusted
    # interval.
    rng = np.random.default_rng(3)
    rows = []
    for size in ["E2B", "E4B", "26B", "31B"]:
        for r in range(5):
            base, noise = 100.0 + r, rng.lognormal(0, 0.02, size=2)
            rows += [
                _trial("a", r, base, base / 10, size=size),
                _trial("b", r, base * 1.05 * noise[0], base / 10 * 1.05 * noise[1], size=size),
            ]
    table = compare(pd.DataFrame(rows), "a", "b", ["prefill", "gen"])
    assert all(row.adj_high - row.adj_low >= row.high - row.low - 1e-12 for row in table)
    for row in table:
        decided = row.adj_low > 1 or row.adj_high < 1
        assert row.verdict.decided == decided == (row.p_holm < 0.05)


def test_compare_verdict_words():
    rng = np.random.default_rng(7)

    def verdict(effect: float, noise: float, rounds: int) -> str:
        rows = []
        for r in range(rounds):
            jitter = rng.lognormal(0, noise, size=2)
            rows += [
                _trial("a", r, 100.0 * jitter[0], None),
                _trial("b", r, 100.0 * effect * jitter[1], None),
            ]
        (row,) = compare(pd.DataFrame(rows), "a", "b", "prefill")
        assert row.verdict.half_width_pct == pytest.approx(row.half_width_pct)
        return verdict_text(row.verdict)

    assert verdict(1.0, 0.002, 12) == "no change"
    assert verdict(1.0, 0.05, 6).startswith("inconclusive (±")
    assert verdict(1.03, 0.01, 2) == "needs ≥ 3 rounds"


def test_compare_missing_side_and_a_a():
    rows = [_trial("a", r, 100.0 + r, None) for r in range(4)]
    (missing,) = compare(pd.DataFrame(rows), "a", "b", "prefill")
    assert (missing.n_pairs, missing.verdict, missing.stalls, missing.interval) == (
        0,
        None,
        None,
        None,
    )
    assert math.isnan(missing.delta_pct) and math.isnan(missing.p_holm)
    (a_a,) = compare(pd.DataFrame(rows), "a", "a", "prefill")
    # Rounds 0/1 and 2/3 pair up: 101/100 and 103/102.
    assert a_a.n_pairs == 2
    assert a_a.ratio == pytest.approx(float(np.exp(np.mean(np.log([101 / 100, 103 / 102])))))


def test_compare_rejects_unknown_metric():
    with pytest.raises(ValueError, match="prefill, gen"):
        compare(_grid(), "baseline", "compiled", "latency")


def test_ratio_of_medians_point_estimate_and_reproducibility():
    baseline, new = [100.0, 102.0, 98.0, 101.0, 99.0], [80.0, 81.0, 79.0, 82.0, 78.0]
    a = bootstrap_ratio_of_medians_ci(baseline, new, seed=3)
    assert a == bootstrap_ratio_of_medians_ci(baseline, new, seed=3)
    assert a.ratio == pytest.approx(80.0 / 100.0)
    # Every resampled median lies within each side's range, so the CI is bounded by the extreme
    # ratios.
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
    # Today's run on another host name: compiled 20% slower on prefill, gen unchanged; plus a cell
    # the baseline lacks.
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
        rows += [
            _trial("baseline", r, 100.0 * load, 10.0 * load),
            _trial("compiled", r, 125.0 * load, None),
        ]
    rows.append(_trial("compiled", 0, 1e6, 1e6, warmup=True))
    speedups = paired_speedups(pd.DataFrame(rows), "baseline", "compiled")
    assert list(speedups["round"]) == [0, 1, 2, 3, 4]
    assert set(speedups["variant"]) == {"compiled/baseline"}
    assert speedups["prefill_tps"].tolist() == pytest.approx([1.25] * 5)
    assert speedups["gen_tps"].isna().all()
    table = compare_runs(speedups, speedups.assign(prefill_tps=speedups["prefill_tps"] * 0.9))
    assert table.set_index("metric").loc["prefill", "ratio"] == pytest.approx(0.9)
    assert list(table["metric"]) == ["prefill"]
