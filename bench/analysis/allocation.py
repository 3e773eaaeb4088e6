"""Worker pairs against rounds a pair (Kalibera & Jones, ISMM 2013): an A/B's pooled rows scatter
from round to round within a pair (σ) and from pair to pair (τ, a process's own offset), and a
fresh pair costs the seconds of `pair_cost` rounds. At a fixed budget, B pairs of k rounds give
the mean a variance (σ²/k + τ²)/B, and the interval's degrees of freedom come from the pairs where
τ sets the spread (analysis.inference, `Unit.PAIR`). These are the figures a run measured, and the
k that would have given the narrowest interval in the same time."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special
from scipy.stats import chi2

from ..core.cell import CURRENT_BUILD, REFERENCE_BUILD
from ..core.fileformat import Column
from . import stats


@dataclass(frozen=True)
class Components:
    """A row's variance components, as SDs of the per-round log ratio: `within` a pair (σ) and
    `between` pairs (τ, 0 where the pairs' means scatter no more than their rounds explain)."""

    within: float
    between: float
    pairs: int
    rounds: int

    @property
    def ratio(self) -> float:
        """τ/σ: a pair's own offset against a round's scatter within a pair."""
        return self.between / self.within if self.within > 0 else 0.0


def components(log_ratios: Sequence[float], pairs: Sequence[Hashable]) -> Components | None:
    """σ and τ from one-way ANOVA on the rounds' log ratios grouped by pair (τ² = (MSB − MSW)/k̄,
    floored at 0); None with fewer than two pairs, or no pair of two rounds or more."""
    values = np.asarray(log_ratios, dtype=np.float64)
    labels = list(dict.fromkeys(pairs))
    groups = [values[[p == label for p in pairs]] for label in labels]
    if len(groups) < 2 or values.size <= len(groups):
        return None
    within_ss = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups)
    msw = within_ss / (values.size - len(groups))
    mean = float(values.mean())
    msb = sum(g.size * (float(g.mean()) - mean) ** 2 for g in groups) / (len(groups) - 1)
    k = values.size / len(groups)
    between = math.sqrt(max(0.0, (msb - msw) / k))
    return Components(math.sqrt(msw), between, len(groups), int(values.size))


# A pair's own offset against a round's scatter within a pair (τ/σ), over the span the committed
# A/Bs measured: 0-0.5 on the Zen 4 (results/placement), up to 3.5 on the Xeon
# (results/build-offset-xeon). Before a run's rounds say where its machine is, the rounds a pair
# are chosen to do well across the whole span (`rounds_per_pair`).
OFFSET_RATIOS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


def expected_half_width(ratio: float, k: int, rounds: int, alpha: float) -> float:
    """The expected half-width, in units of σ (log), of an interval that holds the truth from
    `rounds` rounds in pairs of `k` at a pair's offset τ = `ratio` · σ: the mean's true spread
    sqrt((σ² + kτ²)/n) times the t quantile the interval uses. That is B − 1 degrees of freedom
    where the pairs are its unit (their mean square above the rounds' variance: analysis.inference,
    `Unit.PAIR`), which happens by chance even at τ = 0, else n − 1; so the quantile is weighed by
    the chance of each (MSB/(σ² + kτ²) is χ²(B − 1)/(B − 1), the rounds' variance taken at its mean
    σ² + τ²). One pair cannot show τ, nor so qualify its own interval: infinite."""
    pairs = math.ceil(rounds / k) if rounds else 0
    if rounds < 2 or pairs < 2:
        return math.inf
    spread = 1 + k * ratio**2
    by_rounds = _t(rounds - 1, 1 - alpha / 2)
    chance = float(chi2.sf((pairs - 1) * (1 + ratio**2) / spread, pairs - 1))
    quantile = chance * _t(pairs - 1, 1 - alpha / 2) + (1 - chance) * by_rounds
    return quantile * math.sqrt(spread / rounds)


def _t(df: int, p: float) -> float:
    return float(special.stdtrit(df, p))


def rounds_per_pair(
    fits: Callable[[int], int], most: int, alpha: float, ratios: Sequence[float] = OFFSET_RATIOS
) -> tuple[int, int]:
    """The rounds a pair (1 to `most`) for a run that has not measured its pairs yet, with the
    rounds that then fit (`fits(k)`: the rounds the time holds with a fresh pair every k). Each k
    is scored by its worst ratio, over `ratios` (τ/σ), to the narrowest interval any k gives at
    that ratio (minimax regret): many short pairs cost starts where pairs agree, few long ones
    leave the interval few degrees of freedom where they do not."""
    designs = {k: fits(k) for k in range(1, max(1, most) + 1)}
    widths = {k: [expected_half_width(r, k, n, alpha) for r in ratios] for k, n in designs.items()}
    best = [min(w[i] for w in widths.values()) for i in range(len(ratios))]

    def regret(k: int) -> float:
        return max(w / b if math.isfinite(b) else 1.0 for w, b in zip(widths[k], best, strict=True))

    k = min(designs, key=lambda k: (regret(k), -k))
    return k, designs[k]


def widest_half_width_pct(rows: Iterable[Components], k: int, rounds: int, alpha: float) -> float:
    """The widest expected half-width, in percent, among rows scattering as `rows` did, at
    `rounds` rounds in pairs of `k`: the row a gate's outcome waits on (NaN without a row)."""
    widths = [
        100 * math.sinh(c.within * expected_half_width(c.ratio, k, rounds, alpha)) for c in rows
    ]
    return max(widths, default=math.nan)


def scatter_within_pct(half_width_pct: float, k: int, rounds: int, alpha: float) -> float:
    """The most a row may scatter a round (σ, percent) for `rounds` rounds in pairs of `k` to
    give it an expected half-width of `half_width_pct` where its pairs agree (τ = 0)."""
    return 100 * math.asinh(half_width_pct / 100) / expected_half_width(0.0, k, rounds, alpha)


def best_rounds_per_pair(
    c: Components, rounds: int, pair_cost: float, alpha: float
) -> tuple[int, float]:
    """The rounds a pair (1 to `rounds`) whose pairs, in the time the run's own `rounds` rounds
    and fresh pairs took (a fresh pair costing `pair_cost` rounds; the first pair's start is paid
    either way), give the narrowest expected interval at the run's measured τ/σ (two pairs at
    least: one cannot show τ, however small it measured); with that half-width (log units)."""
    spent = rounds + (c.pairs - 1) * pair_cost
    ratio = c.ratio
    best = (c.pairs and rounds // c.pairs, math.inf)
    for k in range(1, rounds + 1):
        pairs = int((spent + pair_cost) // (k + pair_cost))
        width = c.within * expected_half_width(ratio, k, pairs * k, alpha)
        if width < best[1]:
            best = (k, width)
    return best


@dataclass(frozen=True)
class Allocation:
    """What a run's own rounds say of its pairs and rounds a pair, for one pooled row."""

    metric: str
    measured: Components
    rounds_per_pair: int  # the run's
    pair_cost: float  # a fresh pair's seconds, in rounds
    best: int  # the rounds a pair that would have given the narrowest interval
    narrower: float  # its expected half-width over the run's design's (1: no better)


def allocations(
    trials: pd.DataFrame, fresh_pairs_s: float, round_s: float, alpha: float
) -> list[Allocation]:
    """Per metric, the pooled build row's (all variants, current against reference) components
    and the rounds a pair that would have narrowed its interval most in the same time; none for a
    run of one pair or without the fresh pairs' time."""
    timed = stats.timed_trials(trials)
    timed = timed[timed[Column.BUILD].isin([REFERENCE_BUILD, CURRENT_BUILD])]
    variants = timed[Column.VARIANT].nunique()
    pooled = stats.every_variant(timed, variants) if variants > 1 else timed
    found = []
    for metric in ("prefill", "gen"):
        column = f"{metric}_tps"
        sides = pooled.pivot_table(
            index=[Column.PROCESS, Column.ROUND], columns=Column.BUILD, values=column
        ).dropna()
        if sides.empty or CURRENT_BUILD not in sides or REFERENCE_BUILD not in sides:
            continue
        logs = np.log(sides[CURRENT_BUILD] / sides[REFERENCE_BUILD])
        labels = list(sides.index.get_level_values(0))
        measured = components(list(logs), labels)
        if measured is None or round_s <= 0:
            continue
        pair_cost = fresh_pairs_s / (measured.pairs - 1) / round_s
        run_k = round(measured.rounds / measured.pairs)
        now = measured.within * expected_half_width(measured.ratio, run_k, measured.rounds, alpha)
        best, width = best_rounds_per_pair(measured, measured.rounds, pair_cost, alpha)
        found.append(
            Allocation(metric, measured, run_k, pair_cost, best, width / now if now else 1.0)
        )
    return found
