"""The depth projection's 95% intervals (analysis.projection), simulated: E2B's step times exactly
linear in its layer counts, normal trial noise of 0.3%, each variant fitted on its depths' rounds
and projected to its full 35 layers, and tok/s and the Δ between two variants (the new one's
per-layer costs 0.9 of the baseline's) checked against the truth. Then the same with several runs
per depth, each run's worker process off by its own factor (SD 4%, shared by both variants of the
run, as a process's speed is): the intervals from the runs' spread. Seeded, so the rates are the
same on every machine; `python tests/test_projection_coverage.py` prints them (the figures in
analysis.projection)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import pytest

from fusebench.analysis.projection import (
    DepthMean,
    DepthSeries,
    FitScope,
    LayerFit,
    RunSpread,
    depth_means,
    fit_series,
    full_depth,
    layer_counts,
    projected_delta,
)

# Seconds per step of each term (fixed, per sliding layer, per full layer, extra per KV-shared
# layer), per metric, and the tokens a step makes.
COSTS = {"prefill": (0.010, 0.003, 0.005, 0.004), "gen": (0.020, 0.001, 0.002, 0.0005)}
TOKENS = {"prefill": 128, "gen": 1}
VARIANTS = {"baseline": 1.0, "new": 0.9}  # the per-layer costs' scale; the fixed part is the same
TRIAL_NOISE = 0.003
# a run's worker process: its speed off by this SD, for both variants of the run alike
PROCESS_NOISE = 0.04
SCOPE = FitScope("sim", "e2b", "float32", None, "pp128 tg4 b1", "E2B")
LAYERS = full_depth("e2b")
EXACT, ONE_DOF = (2, 4, 6, 8), (2, 4, 6, 8, 12)  # as many depths as terms; one more
ROUNDS = (6, 8, 12, 30)
# replications whose depth means are also computed by analysis.projection.depth_means, and compared
CHECKED = 20


@functools.cache  # layer_counts lays the layers out anew on every call
def step_s(depth: int, metric: str, scale: float) -> float:
    fixed, sliding, full, shared = COSTS[metric]
    counts = layer_counts("e2b", depth)
    return fixed + scale * (sliding * counts.sliding + full * counts.full + shared * counts.shared)


def _fits(
    rng: np.random.Generator,
    depths: tuple[int, ...],
    rounds: int,
    metric: str,
    runs: int = 1,
    checked: bool = False,
) -> dict[str, LayerFit]:
    """Both variants' fits on `rounds` timed rounds per run at each depth, as
    analysis.projection.measured_series sums them; with several runs each (depth, run) is one
    process whose speed factor both variants share. `checked`: the points also from
    analysis.projection.depth_means, which must give the same."""
    times = {variant: np.empty((len(depths), runs, rounds)) for variant in VARIANTS}
    for d, depth in enumerate(depths):
        for run in range(runs):
            process = 1 + (PROCESS_NOISE * rng.standard_normal() if runs > 1 else 0.0)
            for variant, scale in VARIANTS.items():
                noise = 1 + TRIAL_NOISE * rng.standard_normal(rounds)
                times[variant][d, run] = step_s(depth, metric, scale) * process * noise
    fits = {}
    for variant, seconds in times.items():
        points, spread = _depth_means(depths, seconds)
        if checked:
            rows = [
                (t, depth, f"run{run}")
                for d, depth in enumerate(depths)
                for run in range(runs)
                for t in seconds[d, run]
            ]
            _assert_same(
                (points, spread),
                depth_means(pd.DataFrame(rows, columns=["seconds", "depth", "run"])),
            )
        fits[variant] = fit_series(
            DepthSeries(SCOPE, variant, metric, TOKENS[metric], points, spread)
        )
    return fits


def _depth_means(
    depths: tuple[int, ...], seconds: np.ndarray
) -> tuple[tuple[DepthMean, ...], RunSpread | None]:
    """analysis.projection.depth_means on `seconds[depth, run, round]`, in numpy: its pandas
    groupby was three quarters of a replication's time. Checked against it (`_fits`)."""
    _, runs, rounds = seconds.shape
    means, sds = seconds.mean(axis=2), seconds.std(axis=2, ddof=1)
    if runs == 1:
        return tuple(
            DepthMean(depth, rounds, float(m[0]), float(sd[0]) / math.sqrt(rounds), rounds - 1)
            for depth, m, sd in zip(depths, means, sds, strict=True)
        ), None
    dof = len(depths) * (runs - 1)
    spread = RunSpread(
        math.sqrt(float(((means / means.mean(axis=1, keepdims=True) - 1) ** 2).sum()) / dof), dof
    )
    points = []
    for depth, m, sd in zip(depths, means, sds, strict=True):
        mean = float(m.mean())
        rounds_se = math.sqrt(float((sd**2 / rounds).sum())) / runs
        se = max(mean * spread.relative_sd / math.sqrt(runs), rounds_se)
        run_means = tuple((f"run{run}", float(x)) for run, x in enumerate(m))
        points.append(DepthMean(depth, rounds * runs, mean, se, dof, run_means))
    return tuple(points), spread


def _assert_same(
    ours: tuple[tuple[DepthMean, ...], RunSpread | None],
    theirs: tuple[tuple[DepthMean, ...], RunSpread | None],
) -> None:
    """The same points and spread, to rounding (pandas and numpy sum in other orders)."""

    def fields(found: tuple[tuple[DepthMean, ...], RunSpread | None]) -> tuple[list, list]:
        points, spread = found
        exact = [(p.depth, p.rounds, p.dof, [run for run, _ in p.run_means]) for p in points]
        exact.append(spread.dof if spread else None)
        close = [(p.mean_s, p.se_s, *(m for _, m in p.run_means)) for p in points]
        close.append((spread.relative_sd,) if spread else ())
        return exact, close

    (our_exact, our_close), (their_exact, their_close) = fields(ours), fields(theirs)
    assert our_exact == their_exact
    for a, b in zip(our_close, their_close, strict=True):
        assert a == pytest.approx(b, rel=1e-12)


def simulate(
    depths: tuple[int, ...], rounds: int, replications: int, seed: int = 0, runs: int = 1
) -> tuple[float, float]:
    """(coverage of the projected tok/s, coverage of the projected Δ): per replication, two metrics,
    each with two variants' tok/s and one Δ."""
    rng = np.random.default_rng(seed)
    rates_covered = deltas_covered = 0
    for replication in range(replications):
        for metric in COSTS:
            fits = _fits(rng, depths, rounds, metric, runs, checked=replication < CHECKED)
            for variant, fit in fits.items():
                rate = fit.rate_at(LAYERS)
                rates_covered += (
                    rate.low
                    <= TOKENS[metric] / step_s(LAYERS, metric, VARIANTS[variant])
                    <= rate.high
                )
            delta = projected_delta(
                SCOPE.label(LAYERS, projected=True), fits["baseline"], fits["new"], LAYERS
            )
            true_ratio = step_s(LAYERS, metric, VARIANTS["baseline"]) / step_s(
                LAYERS, metric, VARIANTS["new"]
            )
            deltas_covered += delta.low <= true_ratio <= delta.high
    return rates_covered / (replications * len(COSTS) * len(VARIANTS)), deltas_covered / (
        replications * len(COSTS)
    )


def test_an_exact_fit_covers_95_percent_at_the_fewest_rounds():
    # 6 rounds per depth, where a normal quantile covered 91% (tok/s) and 93% (Δ). 800 replications:
    # 3 200 tok/s intervals (coverage's SD 0.4%) and 1 600 Δs (0.5%).
    rates, deltas = simulate(EXACT, rounds=6, replications=800, seed=1)
    assert 0.94 <= rates <= 0.96
    assert 0.94 <= deltas <= 0.96


def test_a_fit_with_a_residual_dof_stays_conservative():
    # One residual dof: where χ²/dof > 1 (a third of fits, with no model error) the interval is
    # widened, so it covers more than 95%, never less.
    rates, deltas = simulate(ONE_DOF, rounds=6, replications=800, seed=1)
    assert rates >= 0.945
    assert deltas >= 0.945


def test_runs_of_other_processes_cover_95_percent():
    # Two runs per depth, the processes 4% apart (SD): the rounds alone would claim ±0.2% and cover
    # a fraction of that. 600 replications: 2 400 tok/s intervals (coverage's SD 0.45%) and 1 200 Δs
    # (0.6%).
    rates, deltas = simulate(EXACT, rounds=6, replications=600, seed=3, runs=2)
    assert 0.935 <= rates <= 0.97
    assert deltas >= 0.935


if __name__ == "__main__":
    print(
        f"95% coverage at {LAYERS} layers, {TRIAL_NOISE:.1%} trial noise, "
        "4 000 replications per row (16 000 tok/s intervals, 8 000 Δs)"
    )
    print(f"{'fitted on depths':<18}{'runs':>6}{'rounds per depth':>18}{'tok/s':>9}{'Δ':>9}")
    for depths in (EXACT, ONE_DOF):
        for rounds in ROUNDS:
            rates, deltas = simulate(depths, rounds, replications=4000, seed=2)
            print(f"{', '.join(map(str, depths)):<18}{1:>6}{rounds:>18}{rates:>9.2%}{deltas:>9.2%}")
    print(f"with a process-to-process SD of {PROCESS_NOISE:.0%}, shared by a run's variants:")
    for depths in (EXACT, ONE_DOF):
        for runs in (2, 3):
            rates, deltas = simulate(depths, 6, replications=4000, seed=2, runs=runs)
            print(f"{', '.join(map(str, depths)):<18}{runs:>6}{6:>18}{rates:>9.2%}{deltas:>9.2%}")
