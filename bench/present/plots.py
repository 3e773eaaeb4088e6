"""The report's PNG plots, drawn headless with matplotlib's object API (no pyplot state, no display
needed).

Every plot gets a title, axis labels with units, and a caption naming the machine it was measured
on; each function takes typed points (the dataclasses below), so it knows nothing of results files.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..analysis.inference import RatioInterval

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
# matplotlib itself is imported where a plot is drawn: the commands that draw none (a run's first
# screen, check) skip its import.

DPI = 120
METRICS = ("prefill", "gen")
METRIC_TITLES = {"prefill": "prefill", "gen": "generation (decode)"}
METRIC_COLORS = {"prefill": "#4C72B0", "gen": "#DD8452"}
# Bars spanning more than this factor are drawn on a log axis, so a 31B's 500 tok/s still shows
# beside E2B's 20k.
LOG_SCALE_SPAN = 20.0
# Speed ratios beyond these go on a log axis, so a +5% shows beside a fused kernel's +900%.
LOG_RATIO_LOW, LOG_RATIO_HIGH = 0.5, 2.0
# Where a log axis of speed ratios is ticked: round Δs from -90% to +4,900%, spaced so the labels
# never touch.
RATIO_TICKS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 20.0, 50.0)


@dataclass(frozen=True)
class DeltaBar:
    """One bar of delta_plot: a row's Δ% with its 95% interval."""

    size: str  # the row's label: the bars of one size stand side by side, prefill and gen
    metric: str
    delta_pct: float
    low_pct: float
    high_pct: float
    decided: bool  # faster or slower (the interval excludes 0): drawn solid, else faint
    incorrect: bool = False  # failed correctness: no bar, the word "incorrect" in its place
    reference_pct: float | None = None  # a published Δ, marked beside the bar


@dataclass(frozen=True)
class Spread:
    """A median with its quartiles, where a plot puts it."""

    size: str  # the row's label
    metric: str
    variant: str
    median: float
    q1: float
    q3: float
    prompt_tokens: int = 0  # prompt_sweep_plot's x


@dataclass(frozen=True)
class TrialPoint:
    """One timed trial's tok/s on one metric (rounds_plot)."""

    size: str
    variant: str
    metric: str
    round: int
    tps: float


@dataclass(frozen=True)
class OpBar:
    """One bar of op_delta_plot: an op variant's speed against its op's reference variant."""

    label: str  # the shape, and the variant where its op has several
    op: str
    speed: RatioInterval  # speed ratio variant / reference (> 1 is faster) with its 95% interval
    decided: bool  # faster or slower: drawn solid, else faint


@dataclass(frozen=True)
class DepthPoint:
    """Decode tok/s at one KV depth in one round (depth_plot)."""

    size: str
    variant: str
    depth: int
    gen_tps: float


def variant_colors(variants: Sequence[str]) -> dict[str, str]:
    """One color per variant, stable across every plot of a report."""
    palette = [
        "#4C72B0",
        "#DD8452",
        "#55A868",
        "#C44E52",
        "#8172B3",
        "#937860",
        "#DA8BC3",
        "#8C8C8C",
    ]
    return {v: palette[i % len(palette)] for i, v in enumerate(variants)}


def delta_plot(
    bars: Sequence[DeltaBar], sizes: Sequence[str], *, title: str, caption: str, path: Path
) -> Path:
    """Δ% per size with 95% CI error bars, prefill and gen side by side: the PR table as a picture.
    A bar without a verdict of faster or slower is drawn faint."""
    fig = _figure(max(6.0, 1.5 * len(sizes) + 3), 4.6)
    ax = fig.add_subplot()
    x = np.arange(len(sizes))
    width = 0.38
    has_reference = any(bar.reference_pct is not None for bar in bars)
    for offset, metric in zip((-width / 2, width / 2), METRICS, strict=True):
        by_size = {bar.size: bar for bar in bars if bar.metric == metric}
        slots = [by_size.get(size) for size in sizes]
        shown = [
            (xi + offset, bar)
            for xi, bar in zip(x, slots, strict=True)
            if bar and not math.isnan(bar.delta_pct) and not bar.incorrect
        ]
        pos = np.array([xi for xi, _ in shown])
        deltas = np.array([bar.delta_pct for _, bar in shown])
        lows, highs = (
            np.array([bar.low_pct for _, bar in shown]),
            np.array([bar.high_pct for _, bar in shown]),
        )
        color = METRIC_COLORS[metric]
        from matplotlib.colors import to_rgba

        fills = [to_rgba(color, 1.0 if bar.decided else 0.35) for _, bar in shown]
        ax.bar(
            pos,
            deltas,
            width,
            yerr=[deltas - lows, highs - deltas],
            capsize=4,
            color=fills,
            edgecolor=color,
            label=METRIC_TITLES[metric],
            error_kw={"elinewidth": 1.2, "ecolor": "#333333"},
        )
        # Label beyond the end of the CI, so the number never sits on the error bar.
        for xi, bar in shown:
            above = bar.delta_pct >= 0
            ax.annotate(
                f"{bar.delta_pct:+.1f}%",
                (xi, bar.high_pct if above else bar.low_pct),
                xytext=(0, 4 if above else -4),
                textcoords="offset points",
                ha="center",
                va="bottom" if above else "top",
                fontsize=8,
            )
        for xi, bar in zip(x, slots, strict=True):
            if bar and bar.incorrect:
                ax.text(
                    xi + offset,
                    0,
                    "incorrect",
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    color="#C44E52",
                )
        if has_reference:
            published = [
                bar.reference_pct if bar and bar.reference_pct is not None else np.nan
                for bar in slots
            ]
            ax.scatter(
                x + offset,
                published,
                marker="_",
                s=320,
                linewidths=2.5,
                color="black",
                zorder=3,
                label="reference Δ" if metric == "prefill" else None,
            )
    ax.axhline(0, color="#333333", linewidth=0.8)
    ax.set_xticks(x, sizes)
    ax.set_xlim(-0.7, len(sizes) - 0.3)
    ax.set_xlabel("model size")
    ax.set_ylabel("Δ throughput vs baseline (%)")
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    _legend(fig, ax)
    return _save(fig, title, caption, path)


def throughput_plot(
    spreads: Sequence[Spread],
    sizes: Sequence[str],
    variants: Sequence[str],
    *,
    title: str,
    caption: str,
    path: Path,
) -> Path:
    """Median tok/s per variant per size (grouped bars, IQR whiskers), one panel per metric."""
    colors = variant_colors(variants)
    width = 0.8 / max(1, len(variants))

    def draw(ax: Axes, panel: list[Spread]) -> None:
        for j, variant in enumerate(variants):
            by_size = {s.size: s for s in panel if s.variant == variant}
            slots = [by_size.get(size) for size in sizes]
            median = np.array([s.median if s else np.nan for s in slots])
            q1, q3 = (
                np.array([s.q1 if s else np.nan for s in slots]),
                np.array([s.q3 if s else np.nan for s in slots]),
            )
            pos = np.arange(len(sizes)) + (j - (len(variants) - 1) / 2) * width
            errors = [np.nan_to_num(median - q1), np.nan_to_num(q3 - median)]
            ax.bar(pos, median, width, yerr=errors, capsize=3, color=colors[variant], label=variant)
        _tps_axis(ax, [s.median for s in panel])
        ax.set_xticks(np.arange(len(sizes)), sizes)
        ax.set_xlabel("model size")
        ax.grid(axis="y", alpha=0.3)

    panel_width = max(6.0, 1.6 * len(sizes) + 2)
    return _metric_panels(
        spreads, draw, panel_width, wide=1.6, title=title, caption=caption, path=path
    )


def prompt_sweep_plot(
    spreads: Sequence[Spread],
    sizes: Sequence[str],
    variants: Sequence[str],
    *,
    title: str,
    caption: str,
    path: Path,
) -> Path:
    """Median tok/s against prompt length (Spread.prompt_tokens): color per variant, marker per
    size, one panel per metric."""
    colors = variant_colors(variants)
    markers = dict(zip(sizes, "osD^vP*X", strict=False))

    def draw(ax: Axes, panel: list[Spread]) -> None:
        for size in sizes:
            for variant in variants:
                line = sorted(
                    (s for s in panel if (s.size, s.variant) == (size, variant)),
                    key=lambda s: s.prompt_tokens,
                )
                if not line:
                    continue
                medians = np.array([s.median for s in line])
                ax.errorbar(
                    [s.prompt_tokens for s in line],
                    medians,
                    yerr=[medians - [s.q1 for s in line], [s.q3 for s in line] - medians],
                    color=colors[variant],
                    marker=markers.get(size, "o"),
                    capsize=3,
                    label=f"{size} · {variant}",
                )
        _token_axis(ax, [s.prompt_tokens for s in panel])
        _tps_axis(ax, [s.median for s in panel])
        ax.set_xlabel("prompt length (tokens)")
        ax.grid(alpha=0.3)

    return _metric_panels(spreads, draw, 6.0, wide=2.0, title=title, caption=caption, path=path)


def _metric_panels(
    spreads: Sequence[Spread],
    draw: Callable[[Axes, list[Spread]], None],
    width: float,
    *,
    wide: float,
    title: str,
    caption: str,
    path: Path,
) -> Path:
    """One panel per metric the spreads hold, each drawn by `draw`, titled and labelled alike; the
    figure `width` wide for one panel, `wide` times that for two."""
    metrics = [m for m in METRICS if any(s.metric == m for s in spreads)]
    fig = _figure(width * (1 if len(metrics) == 1 else wide), 4.6)
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        draw(ax, [s for s in spreads if s.metric == metric])
        ax.set_title(METRIC_TITLES[metric], fontsize=10)
        ax.set_ylabel("median throughput (tokens/s)")
    _legend(fig, ax)
    return _save(fig, title, caption, path)


def rounds_plot(
    points: Sequence[TrialPoint],
    sizes: Sequence[str],
    variants: Sequence[str],
    *,
    title: str,
    caption: str,
    path: Path,
) -> Path:
    """Every timed trial's tok/s in round order, one small panel per size x metric, a line per
    variant, so drift (a trend) and noise (scatter) are visible."""
    metrics = [m for m in METRICS if any(p.metric == m for p in points)]
    fig = _figure(5.0 * len(metrics) + 0.5, 2.3 * len(sizes) + 1.2)
    colors = variant_colors(variants)
    axes = fig.subplots(len(sizes), len(metrics), squeeze=False)
    for row, size in enumerate(sizes):
        for col, metric in enumerate(metrics):
            ax = axes[row][col]
            panel = [p for p in points if (p.size, p.metric) == (size, metric)]
            for variant in dict.fromkeys(p.variant for p in panel):
                line = sorted((p for p in panel if p.variant == variant), key=lambda p: p.round)
                ax.plot(
                    [p.round + 1 for p in line],
                    [p.tps for p in line],
                    marker="o",
                    markersize=4,
                    linewidth=1.2,
                    color=colors.get(variant, "gray"),
                    label=variant,
                )
            ax.set_title(f"{size} · {METRIC_TITLES[metric]}", fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel("tokens/s")
            _tps_axis(ax, [p.tps for p in panel])
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
    _legend(fig, axes[0][0])
    return _save(fig, title, caption, path)


def depth_plot(
    points: Sequence[DepthPoint],
    sizes: Sequence[str],
    variants: Sequence[str],
    *,
    title: str,
    caption: str,
    path: Path,
) -> Path:
    """Decode tok/s against KV depth: the median over rounds, with the IQR as a band; one panel per
    size."""
    fig = _figure(max(6.0, 4.2 * len(sizes)), 4.4)
    colors = variant_colors(variants)
    for i, size in enumerate(sizes):
        ax = fig.add_subplot(1, len(sizes), i + 1)
        panel = [p for p in points if p.size == size]
        for variant in variants:
            mine = [p for p in panel if p.variant == variant]
            if not mine:
                continue
            depths = sorted({p.depth for p in mine})
            q1, median, q3 = np.array(
                [
                    np.quantile([p.gen_tps for p in mine if p.depth == d], [0.25, 0.5, 0.75])
                    for d in depths
                ]
            ).T
            ax.plot(depths, median, marker="o", color=colors[variant], label=variant)
            ax.fill_between(depths, q1, q3, color=colors[variant], alpha=0.2)
        _token_axis(ax, [p.depth for p in panel])
        _tps_axis(ax, [p.gen_tps for p in panel])
        ax.set_title(size, fontsize=10)
        ax.set_xlabel("KV cache depth (tokens)")
        ax.set_ylabel("decode throughput (tokens/s)")
        ax.grid(alpha=0.3)
    _legend(fig, ax)
    return _save(fig, title, caption, path)


def op_delta_plot(bars: Sequence[OpBar], *, title: str, caption: str, path: Path) -> Path:
    """Δ speed of each op variant against its op's reference variant, one horizontal bar per OpBar,
    top to bottom, with 95% CI error bars and one color per op; a bar without a verdict of faster or
    slower is faint. Bars grow from ratio 1 (Δ 0%); the axis is labelled in Δ% and turns logarithmic
    when the ratios span widely."""
    ops = list(dict.fromkeys(bar.op for bar in bars))
    colors = variant_colors(ops)
    # A gap between ops groups each op's bars under its color.
    y = np.arange(len(bars)) + 0.6 * np.array([ops.index(bar.op) for bar in bars])
    fig = _figure(10.0, 0.28 * len(bars) + 0.2 * len(ops) + 1.6)
    ax = fig.add_subplot()
    ratio = np.array([bar.speed.ratio for bar in bars])
    low, high = (
        np.array([bar.speed.low for bar in bars]),
        np.array([bar.speed.high for bar in bars]),
    )
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Patch

    fills = [to_rgba(colors[bar.op], 1.0 if bar.decided else 0.35) for bar in bars]
    ax.barh(
        y,
        ratio - 1,
        left=1,
        height=0.75,
        color=fills,
        edgecolor=[colors[bar.op] for bar in bars],
        xerr=[ratio - low, high - ratio],
        capsize=2,
        error_kw={"elinewidth": 1.0, "ecolor": "#333333"},
    )
    # Label beyond the end of the CI, so the number never sits on the error bar.
    for yi, r, lo, hi in zip(y, ratio, low, high, strict=True):
        right = r >= 1
        ax.annotate(
            f"{(r - 1) * 100:+.1f}%",
            (hi if right else lo, yi),
            xytext=(3 if right else -3, 0),
            textcoords="offset points",
            ha="left" if right else "right",
            va="center",
            fontsize=7,
        )
    ax.axvline(1, color="#333333", linewidth=0.8)
    log = _ratio_axis(ax, [*low, *high])
    ax.set_yticks(y, [bar.label for bar in bars], fontsize=7)
    ax.set_ylim(y[-1] + 0.8, -0.8)  # top to bottom, without the empty rows autoscaling would add
    ax.set_xlabel(
        "Δ speed vs the op's reference variant (%"
        + (", log scale of the speed ratio)" if log else ")")
    )
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=colors[op], label=op) for op in ops]
    handles.append(
        Patch(
            facecolor=to_rgba("#8C8C8C", 0.35),
            edgecolor="#8C8C8C",
            label="no verdict (CI includes 0)",
        )
    )
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
    return _save(fig, title, caption, path)


def _ratio_axis(ax: Axes, ratios: Sequence[float]) -> bool:
    """An x axis of speed ratios labelled as Δ%, with room beyond the extremes for the bars' labels;
    logarithmic (True) when they span widely, so 2x faster and 2x slower lie equally far from 0%."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    values = np.asarray(ratios, dtype=np.float64)
    finite = values[np.isfinite(values)]  # a row of one round has no interval
    low, high = float(finite.min(initial=1.0)), float(finite.max(initial=1.0))
    log = low < LOG_RATIO_LOW or high > LOG_RATIO_HIGH
    if log:
        ax.set_xscale("log")
        ax.set_xlim(low / 1.6, high * 1.6)
        ax.set_xticks([t for t in RATIO_TICKS if low / 1.6 <= t <= high * 1.6])
        ax.xaxis.set_minor_locator(NullLocator())
    else:
        margin = 0.15 * (high - low) or 0.05
        ax.set_xlim(low - margin, high + margin)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda ratio, _: _percent_change(ratio)))
    return log


def _percent_change(ratio: float) -> str:
    delta = round((ratio - 1) * 100)
    return f"{delta:+,}%" if delta else "0%"


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _legend(fig: Figure, ax: Axes) -> None:
    """One legend for the figure, outside the panels, so it never hides a bar or a label."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right center", fontsize=8, frameon=False)


def _token_axis(ax: Axes, values: Sequence[int]) -> None:
    """A log2 axis of token counts, ticked at the measured values and labelled in plain numbers
    (2048, not 2^11)."""
    from matplotlib.ticker import NullLocator

    ticks = sorted(set(int(v) for v in values))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


def _tps_axis(ax: Axes, values: Sequence[float]) -> None:
    """A tok/s axis that never exaggerates a gap: linear from 0, so a 4% difference looks like 4%
    (autoscaling started pr18809's decode panels at 2.80 tok/s, and a gap inside the IQR filled the
    panel); logarithmic only when the values span more than LOG_SCALE_SPAN, where a linear axis
    would flatten the small sizes' bars."""
    finite = np.asarray(values, dtype=np.float64)
    positive = finite[finite > 0]  # NaN compares False
    if positive.size and positive.max() / positive.min() > LOG_SCALE_SPAN:
        ax.set_yscale("log")
    else:
        # Autoscaling left a margin of the narrow data range only; above a zero-based axis, caps and
        # bands need more.
        ax.set_ylim(0, ax.get_ylim()[1] * 1.05)


def _save(fig: Figure, title: str, caption: str, path: Path) -> Path:
    fig.suptitle(title, fontsize=12)
    # The caption sits under the panels, where constrained layout leaves room for it; wrapped to the
    # figure's width (about 14 characters per inch at 8 pt), since a long device name would
    # otherwise be cut off.
    fig.supxlabel(
        textwrap.fill(caption, width=int(fig.get_figwidth() * 14)), fontsize=8, color="#57606a"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path
