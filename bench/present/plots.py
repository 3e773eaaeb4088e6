"""The report's PNG plots, drawn headless with matplotlib's object API (no pyplot state, no display needed).

Every plot gets a title, axis labels with units, and a caption naming the machine it was measured on; each
function takes plain frames whose columns are listed in its docstring, so it knows nothing of results files.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullLocator

DPI = 120
METRIC_TITLES = {"prefill": "prefill", "gen": "generation (decode)"}
METRIC_COLORS = {"prefill": "#4C72B0", "gen": "#DD8452"}
# Bars spanning more than this factor are drawn on a log axis, so a 31B's 500 tok/s still shows beside E2B's 20k.
LOG_SCALE_SPAN = 20.0
# Speed ratios beyond these go on a log axis, so a +5% shows beside a fused kernel's +900%.
LOG_RATIO_LOW, LOG_RATIO_HIGH = 0.5, 2.0
# Where a log axis of speed ratios is ticked: round Δs from -90% to +4,900%, spaced so the labels never touch.
RATIO_TICKS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 20.0, 50.0)


def variant_colors(variants: Sequence[str]) -> dict[str, str]:
    """One color per variant, stable across every plot of a report."""
    palette = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
    return {v: palette[i % len(palette)] for i, v in enumerate(variants)}


def delta_plot(points: pd.DataFrame, sizes: Sequence[str], *, title: str, caption: str, path: Path) -> Path:
    """Δ% per size with 95% CI error bars, prefill and gen side by side: the PR table as a picture.

    points: size, metric, delta_pct, low_pct, high_pct, verdict, incorrect (bool), ref_delta_pct (NaN when none).
    A bar without a verdict of faster or slower is drawn faint.
    """
    fig = _figure(max(6.0, 1.5 * len(sizes) + 3), 4.6)
    ax = fig.add_subplot()
    x = np.arange(len(sizes))
    width = 0.38
    has_reference = points["ref_delta_pct"].notna().any()
    for offset, metric in zip((-width / 2, width / 2), ("prefill", "gen"), strict=True):
        rows = points[points["metric"] == metric].set_index("size").reindex(sizes)
        shown = rows["delta_pct"].notna() & ~rows["incorrect"].fillna(False).astype(bool)
        pos, shown_rows = x[shown.to_numpy()] + offset, rows[shown]
        errors = [shown_rows["delta_pct"] - shown_rows["low_pct"], shown_rows["high_pct"] - shown_rows["delta_pct"]]
        color = METRIC_COLORS[metric]
        fills = [to_rgba(color, 1.0 if decided else 0.35) for decided in _decided(shown_rows["verdict"])]
        ax.bar(pos, shown_rows["delta_pct"], width, yerr=errors, capsize=4, color=fills, edgecolor=color,
               label=METRIC_TITLES[metric], error_kw={"elinewidth": 1.2, "ecolor": "#333333"})
        # Label beyond the end of the CI, so the number never sits on the error bar.
        for xi, delta, low, high in zip(pos, shown_rows["delta_pct"], shown_rows["low_pct"], shown_rows["high_pct"],
                                        strict=True):
            above = delta >= 0
            ax.annotate(f"{delta:+.1f}%", (xi, high if above else low), xytext=(0, 4 if above else -4),
                        textcoords="offset points", ha="center", va="bottom" if above else "top", fontsize=8)
        for xi in x[rows["incorrect"].fillna(False).astype(bool).to_numpy()] + offset:
            ax.text(xi, 0, "incorrect", rotation=90, ha="center", va="bottom", fontsize=8, color="#C44E52")
        if has_reference:
            ax.scatter(x + offset, rows["ref_delta_pct"], marker="_", s=320, linewidths=2.5, color="black", zorder=3,
                       label="reference Δ" if metric == "prefill" else None)
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
    summary: pd.DataFrame, sizes: Sequence[str], variants: Sequence[str], *, title: str, caption: str, path: Path
) -> Path:
    """Median tok/s per variant per size (grouped bars, IQR whiskers), one panel per metric.

    summary: size, metric, variant, median, q1, q3.
    """
    metrics = [m for m in ("prefill", "gen") if (summary["metric"] == m).any()]
    fig = _figure(max(6.0, 1.6 * len(sizes) + 2) * (1 if len(metrics) == 1 else 1.6), 4.6)
    colors = variant_colors(variants)
    width = 0.8 / max(1, len(variants))
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        panel = summary[summary["metric"] == metric]
        for j, variant in enumerate(variants):
            rows = panel[panel["variant"] == variant].set_index("size").reindex(sizes)
            pos = np.arange(len(sizes)) + (j - (len(variants) - 1) / 2) * width
            errors = [(rows["median"] - rows["q1"]).fillna(0), (rows["q3"] - rows["median"]).fillna(0)]
            ax.bar(pos, rows["median"], width, yerr=errors, capsize=3, color=colors[variant], label=variant)
        _tps_axis(ax, panel["median"])
        ax.set_xticks(np.arange(len(sizes)), sizes)
        ax.set_title(METRIC_TITLES[metric], fontsize=10)
        ax.set_xlabel("model size")
        ax.set_ylabel("median throughput (tokens/s)")
        ax.grid(axis="y", alpha=0.3)
    _legend(fig, ax)
    return _save(fig, title, caption, path)


def prompt_sweep_plot(
    summary: pd.DataFrame, sizes: Sequence[str], variants: Sequence[str], *, title: str, caption: str, path: Path
) -> Path:
    """Median tok/s against prompt length: color per variant, marker per size, one panel per metric.

    summary: size, metric, variant, prompt_tokens, median, q1, q3.
    """
    metrics = [m for m in ("prefill", "gen") if (summary["metric"] == m).any()]
    fig = _figure(6.0 * len(metrics), 4.6)
    colors = variant_colors(variants)
    markers = dict(zip(sizes, "osD^vP*X", strict=False))
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        panel = summary[summary["metric"] == metric]
        for size in sizes:
            for variant in variants:
                rows = panel[(panel["size"] == size) & (panel["variant"] == variant)].sort_values("prompt_tokens")
                if rows.empty:
                    continue
                ax.errorbar(rows["prompt_tokens"], rows["median"],
                            yerr=[rows["median"] - rows["q1"], rows["q3"] - rows["median"]],
                            color=colors[variant], marker=markers.get(size, "o"), capsize=3,
                            label=f"{size} · {variant}")
        _token_axis(ax, panel["prompt_tokens"])
        _tps_axis(ax, panel["median"])
        ax.set_title(METRIC_TITLES[metric], fontsize=10)
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylabel("median throughput (tokens/s)")
        ax.grid(alpha=0.3)
    _legend(fig, ax)
    return _save(fig, title, caption, path)


def rounds_plot(
    trials: pd.DataFrame, sizes: Sequence[str], variants: Sequence[str], *, title: str, caption: str, path: Path
) -> Path:
    """Every timed trial's tok/s in round order, one small panel per size x metric, a line per variant, so drift
    (a trend) and noise (scatter) are visible.

    trials: size, variant, round, prefill_tps, gen_tps.
    """
    metrics = [m for m in ("prefill", "gen") if trials[f"{m}_tps"].notna().any()]
    fig = _figure(5.0 * len(metrics) + 0.5, 2.3 * len(sizes) + 1.2)
    colors = variant_colors(variants)
    axes = fig.subplots(len(sizes), len(metrics), squeeze=False)
    for row, size in enumerate(sizes):
        for col, metric in enumerate(metrics):
            ax = axes[row][col]
            cell = trials[trials["size"] == size]
            for variant, rows in cell.groupby("variant", sort=False):
                rows = rows.sort_values("round")
                ax.plot(rows["round"] + 1, rows[f"{metric}_tps"], marker="o", markersize=4, linewidth=1.2,
                        color=colors.get(variant, "gray"), label=variant)
            ax.set_title(f"{size} · {METRIC_TITLES[metric]}", fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel("tokens/s")
            _tps_axis(ax, cell[f"{metric}_tps"].dropna())
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
    _legend(fig, axes[0][0])
    return _save(fig, title, caption, path)


def depth_plot(
    depth: pd.DataFrame, sizes: Sequence[str], variants: Sequence[str], *, title: str, caption: str, path: Path
) -> Path:
    """Decode tok/s against KV depth: the median over rounds, with the IQR as a band; one panel per size.

    depth: size, variant, depth, gen_tps.
    """
    fig = _figure(max(6.0, 4.2 * len(sizes)), 4.4)
    colors = variant_colors(variants)
    for i, size in enumerate(sizes):
        ax = fig.add_subplot(1, len(sizes), i + 1)
        panel = depth[depth["size"] == size]
        for variant in variants:
            rows = panel[panel["variant"] == variant]
            if rows.empty:
                continue
            stats = rows.groupby("depth")["gen_tps"].quantile([0.25, 0.5, 0.75]).unstack()
            ax.plot(stats.index, stats[0.5], marker="o", color=colors[variant], label=variant)
            ax.fill_between(stats.index, stats[0.25], stats[0.75], color=colors[variant], alpha=0.2)
        _token_axis(ax, panel["depth"])
        _tps_axis(ax, panel["gen_tps"])
        ax.set_title(size, fontsize=10)
        ax.set_xlabel("KV cache depth (tokens)")
        ax.set_ylabel("decode throughput (tokens/s)")
        ax.grid(alpha=0.3)
    _legend(fig, ax)
    return _save(fig, title, caption, path)


def op_delta_plot(points: pd.DataFrame, *, title: str, caption: str, path: Path) -> Path:
    """Δ speed of each op variant against its op's reference variant, one horizontal bar per row of `points`, top
    to bottom, with 95% CI error bars and one color per op; a bar without a verdict of faster or slower is faint.

    points: label, op, ratio, low, high (speed ratios variant/reference, > 1 is faster), verdict.
    Bars grow from ratio 1 (Δ 0%); the axis is labelled in Δ% and turns logarithmic when the ratios span widely.
    """
    ops = list(dict.fromkeys(points["op"]))
    colors = variant_colors(ops)
    # A gap between ops groups each op's bars under its color.
    y = np.arange(len(points)) + 0.6 * np.array([ops.index(op) for op in points["op"]])
    fig = _figure(10.0, 0.28 * len(points) + 0.2 * len(ops) + 1.6)
    ax = fig.add_subplot()
    faint = ~_decided(points["verdict"])
    fills = [to_rgba(colors[op], 0.35 if dim else 1.0) for op, dim in zip(points["op"], faint, strict=True)]
    ax.barh(y, points["ratio"] - 1, left=1, height=0.75, color=fills, edgecolor=[colors[op] for op in points["op"]],
            xerr=[points["ratio"] - points["low"], points["high"] - points["ratio"]], capsize=2,
            error_kw={"elinewidth": 1.0, "ecolor": "#333333"})
    # Label beyond the end of the CI, so the number never sits on the error bar.
    for yi, ratio, low, high in zip(y, points["ratio"], points["low"], points["high"], strict=True):
        right = ratio >= 1
        ax.annotate(f"{(ratio - 1) * 100:+.1f}%", (high if right else low, yi), xytext=(3 if right else -3, 0),
                    textcoords="offset points", ha="left" if right else "right", va="center", fontsize=7)
    ax.axvline(1, color="#333333", linewidth=0.8)
    log = _ratio_axis(ax, pd.concat([points["low"], points["high"]]))
    ax.set_yticks(y, points["label"], fontsize=7)
    ax.set_ylim(y[-1] + 0.8, -0.8)  # top to bottom, without the empty rows autoscaling would add
    ax.set_xlabel("Δ speed vs the op's reference variant (%" + (", log scale of the speed ratio)" if log else ")"))
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=colors[op], label=op) for op in ops]
    handles.append(Patch(facecolor=to_rgba("#8C8C8C", 0.35), edgecolor="#8C8C8C", label="no verdict (CI includes 0)"))
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
    return _save(fig, title, caption, path)


def _decided(verdicts: pd.Series) -> np.ndarray:
    """Which rows have a verdict of faster or slower (their interval excludes 0)."""
    return verdicts.isin(["faster", "slower"]).to_numpy()


def _ratio_axis(ax: Axes, ratios: pd.Series) -> bool:
    """An x axis of speed ratios labelled as Δ%, with room beyond the extremes for the bars' labels; logarithmic
    (True) when they span widely, so 2x faster and 2x slower lie equally far from 0%."""
    low, high = min(ratios.min(), 1.0), max(ratios.max(), 1.0)
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
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _legend(fig: Figure, ax: Axes) -> None:
    """One legend for the figure, outside the panels, so it never hides a bar or a label."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right center", fontsize=8, frameon=False)


def _token_axis(ax: Axes, values: pd.Series) -> None:
    """A log2 axis of token counts, ticked at the measured values and labelled in plain numbers (2048, not 2^11)."""
    ticks = sorted(set(int(v) for v in values))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


def _tps_axis(ax: Axes, values: pd.Series) -> None:
    """A tok/s axis that never exaggerates a gap: linear from 0, so a 4% difference looks like 4% (autoscaling
    started pr18809's decode panels at 2.80 tok/s, and a gap inside the IQR filled the panel); logarithmic only when
    the values span more than LOG_SCALE_SPAN, where a linear axis would flatten the small sizes' bars."""
    positive = values[values > 0]
    if not positive.empty and positive.max() / positive.min() > LOG_SCALE_SPAN:
        ax.set_yscale("log")
    else:
        # Autoscaling left a margin of the narrow data range only; above a zero-based axis, caps and bands need more.
        ax.set_ylim(0, ax.get_ylim()[1] * 1.05)


def _save(fig: Figure, title: str, caption: str, path: Path) -> Path:
    fig.suptitle(title, fontsize=12)
    # The caption sits under the panels, where constrained layout leaves room for it; wrapped to the figure's
    # width (about 14 characters per inch at 8 pt), since a long device name would otherwise be cut off.
    fig.supxlabel(textwrap.fill(caption, width=int(fig.get_figwidth() * 14)), fontsize=8, color="#57606a")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path
