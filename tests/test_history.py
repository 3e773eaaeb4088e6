"""bench.analysis.history: the prediction bound a fusion's speedup is gated against, pinned and
simulated."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bench.analysis.history import SpeedupHistory, histories, run_speedups


def history(speedups: list[float]) -> SpeedupHistory:
    return SpeedupHistory(
        "m", "E2B", "pp128 tg4 b1", "compiled/baseline", "prefill", tuple(speedups)
    )


def test_expected_and_bound_by_hand():
    past = history([1.10, 1.12, 1.08, 1.11, 1.09, 1.10, 1.13, 1.07, 1.10, 1.10])
    logs = np.log(past.speedups)
    assert past.expected == pytest.approx(math.exp(logs.mean()))
    assert past.sd_pct == pytest.approx(100 * logs.std(ddof=1))
    # t(9) at 97.5% is 2.2622; sqrt(1 + 1/10) widens it for the uncertainty of the mean itself.
    assert past.prediction_pct() == pytest.approx(
        100 * (1 - math.exp(-2.2622 * logs.std(ddof=1) * math.sqrt(1.1))), rel=1e-4
    )
    # Four rows checked together: each at 1 - 2.5% / 4, t(9) = 3.1109.
    assert past.prediction_pct(rows=4) == pytest.approx(
        100 * (1 - math.exp(-3.1109 * logs.std(ddof=1) * math.sqrt(1.1))), rel=1e-4
    )
    assert math.isnan(history([1.1]).prediction_pct())


@pytest.mark.parametrize("k", [10, 30])
def test_an_unchanged_run_falls_below_the_bound_in_2_5_percent_of_cases(k: int):
    # Normal run-to-run noise of the log speedup (3%); each case: K stored runs, then one more from
    # the same law.
    rng = np.random.default_rng(k)
    cases = 20_000
    logs = np.log(1.1) + 0.03 * rng.standard_normal((cases, k + 1))
    below = 0
    for row in logs:
        past = history(list(np.exp(row[:k])))
        below += (math.exp(row[k]) / past.expected - 1) * 100 < -past.prediction_pct()
    rate = below / cases
    assert abs(rate - 0.025) < 0.004, rate  # 20 000 cases: binomial SD 0.11%


def test_four_rows_together_fail_an_unchanged_run_at_most_2_5_percent_of_the_time():
    rng = np.random.default_rng(4)
    cases, k, rows = 10_000, 10, 4
    logs = 0.03 * rng.standard_normal((cases, rows, k + 1))
    failed = 0
    for case in logs:
        pasts = [history(list(np.exp(row[:k]))) for row in case]
        failed += any(
            (math.exp(row[k]) / past.expected - 1) * 100 < -past.prediction_pct(rows=rows)
            for row, past in zip(case, pasts, strict=True)
        )
    rate = failed / cases
    # Bonferroni: at most 2.5%, a little under it for independent rows
    assert 0.015 < rate < 0.028, rate


def test_run_speedups_pair_within_rounds_and_histories_collect_one_per_run():
    def run(run_id: str, factor: float) -> pd.DataFrame:
        rows = []
        for r, load in enumerate([1.0, 0.8, 1.2, 0.9]):  # load moves both variants of a round alike
            for variant, speed in (("baseline", 100.0), ("compiled", 110.0 * factor)):
                rows.append(
                    {
                        "machine": "x",
                        "size": "E2B",
                        "model_key": "m",
                        "workload": "w",
                        "run_id": run_id,
                        "cell": "m|w",
                        "variant": variant,
                        "round": r,
                        "warmup": False,
                        "prefill_tps": speed * load,
                        "gen_tps": speed * load / 50,
                    }
                )
        return pd.DataFrame(rows)

    one = run_speedups(run("a", 1.0), [("baseline", "compiled")])
    assert list(one.comparison) == ["compiled/baseline"] * 2 and list(one.metric) == [
        "prefill",
        "gen",
    ]
    assert list(one.speedup) == pytest.approx([1.1, 1.1])
    collected = histories([run("a", 1.0), run("b", 0.9)], [("baseline", "compiled")])
    assert [(h.metric, h.runs) for h in collected] == [("prefill", 2), ("gen", 2)]
    assert collected[0].speedups == pytest.approx((1.1, 0.99))
