"""Depth projection: from a model measured at several truncated depths, its tok/s and each Δ at N
layers, by a weighted least-squares fit of a step's time to its layer counts. The model, the fit,
its intervals and their simulated coverage: docs/projection.md.

Why one long module: the layer counts of a depth, the fit, its intervals and the refusals of depths
that cannot separate the terms are one method, read in that order (docs/projection.md).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from fusebench.models.config import (
    LayerGeometry,
    ModelConfig,
    Overrides,
    layer_geometry,
    preset_config,
    preset_names,
    truncate,
)

from ..core.errors import UserError
from ..core.fileformat import METRIC_COLUMNS, METRICS, Column
from ..core.text import join_words
from .inference import RatioInterval
from .study import Study, ordered_workloads, size_rank

CONFIDENCE = 0.95
# The terms of the model, in the order of the design matrix's columns.
TERMS = ("fixed", "sliding", "full", "shared")
TERM_NAMES = {
    "fixed": "the fixed part (embeddings, LM head, sampling)",
    "sliding": "the sliding-attention layers",
    "full": "the full-attention layers",
    "shared": "the KV-shared layers",
}
# A depth whose rounds all read the same time (a coarse timer, a synthetic file) would get an
# infinite weight; its SE is floored at this share of its mean.
MIN_RELATIVE_SE = 1e-9
_DEPTH_SUFFIX = re.compile(r"\s*\(\d+/\d+ layers\)$")


class ProjectionError(UserError):
    """Results that cannot be projected: one line naming the size, the depths and what is
    missing."""


# --- layer layout ---------------------------------------------------------------------------------


@functools.cache
def _full_config(preset: str) -> ModelConfig:
    return preset_config(preset, Overrides())


def full_depth(preset: str) -> int:
    return int(_full_config(preset)["num_hidden_layers"])


@dataclass(frozen=True)
class LayerCounts:
    """The layers of each kind a depth keeps: S, F (own-KV and KV-shared alike) and X (the KV-shared
    ones)."""

    sliding: int
    full: int
    shared: int

    def row(self, terms: Sequence[str]) -> np.ndarray:
        """This depth's row of the design matrix."""
        values = {"fixed": 1, "sliding": self.sliding, "full": self.full, "shared": self.shared}
        return np.array([values[term] for term in terms], dtype=np.float64)


def layer_counts(preset: str, layers: int) -> LayerCounts:
    """What `layers` layers of the preset hold, as fusebench.models.config.truncate lays them out
    for the runner."""
    return _counts(layer_geometry(truncate(_full_config(preset), layers)))


def _counts(layers: Sequence[LayerGeometry]) -> LayerCounts:
    sliding = sum(layer.window is not None for layer in layers)
    return LayerCounts(sliding, len(layers) - sliding, sum(not layer.owns_kv for layer in layers))


def model_terms(preset: str) -> tuple[str, ...]:
    """The fitted terms: a kind of layer's only where the full model has layers of that kind (a
    Llama has no sliding layers; only Gemma 4 shares KV)."""
    whole = _counts(layer_geometry(_full_config(preset)))
    held = {"fixed": 1, "sliding": whole.sliding, "full": whole.full, "shared": whole.shared}
    return tuple(term for term in TERMS if held[term])


def design(preset: str, depths: Sequence[int]) -> np.ndarray:
    terms = model_terms(preset)
    return np.array([layer_counts(preset, d).row(terms) for d in depths])


# --- what a fit is made of ------------------------------------------------------------------------


@dataclass(frozen=True)
class FitScope:
    """What the fits of one model's depths share: machine, preset, dtype, quantization and
    workload."""

    machine: str
    preset: str
    dtype: str
    quantize: str | None
    workload: str
    # the size label without its depth, e.g. "E2B" (with its dtype where two dtypes of it are
    # present)
    size: str

    @property
    def full_layers(self) -> int:
        return full_depth(self.preset)

    def label(self, layers: int, projected: bool) -> str:
        """ "E2B (35/35 layers, projected)" or, measured, "E2B (8/35 layers)"."""
        return (
            f"{self.size} ({layers}/{self.full_layers} layers{', projected' if projected else ''})"
        )


@dataclass(frozen=True)
class DepthMean:
    """One depth's timed rounds: their mean time, its standard error, and the dof that SE is
    estimated with.

    From one run: the rounds' mean, SE = sd/√n, dof n − 1. From several runs (each depth of a run is
    its own worker process): the mean of the runs' means, and an SE from how far runs of the same
    depth differ (`between_runs`)."""

    depth: int
    rounds: int
    mean_s: float
    se_s: float
    dof: float
    # (run id, that run's mean time), with several runs
    run_means: tuple[tuple[str, float], ...] = ()

    @property
    def runs(self) -> int:
        return max(1, len(self.run_means))


@dataclass(frozen=True)
class DepthSeries:
    """One variant's metric at each measured depth of a scope."""

    scope: FitScope
    variant: str
    metric: str
    tokens: int  # tokens per timed unit: batch·prompt_tokens for prefill, batch for a decode step
    points: tuple[DepthMean, ...]
    # From several runs: the relative SD of one run's mean about its depth's, pooled over the
    # depths, and its dof, which every point's SE shares. None: one run per depth, SEs from each
    # run's rounds alone.
    between_runs: RunSpread | None = None

    @property
    def depths(self) -> tuple[int, ...]:
        return tuple(p.depth for p in self.points)

    @property
    def noise_note(self) -> str:
        """Where the depths' SEs come from: "1 run per depth", or "runs ±3.1% (2 per depth, 5
        dof)"."""
        if self.between_runs is None:
            return "1 run per depth"
        runs = sorted({p.runs for p in self.points})
        counts = str(runs[0]) if len(runs) == 1 else f"{runs[0]}–{runs[-1]}"
        return (
            f"runs ±{100 * self.between_runs.relative_sd:.1f}% "
            f"({counts} per depth, {self.between_runs.dof} dof)"
        )


@dataclass(frozen=True)
class RunSpread:
    """How far one run's mean time at a depth lies from the mean of that depth's runs, as a relative
    SD, pooled over every depth measured in two or more runs; dof = Σ (runs − 1)."""

    relative_sd: float
    dof: int


@dataclass(frozen=True)
class TimeEstimate:
    """A projected time with its sd and the (effective, so fractional) degrees of freedom of its t
    quantile."""

    seconds: float
    sd: float
    dof: float

    def interval(self) -> tuple[float, float]:
        half = quantile(self.dof) * self.sd
        return self.seconds - half, self.seconds + half


@dataclass(frozen=True)
class RateInterval:
    """tok/s with its 95% interval (high is inf when the time interval reaches 0)."""

    tps: float
    low: float
    high: float

    @classmethod
    def of(cls, time: TimeEstimate, tokens: int) -> RateInterval:
        if time.seconds <= 0:  # a fit that extrapolates to no time at all has no rate to show
            return cls(math.nan, math.nan, math.nan)
        fast, slow = time.interval()
        return cls(tokens / time.seconds, tokens / slow, tokens / fast if fast > 0 else math.inf)


@dataclass(frozen=True)
class LayerFit:
    """t = Σ coef·counts over `terms`, fitted on `points`, some of a series' depths.
    coef = gain · the points' means: the gain says how much each depth's mean weighs in each
    coefficient (a row per term, a column per point), which is what an estimate's variance and dof
    are made of."""

    series: DepthSeries
    points: tuple[DepthMean, ...]
    terms: tuple[str, ...]
    coef: tuple[float, ...]
    gain: tuple[tuple[float, ...], ...]
    dof: int
    reduced_chi2: float | None  # None with as many depths as terms

    @property
    def depths(self) -> tuple[int, ...]:
        return tuple(p.depth for p in self.points)

    @property
    def inflated(self) -> bool:
        return self.reduced_chi2 is not None and self.reduced_chi2 > 1

    def cost(self, term: str) -> tuple[float, float]:
        """A term's fitted seconds and the half-width of its 95% interval."""
        estimate = self.estimate(np.eye(len(self.terms))[self.terms.index(term)])
        return estimate.seconds, quantile(estimate.dof) * estimate.sd

    def time_at(self, layers: int) -> TimeEstimate:
        return self.estimate(layer_counts(self.series.scope.preset, layers).row(self.terms))

    def estimate(self, x: np.ndarray) -> TimeEstimate:
        """x·coef. It is Σ a_i·mean_i over the fitted depths (a = x·gain), so its variance is Σ
        a_i²·SE_i² (× χ²/dof where inflated) and its dof the Welch–Satterthwaite one of the SEs'
        n_i − 1, no more than the residual dof where the residuals set the scale."""
        parts = (x @ np.array(self.gain)) ** 2 * np.array(
            [weighing_se(p) for p in self.points]
        ) ** 2
        # Between runs, every SE is its mean times the one pooled spread: the sum has that
        # estimate's dof.
        spread = self.series.between_runs
        dof = float(spread.dof) if spread else welch_dof(parts, [p.dof for p in self.points])
        if self.inflated:
            parts, dof = parts * self.reduced_chi2, min(dof, self.dof)
        return TimeEstimate(float(x @ np.array(self.coef)), math.sqrt(float(parts.sum())), dof)

    def rate_at(self, layers: int) -> RateInterval:
        return RateInterval.of(self.time_at(layers), self.series.tokens)

    @property
    def residual_note(self) -> str:
        """How well the depths fit, and what their noise is made of: "exact (4 depths, 4 terms); 1
        run per depth", "χ²/dof 0.58 (1 dof); runs ±3.1% (2 per depth, 5 dof)", or, widened, "χ²/dof
        3.20 (1 dof): intervals ×1.79, t(1); 1 run per depth"."""
        if self.reduced_chi2 is None:
            fit = f"exact ({len(self.depths)} depths, {len(self.terms)} terms)"
        else:
            chi2 = f"χ²/dof {self.reduced_chi2:.2f} ({self.dof} dof)"
            fit = (
                f"{chi2}: intervals ×{math.sqrt(self.reduced_chi2):.2f}, t({self.dof})"
                if self.inflated
                else chi2
            )
        return f"{fit}; {self.series.noise_note}"


def quantile(dof: float) -> float:
    """The two-sided 95% quantile of Student t with `dof` degrees of freedom (inf: the normal
    one)."""
    return float(stdtrit(dof, (1 + CONFIDENCE) / 2))


def welch_dof(variances: Sequence[float], dofs: Sequence[float]) -> float:
    """Welch–Satterthwaite: the dof of a sum of independent variance estimates, (Σ v)² / Σ v²/dof;
    inf when no estimated variance enters the sum."""
    spread = sum(v * v / dof for v, dof in zip(variances, dofs, strict=True))
    return float(sum(variances)) ** 2 / spread if spread > 0 else math.inf


def weighing_se(point: DepthMean) -> float:
    """A depth's SE as the fit weighs it: floored, so that a depth whose rounds all read the same
    time does not get an infinite weight."""
    return max(point.se_s, MIN_RELATIVE_SE * point.mean_s)


def fit_series(series: DepthSeries, depths: Collection[int] | None = None) -> LayerFit:
    """The weighted least-squares fit of a series on `depths` (default: all it has); the caller has
    checked that they separate the terms (`check_separable`)."""
    points = [p for p in series.points if depths is None or p.depth in depths]
    terms = model_terms(series.scope.preset)
    x = design(series.scope.preset, [p.depth for p in points])
    y = np.array([p.mean_s for p in points])
    root_w = 1 / np.array([weighing_se(p) for p in points])
    xw, yw = x * root_w[:, None], y * root_w
    gain = np.linalg.inv(xw.T @ xw) @ xw.T * root_w
    coef = gain @ y
    dof = len(points) - len(terms)
    residuals = yw - xw @ coef
    reduced = float(residuals @ residuals) / dof if dof else None
    return LayerFit(
        series,
        tuple(points),
        terms,
        tuple(map(float, coef)),
        tuple(tuple(map(float, row)) for row in gain),
        dof,
        reduced,
    )


# --- separability ---------------------------------------------------------------------------------


def check_separable(preset: str, what: str, depths: Sequence[int]) -> None:
    """Refuse depths that cannot tell each term of the model apart, naming the terms and depths that
    would."""
    terms = model_terms(preset)
    if len(depths) < 2:
        example = sorted([*depths, *separating_depths(preset, depths)])
        raise ProjectionError(
            f"{what} has only depth {join_words(depths)}: a projection needs at least "
            f"{len(terms)} depths, e.g. `layers: [{', '.join(map(str, example))}]`"
        )
    x = design(preset, depths)
    rank = np.linalg.matrix_rank(x)
    if rank == len(terms):
        return
    # The rows of V past the rank span the coefficient directions these depths cannot see (unit
    # vectors, so a term outside them has a component of rounding size).
    null = np.linalg.svd(x)[2][rank:]
    confounded = [
        TERM_NAMES[t]
        for t, column in zip(terms, null.T, strict=True)
        if np.abs(column).max() > 1e-9
    ]
    added = separating_depths(preset, depths)
    joined = join_words(confounded, "from" if len(confounded) == 2 else "and")
    why = (
        f"{len(depths)} depths for {len(terms)} terms"
        if len(depths) < len(terms)
        else "their layer counts vary together at these depths"
    )
    raise ProjectionError(
        f"{what} at depths {join_words(depths)} cannot separate {joined} ({why}); add "
        f"depth{'s' if len(added) > 1 else ''} {join_words(added)}, where they differ"
    )


def separating_depths(preset: str, depths: Sequence[int]) -> list[int]:
    """The fewest extra depths, smallest first, that make `depths` separate every term. Even depths
    come first, as the experiments step by two."""
    terms, chosen = model_terms(preset), list(depths)
    rank = np.linalg.matrix_rank(design(preset, chosen)) if chosen else 0
    added = []
    for depth in sorted(range(1, full_depth(preset) + 1), key=lambda d: (d % 2, d)):
        if rank == len(terms):
            break
        if depth in chosen:
            continue
        more = np.linalg.matrix_rank(design(preset, [*chosen, depth]))
        if more > rank:
            chosen, rank = [*chosen, depth], more
            added.append(depth)
    return added


# --- from a study ---------------------------------------------------------------------------------


def depth_trials(study: Study) -> pd.DataFrame:
    """The timed trials with their preset and depth, or a ProjectionError for results that have
    none."""
    timed = study.timed
    if timed.empty:
        raise ProjectionError("no timed trials to project (the results hold op records only)")
    model = (
        timed[Column.MODEL]
        if Column.MODEL in timed
        else pd.Series(None, index=timed.index, dtype=object)
    )
    unknown = timed[~model.isin(preset_names())]
    if not unknown.empty:
        raise ProjectionError(
            f"{unknown[Column.SIZE].iloc[0]} is a checkpoint (path) "
            "model, or its trials name no preset: a projection "
            "needs a preset's layer layout (`models: [{preset: e2b, layers: [2, 4, 6, 8]}]`)"
        )
    layers = (
        timed[Column.LAYERS] if Column.LAYERS in timed else pd.Series(math.nan, index=timed.index)
    )
    # A preset run whole records no layer count.
    depth = [full_depth(p) if pd.isna(n) else int(n) for p, n in zip(model, layers, strict=True)]
    # "" for no quantization: pandas groups on a string, not on None.
    return timed.assign(preset=model, depth=depth, quantize=timed[Column.QUANTIZE].fillna(""))


def has_several_depths(study: Study) -> bool:
    """Whether some preset was measured at more than one depth: what a projection starts from."""
    timed = study.timed
    if timed.empty or Column.MODEL not in timed or Column.LAYERS not in timed:
        return False
    presets = timed[timed[Column.MODEL].isin(preset_names())]
    # A preset run whole records no layer count: NaN counts as one more depth.
    cell = [Column.MODEL, Column.DTYPE, Column.QUANTIZE, Column.WORKLOAD]
    depths = presets.groupby(cell, dropna=False)[Column.LAYERS].nunique(dropna=False)
    return bool((depths > 1).any())


SCOPE_KEYS = ["preset", Column.DTYPE, Column.QUANTIZE, Column.WORKLOAD]


def measured_series(study: Study) -> list[DepthSeries]:
    """Every scope × variant × metric's per-depth means, scopes in the report's order."""
    trials = depth_trials(study)
    labels = _scope_sizes(trials)
    series = []
    for key, rows in trials.groupby(SCOPE_KEYS, dropna=False, sort=False):
        preset, dtype, quantize, workload = key
        machines = list(dict.fromkeys(rows[Column.MACHINE]))
        if len(machines) > 1:
            raise ProjectionError(
                f"{labels[preset, dtype, quantize]} ({workload}): runs from {len(machines)} "
                f"machines ({' | '.join(machines)}) in one fit; project each machine's results on "
                "their own"
            )
        scope = FitScope(
            machines[0], preset, dtype, quantize or None, workload, labels[preset, dtype, quantize]
        )
        batch, prompt = int(rows[Column.BATCH].iloc[0]), int(rows[Column.PROMPT_TOKENS].iloc[0])
        tokens = {"prefill": batch * prompt, "gen": batch}
        for variant, variant_rows in rows.groupby(Column.VARIANT, sort=False):
            for metric in METRICS:
                points, spread = _depth_means(
                    scope, variant, variant_rows, METRIC_COLUMNS[metric], tokens[metric]
                )
                if points:  # no gen metric where gen_tokens is 1
                    series.append(
                        DepthSeries(scope, str(variant), metric, tokens[metric], points, spread)
                    )
    workloads = ordered_workloads([trials])
    variants = {v: i for i, v in enumerate(study.variants)}
    return sorted(
        series,
        key=lambda s: (
            s.scope.machine,
            workloads.index(s.scope.workload),
            size_rank(s.scope.size),
            s.scope.size,
            variants.get(s.variant, 0),
            METRICS.index(s.metric),
        ),
    )


def _scope_sizes(trials: pd.DataFrame) -> dict[tuple[Any, ...], str]:
    """(preset, dtype, quantize) -> its size label without the depth; the dtype (and quantization)
    added when one preset was run in several."""
    models = trials.drop_duplicates(["preset", Column.DTYPE, Column.QUANTIZE])
    per_preset = models["preset"].value_counts()
    labels = {}
    for row in models.itertuples():
        size = _DEPTH_SUFFIX.sub("", str(row.size))
        if per_preset[row.preset] > 1:
            size += f" · {row.dtype}" + (f" {row.quantize}" if row.quantize else "")
        labels[row.preset, row.dtype, row.quantize] = size
    return labels


def _depth_means(
    scope: FitScope, variant: Any, rows: pd.DataFrame, column: str, tokens: int
) -> tuple[tuple[DepthMean, ...], RunSpread | None]:
    values = pd.to_numeric(rows[column], errors="coerce")
    valid = values > 0
    times = pd.DataFrame(
        {
            "seconds": tokens / values[valid],
            "depth": rows["depth"][valid],
            "run": rows[Column.RUN_ID][valid],
        }
    )
    counts = (
        times.groupby("depth")["seconds"].count().reindex(sorted(set(rows["depth"])), fill_value=0)
    )
    thin = counts[counts < 2]
    if not thin.empty:
        raise ProjectionError(
            f"{scope.label(int(thin.index[0]), projected=False)} {variant}: {int(thin.iloc[0])} "
            "timed round with a valid time; a fit weighs each depth by its rounds' spread, "
            "so it needs at least 2"
        )
    return depth_means(times)


def depth_means(times: pd.DataFrame) -> tuple[tuple[DepthMean, ...], RunSpread | None]:
    """Each depth's mean time and SE, from one row per timed round (`seconds`, `depth`, `run`).

    A run measures each depth in a worker process of its own, and processes differ by more than
    their rounds' SE says (the same depth has read up to 12% apart in two runs here). With one run
    per depth that spread cannot be seen and the SE is the rounds' alone; where some depth was
    measured in several runs, every depth's SE comes from the runs' spread instead (`RunSpread`)."""
    per_run = times.groupby(["depth", "run"])["seconds"].agg(["mean", "std", "count"])
    spread = _run_spread(per_run)
    points = []
    for depth, runs in per_run.groupby(level="depth"):
        n, k = int(runs["count"].sum()), len(runs)
        if spread is None:
            only = runs.iloc[0]
            points.append(
                DepthMean(
                    int(depth), n, float(only["mean"]), float(only["std"]) / math.sqrt(n), n - 1
                )
            )
            continue
        mean = float(runs["mean"].mean())
        # Never below what the runs' own rounds say: a spread pooled from few runs can read low by
        # chance.
        rounds_se = math.sqrt(float((runs["std"].fillna(0.0) ** 2 / runs["count"]).sum())) / k
        se = max(mean * spread.relative_sd / math.sqrt(k), rounds_se)
        run_means = tuple((str(run), float(m)) for (_, run), m in runs["mean"].items())
        points.append(DepthMean(int(depth), n, mean, se, spread.dof, run_means))
    return tuple(points), spread


def _run_spread(per_run: pd.DataFrame) -> RunSpread | None:
    """The pooled relative SD of a run's mean about its depth's mean of runs, or None where no depth
    has two runs."""
    squares, dof = 0.0, 0
    for _, runs in per_run.groupby(level="depth"):
        if len(runs) < 2:
            continue
        means = runs["mean"].to_numpy()
        squares += float((((means / means.mean()) - 1) ** 2).sum())
        dof += len(means) - 1
    return RunSpread(math.sqrt(squares / dof), dof) if dof else None


# --- the projection -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProjectedRow:
    """One scope × variant at N layers: tok/s per metric with its 95% interval, and the fits behind
    them."""

    size: str  # e.g. "E2B (35/35 layers, projected)"
    scope: FitScope
    variant: str
    layers: int
    prefill: RateInterval
    gen: RateInterval | None  # None where the workload times no decode step
    fits: tuple[LayerFit, ...]  # prefill's, then gen's

    @property
    def fitted_on(self) -> tuple[int, ...]:
        return self.fits[0].depths

    @property
    def residual_note(self) -> str:
        return "; ".join(f"{fit.series.metric}: {fit.residual_note}" for fit in self.fits)


@dataclass(frozen=True)
class ProjectedDelta(RatioInterval):
    """new/baseline tok/s at N layers for one metric, with its conservative 95% interval
    (independent fits)."""

    size: str
    scope: FitScope
    layers: int
    baseline: str
    new: str
    metric: str
    baseline_tps: float
    new_tps: float
    ratio: float
    low: float
    high: float


@dataclass(frozen=True)
class DepthCheck:
    """A measured depth against the fit: `in_fit` False for a depth held out of it (a
    validation)."""

    size: str  # the measured depth's label, e.g. "E2B (12/35 layers)"
    fit: LayerFit
    measured: DepthMean
    in_fit: bool

    @property
    def depth(self) -> int:
        return self.measured.depth

    @property
    def measured_tps(self) -> float:
        return self.fit.series.tokens / self.measured.mean_s

    @property
    def fitted(self) -> RateInterval:
        return self.fit.rate_at(self.depth)

    @property
    def predicted(self) -> RateInterval:
        """Where the measurement should lie: the fit's time at this depth with the measured mean's
        own noise added (two independent errors; the Welch–Satterthwaite dof of both). A point
        inside the fit's interval alone is too strict a test: the measurement is noisy too."""
        fitted = self.fit.time_at(self.depth)
        variances = [fitted.sd**2, self.measured.se_s**2]
        both = TimeEstimate(
            fitted.seconds,
            math.sqrt(sum(variances)),
            welch_dof(variances, [fitted.dof, self.measured.dof]),
        )
        return RateInterval.of(both, self.fit.series.tokens)

    @property
    def error_pct(self) -> float:
        """How far the fit is from the measurement: fitted / measured − 1, in percent."""
        return (self.fitted.tps / self.measured_tps - 1) * 100

    @property
    def within(self) -> bool:
        """Whether the measured tok/s lies inside the 95% prediction interval."""
        return self.predicted.low <= self.measured_tps <= self.predicted.high


@dataclass(frozen=True)
class Projection:
    layers: int | None  # as asked; None: each preset's full depth
    rows: tuple[ProjectedRow, ...]
    deltas: tuple[ProjectedDelta, ...]
    checks: tuple[DepthCheck, ...]  # every measured depth of every fit, fitted against measured


def project(
    study: Study,
    comparisons: Sequence[tuple[str, str]],
    layers: int | None = None,
    fit_layers: Collection[int] | None = None,
) -> Projection:
    """Fit every scope × variant × metric on its depths (or only `fit_layers`, holding the others
    out) and project tok/s and each comparison's Δ to `layers` (default: each preset's full
    depth)."""
    series = measured_series(study)
    for s in series:
        _check_layers(s.scope, layers)
        depths = _fit_depths(s, fit_layers)
        check_separable(s.scope.preset, _what(s, series), depths)
    fits = [fit_series(s, fit_layers) for s in series]
    rows = _rows(fits, layers)
    return Projection(
        layers,
        tuple(rows),
        tuple(_deltas(rows, fits, comparisons)),
        tuple(check for fit in fits for check in depth_checks(fit, fit.series.points)),
    )


def depth_checks(fit: LayerFit, points: Sequence[DepthMean]) -> list[DepthCheck]:
    """Measured against fitted tok/s at each of `points` (a fit's own depths, or ones measured apart
    from it)."""
    scope = fit.series.scope
    return [
        DepthCheck(scope.label(p.depth, projected=False), fit, p, p.depth in fit.depths)
        for p in points
    ]


def _check_layers(scope: FitScope, layers: int | None) -> None:
    if layers is not None and not 1 <= layers <= scope.full_layers:
        raise ProjectionError(
            f"--layers {layers} is out of range for {scope.size} ({scope.preset} has "
            f"{scope.full_layers} layers); choose 1..{scope.full_layers}"
        )


def _fit_depths(series: DepthSeries, fit_layers: Collection[int] | None) -> list[int]:
    if fit_layers is None:
        return list(series.depths)
    missing = sorted(set(fit_layers) - set(series.depths))
    if missing:
        raise ProjectionError(
            f"--fit-layers: {series.scope.size} {series.variant} was not measured at depth "
            f"{join_words(missing)} (measured: {join_words(series.depths)})"
        )
    return sorted(fit_layers)


def _what(series: DepthSeries, every: Sequence[DepthSeries]) -> str:
    """How a refusal names a series: its size and workload; its variant only when the scope's other
    variants have other depths; and depths of the same preset run in another dtype or quantization,
    which a fit never mixes."""
    scope = series.scope
    notes = [scope.workload]
    apart = {
        d
        for s in every
        if s.scope != scope and (s.scope.preset, s.scope.workload) == (scope.preset, scope.workload)
        for d in s.depths
    } - set(series.depths)
    if apart:
        notes.append(
            f"depth {join_words(sorted(apart))} ran in another "
            "dtype or quantization, fitted apart: never mixed"
        )
    what = f"{scope.size} ({'; '.join(notes)})"
    return (
        what
        if len({s.depths for s in every if s.scope == scope}) == 1
        else f"{what} {series.variant}"
    )


def _rows(fits: Sequence[LayerFit], layers: int | None) -> list[ProjectedRow]:
    by_variant: dict[tuple[FitScope, str], dict[str, LayerFit]] = {}
    for fit in fits:
        by_variant.setdefault((fit.series.scope, fit.series.variant), {})[fit.series.metric] = fit
    rows = []
    for (scope, variant), metrics in by_variant.items():
        n = layers or scope.full_layers
        gen = metrics.get("gen")
        rows.append(
            ProjectedRow(
                scope.label(n, projected=True),
                scope,
                variant,
                n,
                metrics["prefill"].rate_at(n),
                gen.rate_at(n) if gen else None,
                tuple(metrics.values()),
            )
        )
    return rows


def _deltas(
    rows: Sequence[ProjectedRow], fits: Sequence[LayerFit], comparisons: Sequence[tuple[str, str]]
) -> list[ProjectedDelta]:
    fit_of = {(f.series.scope, f.series.variant, f.series.metric): f for f in fits}
    deltas = []
    for scope in dict.fromkeys(row.scope for row in rows):
        n = next(row.layers for row in rows if row.scope == scope)
        for baseline, new in comparisons:
            for metric in METRICS:
                base_fit, new_fit = (
                    fit_of.get((scope, baseline, metric)),
                    fit_of.get((scope, new, metric)),
                )
                if base_fit and new_fit:
                    deltas.append(
                        projected_delta(scope.label(n, projected=True), base_fit, new_fit, n)
                    )
    return deltas


def projected_delta(
    size: str, base_fit: LayerFit, new_fit: LayerFit, layers: int
) -> ProjectedDelta:
    """Δ = t_base / t_new − 1 at `layers`, its interval by the delta method on the log ratio (fits
    independent)."""
    base, new = base_fit.time_at(layers), new_fit.time_at(layers)
    series = new_fit.series
    if base.seconds <= 0 or new.seconds <= 0:
        ratio = low = high = math.nan
    else:
        ratio = base.seconds / new.seconds
        sd, dof = _paired_log_sd(base_fit, new_fit, layers) or _independent_log_sd(base, new)
        half = quantile(dof) * sd
        low, high = ratio * math.exp(-half), ratio * math.exp(half)
    return ProjectedDelta(
        size,
        series.scope,
        layers,
        base_fit.series.variant,
        series.variant,
        series.metric,
        base_fit.rate_at(layers).tps,
        new_fit.rate_at(layers).tps,
        ratio,
        low,
        high,
    )


def _independent_log_sd(base: TimeEstimate, new: TimeEstimate) -> tuple[float, float]:
    """The log ratio's SD with the two fits independent, and its Welch–Satterthwaite dof."""
    variances = [(base.sd / base.seconds) ** 2, (new.sd / new.seconds) ** 2]
    return math.sqrt(sum(variances)), welch_dof(variances, [base.dof, new.dof])


def _paired_log_sd(
    base_fit: LayerFit, new_fit: LayerFit, layers: int
) -> tuple[float, float] | None:
    """The log ratio's SD where both fits rest on the same runs at the same depths, or None.

    Both variants of a run ran in one worker process per depth, so a process's speed moves both: it
    cancels in their ratio, which independent fits would miss (and read a ±25% Δ where the runs
    agree to a few percent). The log projected time is Σ_d c_d·(log error of depth d's mean),
    c_d = a_d·m_d / t (a = x·gain). So the log ratio's error is Σ_d
    c_base,d·e_base,d − c_new,d·e_new,d; with e = π (the process, shared) + ε (each variant's own),
    its variance is Σ_d [(c_base,d − c_new,d)²·var(π_d) + c̄_d²·var(ε_base,d − ε_new,d)]. var(π_d)
    is bounded by the runs' spread (which holds the rounds' noise as well: conservative);
    var(ε_base − ε_new) of a depth's mean over k runs is s²/k, s² the pooled spread over runs of
    log(m_base/m_new), whose dof both share. Widened by the larger χ²/dof where a fit scatters
    beyond that."""
    spread_base, spread_new = base_fit.series.between_runs, new_fit.series.between_runs
    if spread_base is None or spread_new is None or base_fit.depths != new_fit.depths:
        return None
    pairs = list(zip(base_fit.points, new_fit.points, strict=True))
    if any(dict(b.run_means).keys() != dict(n.run_means).keys() for b, n in pairs):
        return None
    squares, dof = 0.0, 0
    for b, n in pairs:
        new_means = dict(n.run_means)
        logs = np.log(np.array([m / new_means[run] for run, m in b.run_means]))
        if len(logs) > 1:
            squares += float(((logs - logs.mean()) ** 2).sum())
            dof += len(logs) - 1
    if not dof:
        return None
    ratio_var = squares / dof
    x = layer_counts(base_fit.series.scope.preset, layers).row(base_fit.terms)
    weights = []
    for fit in (base_fit, new_fit):
        a = x @ np.array(fit.gain)
        means = np.array([p.mean_s for p in fit.points])
        weights.append(a * means / float(a @ means))
    c_base, c_new = weights
    runs = np.array([p.runs for p in base_fit.points], dtype=np.float64)
    process_var = max(spread_base.relative_sd, spread_new.relative_sd) ** 2
    variance = float(
        ((c_base - c_new) ** 2 * process_var / runs).sum()
        + (((c_base + c_new) / 2) ** 2 * ratio_var / runs).sum()
    )
    inflation = max([f.reduced_chi2 for f in (base_fit, new_fit) if f.inflated] or [1.0])
    dofs = [dof, *(f.dof for f in (base_fit, new_fit) if f.inflated)]
    return math.sqrt(variance * inflation), float(min(dofs))
