"""fusebench.analysis.speedups: the prediction bound a fusion's speedup is gated against, pinned and
simulated, and the stored speedups read back from the history's points."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusebench.analysis.speedups import expected, past_speedups, prediction_pct, sd_pct
from fusebench.core.calibration import PastSpeedups
from fusebench.core.history import HistoryPoint, HistoryRun, PointKey, Series


def stored(speedups: list[float]) -> PastSpeedups:
    return PastSpeedups(
        "m", "E2B", "pp128 tg4 b1", "compiled vs baseline", "prefill", tuple(speedups)
    )


def test_expected_and_bound_by_hand():
    past = stored([1.10, 1.12, 1.08, 1.11, 1.09, 1.10, 1.13, 1.07, 1.10, 1.10])
    logs = np.log(past.speedups)
    assert expected(past) == pytest.approx(math.exp(logs.mean()))
    assert sd_pct(past) == pytest.approx(100 * logs.std(ddof=1))
    # t(9) at 97.5% is 2.2622; sqrt(1 + 1/10) widens it for the uncertainty of the mean itself.
    assert prediction_pct(past) == pytest.approx(
        100 * (1 - math.exp(-2.2622 * logs.std(ddof=1) * math.sqrt(1.1))), rel=1e-4
    )
    # Four rows checked together: each at 1 - 2.5% / 4, t(9) = 3.1109.
    assert prediction_pct(past, rows=4) == pytest.approx(
        100 * (1 - math.exp(-3.1109 * logs.std(ddof=1) * math.sqrt(1.1))), rel=1e-4
    )
    assert math.isnan(prediction_pct(stored([1.1])))


@pytest.mark.parametrize("k", [10, 30])
def test_an_unchanged_run_falls_below_the_bound_in_2_5_percent_of_cases(k: int):
    # Normal run-to-run noise of the log speedup (3%); each case: K stored runs, then one more from
    # the same law.
    rng = np.random.default_rng(k)
    cases = 20_000
    logs = np.log(1.1) + 0.03 * rng.standard_normal((cases, k + 1))
    below = 0
    for row in logs:
        past = stored(list(np.exp(row[:k])))
        below += (math.exp(row[k]) / expected(past) - 1) * 100 < -prediction_pct(past)
    rate = below / cases
    assert abs(rate - 0.025) < 0.004, rate  # 20 000 cases: binomial SD 0.11%


def test_four_rows_together_fail_an_unchanged_run_at_most_2_5_percent_of_the_time():
    rng = np.random.default_rng(4)
    cases, k, rows = 10_000, 10, 4
    logs = 0.03 * rng.standard_normal((cases, rows, k + 1))
    failed = 0
    for case in logs:
        pasts = [stored(list(np.exp(row[:k]))) for row in case]
        failed += any(
            (math.exp(row[k]) / expected(past) - 1) * 100 < -prediction_pct(past, rows=rows)
            for row, past in zip(case, pasts, strict=True)
        )
    rate = failed / cases
    # Bonferroni: at most 2.5%, a little under it for independent rows
    assert 0.015 < rate < 0.028, rate


def test_past_speedups_are_the_comparison_points_one_per_run_in_the_runs_order():
    def run(run_id: str) -> HistoryRun:
        return HistoryRun(run_id, "cpu · m", "vm", "ci", "c", None, None, None, "r.jsonl", "t")

    def point(run_id: str, series: Series, metric: str, value: float) -> HistoryPoint:
        of = PointKey(series, "m", "E2B", "w", "compiled vs baseline", metric)
        return HistoryPoint(run_id, "cpu · m", of, value, value - 1.0, value + 1.0, 8)

    points = [
        point("b", Series.COMPARISON, "prefill", -1.0),
        point("a", Series.COMPARISON, "prefill", 10.0),
        point("a", Series.RATE, "prefill", 300.0),  # a rate, not a speedup
        point("other", Series.COMPARISON, "prefill", 50.0),  # not one of the runs asked for
        point("a", Series.COMPARISON, "gen", 5.0),
    ]
    found = past_speedups([run("a"), run("b")], points)
    assert [(p.metric, p.runs) for p in found] == [("prefill", 2), ("gen", 1)]
    assert found[0].speedups == pytest.approx((1.10, 0.99))
    assert found[0].key == ("m", "w", "compiled vs baseline", "prefill")
