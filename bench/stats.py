"""Statistics shared by the report and the regression check.

All throughput metrics (tokens/s) are bigger-is-better, so a ratio new/baseline above 1 means faster.
Everything here is pure numpy/scipy so it runs (and is tested) without mlx.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as _sps

__all__ = [
    "RatioCI",
    "Summary",
    "bootstrap_ratio_ci",
    "format_ci",
    "format_delta",
    "format_tps",
    "holm",
    "mann_whitney_p",
    "paired_ratios",
    "regression",
    "summarize",
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


def _signed_pct(pct: float) -> str:
    # Avoid "-0.0%" for changes that round to zero.
    rounded = round(pct, 1)
    return f"{0.0 if rounded == 0 else rounded:+.1f}%"


def format_delta(ci: RatioCI) -> str:
    """Median change as a signed percentage with one decimal, e.g. "+16.6%"."""
    return _signed_pct(ci.delta_pct)


def format_ci(ci: RatioCI) -> str:
    """CI bounds as signed percentages, e.g. "[+12.1%, +20.3%]"."""
    return f"[{_signed_pct(ci.low_pct)}, {_signed_pct(ci.high_pct)}]"


def format_tps(x: float) -> str:
    """Throughput for tables: "18,777" from 1,000 up (no decimals), "153.8" below."""
    if not math.isfinite(x):
        return "n/a"
    # Decide on the rounded value so 999.96 prints "1,000" rather than "1000.0".
    if abs(round(x, 1)) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.1f}"
