"""Statistics shared by the report and the regression check.

All throughput metrics (tokens/s) are bigger-is-better, so a ratio new/baseline above 1 means faster.
Everything here is pure numpy/scipy/pandas so it runs (and is tested) without mlx.

The sample-level functions (summarize, paired_ratios, ...) work on arrays; `summary_table` and `compare` apply them
to the trial records of a results file (`Results.frame("trial")`), so the report and the check compute every
number the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats as _sps

from ..core.records import METRIC_COLUMNS, METRICS

# Every bootstrap is seeded with this, so a report or a check rebuilt from the same results gives the same numbers.
SEED = 0

__all__ = [
    "CELL_KEYS",
    "COMPARE_COLUMNS",
    "METRICS",
    "METRIC_COLUMNS",
    "RUN_CELL_KEYS",
    "RUN_COMPARE_COLUMNS",
    "SUMMARY_COLUMNS",
    "RatioCI",
    "Summary",
    "bootstrap_ratio_ci",
    "bootstrap_ratio_of_medians_ci",
    "compare",
    "compare_runs",
    "holm",
    "mann_whitney_min_p",
    "mann_whitney_p",
    "paired_ratios",
    "paired_speedups",
    "regression",
    "summarize",
    "summary_table",
    "timed_trials",
    "verdict",
]


def _as_1d(values: ArrayLike) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).ravel()


def _drop_nan(x: np.ndarray) -> np.ndarray:
    return x[~np.isnan(x)]


@dataclass(frozen=True)
class Summary:
    """Robust summary of one sample; quartiles use numpy's default linear interpolation."""

    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    cv: float
    min: float
    max: float
    mean: float


def summarize(values: ArrayLike) -> Summary:
    """Summarize a sample (NaNs dropped). Raises ValueError if nothing is left.

    cv is the sample std (ddof=1) over the mean; 0.0 when n < 2, NaN when the mean is 0.
    """
    x = _drop_nan(_as_1d(values))
    if x.size == 0:
        raise ValueError("summarize() needs at least one non-NaN value")
    q1, median, q3 = (float(q) for q in np.percentile(x, [25, 50, 75]))
    mean = float(np.mean(x))
    if x.size < 2:
        cv = 0.0
    elif mean == 0.0:
        cv = math.nan
    else:
        cv = float(np.std(x, ddof=1) / mean)
    return Summary(
        n=int(x.size),
        median=median,
        q1=q1,
        q3=q3,
        iqr=q3 - q1,
        cv=cv,
        min=float(np.min(x)),
        max=float(np.max(x)),
        mean=mean,
    )


def paired_ratios(baseline: ArrayLike, new: ArrayLike) -> np.ndarray:
    """Per-round new/baseline ratios; pairs where either side is NaN are dropped.

    Pairing by round cancels drift (thermal, background load) that hits both variants alike.
    """
    b, n = _as_1d(baseline), _as_1d(new)
    if b.shape != n.shape:
        raise ValueError(f"paired_ratios() needs equal lengths, got {b.size} and {n.size}")
    keep = ~(np.isnan(b) | np.isnan(n))
    return n[keep] / b[keep]


@dataclass(frozen=True)
class RatioCI:
    """Median ratio new/baseline with a bootstrap confidence interval [low, high] over n ratios."""

    ratio: float
    low: float
    high: float
    n: int

    @property
    def delta_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    @property
    def low_pct(self) -> float:
        return (self.low - 1.0) * 100.0

    @property
    def high_pct(self) -> float:
        return (self.high - 1.0) * 100.0


def bootstrap_ratio_ci(
    ratios: ArrayLike, *, confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> RatioCI:
    """Median of the ratios with a percentile-bootstrap CI of that median.

    Seeded (numpy default_rng(seed)) so a report rebuilt from the same data shows the same CI.
    With n == 1 there is nothing to resample: the CI is the degenerate (ratio, ratio), which says
    nothing about uncertainty; callers should treat it as unproven. n == 0 raises ValueError.
    """
    r = _as_1d(ratios)
    if np.isnan(r).any():
        raise ValueError("ratios contain NaN; build them with paired_ratios()")
    if r.size == 0:
        raise ValueError("bootstrap_ratio_ci() needs at least one ratio")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    ratio = float(np.median(r))
    if r.size == 1:
        return RatioCI(ratio=ratio, low=ratio, high=ratio, n=1)
    rng = np.random.default_rng(seed)
    # One draw for all resamples keeps 10k x n=50 in the millisecond range.
    idx = rng.integers(0, r.size, size=(resamples, r.size))
    medians = np.median(r[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return RatioCI(ratio=ratio, low=float(low), high=float(high), n=int(r.size))


def mann_whitney_p(a: ArrayLike, b: ArrayLike) -> float:
    """Two-sided Mann-Whitney U p-value (NaNs dropped).

    Returns 1.0 when either side has fewer than 2 values or every value is identical, where the
    test is undefined and "no evidence of a difference" is the honest answer.
    """
    x, y = _drop_nan(_as_1d(a)), _drop_nan(_as_1d(b))
    if x.size < 2 or y.size < 2:
        return 1.0
    both = np.concatenate([x, y])
    if np.all(both == both[0]):
        return 1.0
    p = float(_sps.mannwhitneyu(x, y, alternative="two-sided", method="auto").pvalue)
    return 1.0 if math.isnan(p) else p


def mann_whitney_min_p(n1: int, n2: int) -> float:
    """The smallest two-sided p-value Mann-Whitney can give for samples of n1 and n2 values (no ties).

    Perfect separation is 1 of C(n1+n2, n1) equally likely orderings under the null, so no data can beat
    2 / C(n1+n2, n1): with 5 values a side that is 0.0079, which a Holm correction over 8 rows cannot pass.
    """
    if n1 < 2 or n2 < 2:
        return 1.0
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def holm(pvalues: ArrayLike) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1), in the input order."""
    p = _as_1d(pvalues)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    scaled = (m - np.arange(m)) * p[order]
    # Step-down: an adjusted p-value may never be smaller than one ranked before it.
    adjusted_sorted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return [float(v) for v in adjusted]


def verdict(ci: RatioCI, *, noise_pct: float = 0.0, significant: bool = True) -> str:
    """Classify a ratio CI as "faster", "slower" or "≈".

    Throughput metrics are bigger-is-better, so a CI wholly above 1 is "faster". "≈" when the CI
    contains 1.0, when the whole CI lies inside the noise band [1 - noise_pct/100, 1 + noise_pct/100]
    (the effect is too small to trust), or when `significant` is False (e.g. after Holm correction).
    """
    band_low, band_high = 1.0 - noise_pct / 100.0, 1.0 + noise_pct / 100.0
    if not significant or ci.low <= 1.0 <= ci.high or (band_low <= ci.low and ci.high <= band_high):
        return "≈"
    return "faster" if ci.low > 1.0 else "slower"


def regression(ci: RatioCI, *, max_regression_pct: float) -> bool:
    """True only when the whole CI lies below 1 - max_regression_pct/100.

    Requiring even the optimistic end (ci.high) to be a slowdown beyond the threshold keeps noisy
    runs from failing CI; a point estimate alone never counts.
    """
    return ci.high < 1.0 - max_regression_pct / 100.0


# --- tables of trial records -----------------------------------------------------------------------

# What identifies one measured cell on one machine; machines are never pooled.
CELL_KEYS = ("machine", "size", "model_key", "workload")
_PAIR_KEYS = ("run_id", "cell", "pair")

COMPARE_COLUMNS = (
    *CELL_KEYS, "metric", "baseline", "new", "baseline_median", "new_median", "n_baseline", "n_new", "n_pairs",
    "ratio", "low", "high", "delta_pct", "p_value", "p_holm", "verdict", "cv_baseline", "cv_new",
)
SUMMARY_COLUMNS = (*CELL_KEYS, "metric", "variant", "n", "median", "q1", "q3", "iqr", "cv", "min", "max", "mean")


def timed_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials that count: warmups are excluded from every statistic."""
    if trials.empty:
        return trials
    return trials[~trials["warmup"].astype(bool)]


def summary_table(trials: pd.DataFrame, metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """One row per machine x size x model x workload x metric x variant: n, median, quartiles, IQR, CV.

    Warmup trials are dropped; so are cells where a metric has no value (gen with gen_tokens == 1).
    """
    columns = [_metric_column(m) for m in metrics]
    timed = timed_trials(trials)
    rows = []
    if not timed.empty:
        _require_columns(timed, [*CELL_KEYS, "variant", *columns])
        for keys, group in timed.groupby([*CELL_KEYS, "variant"], sort=False, dropna=False):
            for metric, column in zip(metrics, columns, strict=True):
                values = group[column].to_numpy(dtype=np.float64)
                if np.isnan(values).all():
                    continue
                cell = dict(zip((*CELL_KEYS, "variant"), keys, strict=True))
                rows.append({**cell, "metric": metric, **vars(summarize(values))})
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def compare(
    trials: pd.DataFrame,
    baseline: str,
    new: str,
    metric: str | Sequence[str],
    *,
    seed: int = 0,
    confidence: float = 0.95,
    alpha: float = 0.05,
    noise_pct: float = 0.0,
) -> pd.DataFrame:
    """Compare two variants cell by cell: one row per machine x size x model x workload x metric.

    - Pairing: within each (run_id, cell, round) the ratio new/baseline; Δ% and its bootstrap CI (seeded) come
      from those paired ratios, so drift shared by both variants of a round cancels. Warmups are excluded.
    - baseline_median / new_median are the medians of each side's timed trials (the table's tok/s).
    - p_value: two-sided Mann-Whitney between the two sides' per-round values (asv's supplement to the ratio).
    - p_holm: Holm over every row of the returned table that has a p-value, so pass exactly one family, e.g. the
      rows of one report table.
    - verdict: faster / slower only when the CI clears 1 (and the noise band) AND p_holm < alpha; otherwise "≈";
      "n/a" without any pair. Requiring both keeps a grid of comparisons from producing false "faster" verdicts.
    - A/A (baseline == new): a variant cannot be paired with its own trial, so even rounds play baseline and odd
      rounds new, pairing round 2k with 2k+1; the spread then measures round-to-round noise.
    `metric` is "prefill", "gen", or a list of them.
    """
    metrics = [metric] if isinstance(metric, str) else list(metric)
    columns = [_metric_column(m) for m in metrics]
    timed = timed_trials(trials)
    rows = []
    if not timed.empty:
        _require_columns(timed, [*CELL_KEYS, "run_id", "cell", "round", "variant", *columns])
        for keys, group in timed.groupby(list(CELL_KEYS), sort=False, dropna=False):
            for metric_name, column in zip(metrics, columns, strict=True):
                base_side, new_side = _sides(group, baseline, new, column)
                if base_side.empty and new_side.empty:
                    continue
                row = _compare_sides(base_side, new_side, seed=seed, confidence=confidence)
                rows.append({**dict(zip(CELL_KEYS, keys, strict=True)), "metric": metric_name, **row})
    table = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    table["baseline"], table["new"] = baseline, new
    tested = table["p_value"].notna()
    table["p_holm"] = np.nan
    if tested.any():
        table.loc[tested, "p_holm"] = holm(table.loc[tested, "p_value"].to_numpy())
    table["verdict"] = [_row_verdict(row, alpha=alpha, noise_pct=noise_pct) for row in table.itertuples()]
    return table


def _metric_column(metric: str) -> str:
    if metric not in METRIC_COLUMNS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRIC_COLUMNS)}")
    return METRIC_COLUMNS[metric]


def _require_columns(frame: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"trial records lack column(s): {', '.join(missing)}")


def _sides(group: pd.DataFrame, baseline: str, new: str, column: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each side's values keyed by (run_id, cell, pair), one value per key (the median if a round repeats)."""

    def side(rows: pd.DataFrame, pair: pd.Series) -> pd.DataFrame:
        keyed = rows.assign(pair=pair, value=rows[column].astype(np.float64)).dropna(subset=["value"])
        return keyed.groupby(list(_PAIR_KEYS), sort=False)["value"].median().reset_index()

    if baseline == new:
        rows = group[group["variant"] == baseline]
        even = rows["round"] % 2 == 0
        return side(rows[even], rows["round"][even] // 2), side(rows[~even], rows["round"][~even] // 2)
    base_rows, new_rows = group[group["variant"] == baseline], group[group["variant"] == new]
    return side(base_rows, base_rows["round"]), side(new_rows, new_rows["round"])


def _compare_sides(base_side: pd.DataFrame, new_side: pd.DataFrame, *, seed: int, confidence: float) -> dict:
    base_values, new_values = base_side["value"].to_numpy(), new_side["value"].to_numpy()
    pairs = base_side.merge(new_side, on=list(_PAIR_KEYS), suffixes=("_baseline", "_new"))
    ratios = paired_ratios(pairs["value_baseline"].to_numpy(), pairs["value_new"].to_numpy())
    ci = bootstrap_ratio_ci(ratios, confidence=confidence, seed=seed) if ratios.size else None
    return {
        "baseline_median": _median(base_values),
        "new_median": _median(new_values),
        "n_baseline": int(base_values.size),
        "n_new": int(new_values.size),
        "n_pairs": int(ratios.size),
        "ratio": ci.ratio if ci else math.nan,
        "low": ci.low if ci else math.nan,
        "high": ci.high if ci else math.nan,
        "delta_pct": ci.delta_pct if ci else math.nan,
        "p_value": mann_whitney_p(base_values, new_values) if ci else math.nan,
        "cv_baseline": summarize(base_values).cv if base_values.size else math.nan,
        "cv_new": summarize(new_values).cv if new_values.size else math.nan,
    }


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if values.size else math.nan


def _row_verdict(row: object, *, alpha: float, noise_pct: float) -> str:
    if row.n_pairs == 0:
        return "n/a"
    ci = RatioCI(ratio=row.ratio, low=row.low, high=row.high, n=row.n_pairs)
    return verdict(ci, noise_pct=noise_pct, significant=bool(row.p_holm < alpha))


def bootstrap_ratio_of_medians_ci(
    baseline_values: ArrayLike,
    new_values: ArrayLike,
    seed: int = 0,
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
) -> RatioCI:
    """median(new) / median(baseline) with a percentile-bootstrap CI, for two samples that are NOT paired.

    Two separate runs (a stored baseline and today's run) share no rounds, so each side is resampled on its own;
    the CI then carries both sides' spread. NaNs are dropped. `n` is the smaller side. With a single value on
    either side the CI is degenerate (callers should treat it as unproven); an empty side or a zero baseline
    median raises ValueError.
    """
    b, n = _drop_nan(_as_1d(baseline_values)), _drop_nan(_as_1d(new_values))
    if b.size == 0 or n.size == 0:
        raise ValueError("bootstrap_ratio_of_medians_ci() needs at least one value on each side")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if np.median(b) == 0.0:
        raise ValueError("the baseline median is 0; a ratio to it is undefined")
    ratio = float(np.median(n) / np.median(b))
    if b.size == 1 or n.size == 1:
        return RatioCI(ratio=ratio, low=ratio, high=ratio, n=1)
    rng = np.random.default_rng(seed)
    base_medians = np.median(b[rng.integers(0, b.size, size=(resamples, b.size))], axis=1)
    new_medians = np.median(n[rng.integers(0, n.size, size=(resamples, n.size))], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(new_medians / base_medians, [alpha, 1.0 - alpha])
    return RatioCI(ratio=ratio, low=float(low), high=float(high), n=int(min(b.size, n.size)))


# --- one run against another (unpaired) ------------------------------------------------------------

# A cell of one run matched with the same cell of another. No machine column: a stored baseline comes from another
# host name (a CI runner's changes every time); whether the machines match is the caller's fingerprint check.
RUN_CELL_KEYS = ("model_key", "size", "workload", "variant")
RUN_COMPARE_COLUMNS = (
    *RUN_CELL_KEYS, "metric", "baseline_median", "new_median", "n_baseline", "n_new", "ratio", "low", "high",
    "delta_pct",
)


def compare_runs(
    baseline_trials: pd.DataFrame,
    new_trials: pd.DataFrame,
    metrics: Sequence[str] = METRICS,
    *,
    seed: int = 0,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Each model x size x workload x variant x metric of `new_trials` against the same cell of `baseline_trials`.

    The two sides come from different runs, so nothing pairs them: the ratio is median(new) / median(baseline) of
    the timed trials, with bootstrap_ratio_of_medians_ci's CI (seeded). A cell found on one side only gets a row
    with n = 0 on the other and NaN ratio, so callers can list it as missing or new. Rows: the baseline's cells in
    order, then cells only the new side has.
    """
    base, new = _values_by_run_cell(baseline_trials, metrics), _values_by_run_cell(new_trials, metrics)
    rows = []
    for key in dict.fromkeys([*base, *new]):
        b, n = base.get(key, np.array([])), new.get(key, np.array([]))
        ci = bootstrap_ratio_of_medians_ci(b, n, seed, confidence=confidence) if b.size and n.size else None
        rows.append({
            **dict(zip((*RUN_CELL_KEYS, "metric"), key, strict=True)),
            "baseline_median": _median(b),
            "new_median": _median(n),
            "n_baseline": int(b.size),
            "n_new": int(n.size),
            "ratio": ci.ratio if ci else math.nan,
            "low": ci.low if ci else math.nan,
            "high": ci.high if ci else math.nan,
            "delta_pct": ci.delta_pct if ci else math.nan,
        })
    return pd.DataFrame(rows, columns=list(RUN_COMPARE_COLUMNS))


def _values_by_run_cell(trials: pd.DataFrame, metrics: Sequence[str]) -> dict[tuple, np.ndarray]:
    columns = [_metric_column(m) for m in metrics]
    timed = timed_trials(trials)
    values: dict[tuple, np.ndarray] = {}
    if timed.empty:
        return values
    _require_columns(timed, [*RUN_CELL_KEYS, *columns])
    for keys, group in timed.groupby(list(RUN_CELL_KEYS), sort=False, dropna=False):
        for metric, column in zip(metrics, columns, strict=True):
            sample = _drop_nan(group[column].to_numpy(dtype=np.float64))
            if sample.size:
                values[(*keys, metric)] = sample
    return values


def paired_speedups(trials: pd.DataFrame, baseline: str, new: str) -> pd.DataFrame:
    """Per-round speedups new/baseline as trial-like rows (variant "NEW/BASELINE"), ready for compare_runs.

    Both variants of a round share whatever the machine was doing at the time, so the paired ratio cancels load that
    moves the absolute tok/s of a whole run; comparing speedups across runs then resolves a fused path that lost
    ground even when the runs' absolute speeds differ. Pairs where either side lacks a value stay NaN.
    """
    timed = timed_trials(trials)
    columns = list(METRIC_COLUMNS.values())
    keys = ["machine", *RUN_CELL_KEYS[:-1], "run_id", "cell", "round"]
    if timed.empty:
        return pd.DataFrame(columns=[*keys, "variant", "warmup", *columns])
    _require_columns(timed, [*keys, "variant", *columns])

    def side(variant: str) -> pd.DataFrame:
        rows = timed[timed["variant"] == variant]
        return rows.groupby(keys, sort=False, dropna=False)[columns].median().reset_index()

    pairs = side(baseline).merge(side(new), on=keys, suffixes=("_baseline", "_new"))
    speedups = pairs[keys].assign(variant=f"{new}/{baseline}", warmup=False)
    for column in columns:
        speedups[column] = pairs[f"{column}_new"].astype(np.float64) / pairs[f"{column}_baseline"].astype(np.float64)
    return speedups
