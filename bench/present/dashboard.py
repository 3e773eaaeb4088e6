"""The history as a static site: one page, per machine a panel per experiment, cell and metric, each
series over commits with its 95% intervals, steps and single-run spikes marked, every point a link
to its run's report. No server and no script: the plots are inline SVG (matplotlib), their points
links, so the page opens from a folder, an artifact or a branch served as-is.

One machine is never drawn with another: each machine has its own panels, its own rates and Δs.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..analysis.history import Drift, HistorySeries, SeriesKey
from ..core.history import Series
from ..core.text import short_commit
from .document import CSS, Paragraph, html_block
from .history import drift_table, spike_sentence, step_table

# A run's report, relative to the page, when the run's results file could be reported.
RunLink = Callable[[str], str | None]


@dataclass(frozen=True)
class Panel:
    """The series of one machine, experiment, cell and metric: rates above, Δs below."""

    machine: str
    experiment: str
    size: str
    workload: str
    metric: str
    series: tuple[HistorySeries, ...]

    @property
    def title(self) -> str:
        return f"{self.experiment} · {self.size} · {self.workload} · {self.metric}"


def panels(series: Sequence[HistorySeries]) -> list[Panel]:
    grouped: dict[tuple[str, str, str, str, str], list[HistorySeries]] = {}
    for s in series:
        k = s.key
        grouped.setdefault(
            (k.machine_label, k.experiment, k.of.size, k.of.workload, k.of.metric), []
        ).append(s)
    return [Panel(*key, tuple(mine)) for key, mine in grouped.items()]


def dashboard_html(series: Sequence[HistorySeries], drifts: Sequence[Drift], link: RunLink) -> str:
    body = [f"<h1>fusebench history</h1><p>{_summary(series)}</p>"]
    for machine in dict.fromkeys(s.key.machine_label for s in series):
        mine = [s for s in series if s.key.machine_label == machine]
        body.append(f'<section class="machine"><h2>{html.escape(machine)}</h2>')
        if stepped := [s for s in mine if s.steps.steps]:
            body.append(html_block(step_table(stepped)))
        else:
            body.append("<p>No step in any series.</p>")
        if spiked := [s for s in mine if s.steps.spikes]:
            body.append(html_block(Paragraph(spike_sentence(spiked))))
        if here := [d for d in drifts if d.key.machine_label == machine]:
            body.append("<h3>Drift since the anchor</h3>" + html_block(drift_table(here)))
        for panel in panels(mine):
            body.append(
                f'<figure class="panel"><figcaption>{html.escape(panel.title)}</figcaption>'
                f"{panel_svg(panel, link)}</figure>"
            )
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>fusebench history</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _summary(series: Sequence[HistorySeries]) -> str:
    commits = {p.commit for s in series for p in s.points}
    machines = {s.key.machine for s in series}
    return html.escape(
        f"{len(commits)} commit(s) on {len(machines)} machine(s), {len(series)} series. Each point "
        "is one commit's runs with a 95% interval; a dashed line marks a step (a level that moved "
        "and stayed, analysis.changepoints), a hollow marker a single-run spike set aside. Click a "
        "point for its run's report."
    )


def panel_svg(panel: Panel, link: RunLink) -> str:
    rates = [s for s in panel.series if s.key.of.series == Series.RATE]
    deltas = [s for s in panel.series if s.key.of.series != Series.RATE]
    commits = list(dict.fromkeys(p.commit for s in panel.series for p in s.points))
    rows = [group for group in (rates, deltas) if group]
    figure = Figure(figsize=(9.5, 2.6 * len(rows)))
    axes = figure.subplots(len(rows), 1, sharex=True, squeeze=False)[:, 0]
    for ax, group in zip(axes, rows, strict=True):
        for s in group:
            _draw(ax, s, commits, link)
        ax.set_ylabel("tok/s" if group is rates else "Δ %")
        if group is deltas:
            ax.axhline(0.0, color="#999999", linewidth=0.8)
        ax.legend(fontsize=7, loc="best")
        ax.grid(alpha=0.3)
    axes[-1].set_xticks(range(len(commits)), [short_commit(c)[:7] for c in commits], rotation=45)
    figure.tight_layout()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]


def _draw(ax: Axes, s: HistorySeries, commits: list[str], link: RunLink) -> None:
    x = [commits.index(p.commit) for p in s.points]
    y = [p.value for p in s.points]
    errors = [[p.value - p.low for p in s.points], [p.high - p.value for p in s.points]]
    bars = ax.errorbar(x, y, yerr=_finite(errors), capsize=2, linewidth=1, label=_label(s.key))
    color = bars.lines[0].get_color()
    dots = ax.scatter(x, y, s=18, color=color, zorder=3)
    dots.set_urls([link(p.run_ids[-1]) for p in s.points])
    spikes = s.steps.spikes
    if spikes:
        ax.scatter([x[i] for i in spikes], [y[i] for i in spikes], s=70, facecolors="none",
                   edgecolors="#d1242f", zorder=4)  # fmt: skip
    for step in s.steps.steps:
        ax.axvline(x[step.index] - 0.5, color=color, linestyle="--", linewidth=1)


def _finite(errors: list[list[float]]) -> list[list[float]]:
    """Unbounded intervals drawn as none (their point still shows)."""
    return [[e if e == e and abs(e) != float("inf") else 0.0 for e in side] for side in errors]


def _label(key: SeriesKey) -> str:
    of = key.of
    if of.series == Series.RATE:
        return of.name
    return of.name if of.series == Series.COMPARISON else f"{of.name} {key.since}"
