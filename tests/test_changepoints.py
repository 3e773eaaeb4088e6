"""analysis.changepoints: a step that stays is found where it is, single-run spikes never are, and
a series without a change is rarely flagged (a seeded, small version of
benchmarks/changepoint_calibration.py)."""

from __future__ import annotations

import math

import numpy as np

from fusebench.analysis.changepoints import MIN_SEGMENT, find_steps, log_point


def test_a_step_is_found_at_its_commit_with_an_interval_holding_it():
    y = [math.log(1.0)] * 6 + [math.log(0.97)] * 6
    found = find_steps(y, [0.004] * 12)
    assert [s.index for s in found.steps] == [6]
    step = found.steps[0]
    assert step.low_pct < -3.0 < step.high_pct and round(step.shift_pct, 6) == -3.0


def test_single_run_spikes_are_set_aside_not_flagged():
    rng = np.random.default_rng(3)
    y = rng.normal(0.0, 0.004, 12)
    y[3] += math.log(0.90)
    y[9] += math.log(0.92)
    found = find_steps(y, [0.004] * 12)
    assert found.steps == [] and found.spikes == [3, 9]


def test_too_short_a_series_or_segment_is_never_a_step():
    assert find_steps([0.0] * (2 * MIN_SEGMENT - 1), [0.01] * 5).steps == []
    # two runs off the level at the end are shorter than a segment may be
    y = [0.0] * 10 + [math.log(0.95)] * 2
    assert find_steps(y, [0.004] * 12).steps == []


def test_no_change_is_flagged_in_at_most_a_few_percent_of_series():
    rng = np.random.default_rng(0)
    flagged = 0
    for _ in range(200):
        se = rng.uniform(0.008, 0.025, 12)
        flagged += bool(find_steps(rng.normal(0.0, se), se).steps)
    assert flagged <= 10  # the benchmark's 2,000-series figure is the claim; this is its floor


def test_an_unbounded_interval_weighs_nothing():
    assert log_point(100.0, 0.0, math.inf)[1] == math.inf
    value, se = log_point(100.0, 90.0, 110.0)
    assert value == math.log(100.0) and 0 < se < 0.06
