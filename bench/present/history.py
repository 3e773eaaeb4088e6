"""A history as blocks: per machine, the series whose level stepped, the single noisy runs set
aside, and the drift since each anchor."""

from __future__ import annotations

from collections.abc import Sequence

from ..analysis.history import Drift, HistorySeries
from ..core.text import short_commit
from .document import Block, Heading, Paragraph, Table


def history_blocks(series: Sequence[HistorySeries], drifts: Sequence[Drift]) -> list[Block]:
    if not series:
        return [Paragraph("The history holds no runs yet: `fusebench history add RESULTS.jsonl`.")]
    blocks: list[Block] = []
    for machine in dict.fromkeys(s.key.machine_label for s in series):
        mine = [s for s in series if s.key.machine_label == machine]
        commits = {p.commit for s in mine for p in s.points}
        blocks += [
            Heading(machine),
            Paragraph(
                f"{len(commits)} commit(s), {len(mine)} series "
                f"({sum(bool(s.steps.steps) for s in mine)} with a step)."
            ),
        ]
        if stepped := [s for s in mine if s.steps.steps]:
            blocks.append(step_table(stepped))
        if spiked := [s for s in mine if s.steps.spikes]:
            blocks.append(Paragraph(spike_sentence(spiked)))
        if here := [d for d in drifts if d.key.machine_label == machine]:
            blocks.append(drift_table(here))
    return blocks


def step_table(series: Sequence[HistorySeries]) -> Table:
    rows = []
    for s in series:
        for step in s.steps.steps:
            point = s.points[step.index]
            rows.append(
                (
                    s.key.experiment,
                    s.key.label,
                    short_commit(point.commit),
                    f"{step.shift_pct:+.1f}%",
                    f"[{step.low_pct:+.1f}, {step.high_pct:+.1f}]",
                )
            )
    columns = ("Experiment", "Series", "Stepped at", "Shift", "95% CI")
    return Table(columns, tuple(rows), frozenset({3, 4}))


def spike_sentence(series: Sequence[HistorySeries]) -> str:
    commits = sorted({short_commit(c) for s in series for c in s.spike_commits()})
    return (
        f"Single-run spikes set aside (not steps) in {len(series)} series, at commit(s) "
        f"{', '.join(commits)}: each run further than 3 SDs from the runs around it."
    )


def drift_table(drifts: Sequence[Drift], limit_pct: float | None = None) -> Table:
    columns = ("Experiment", "Series", "Latest", "Δ", "95% CI")
    rows = [
        (
            d.key.experiment,
            d.key.label,
            short_commit(d.latest.commit),
            f"{d.latest.value:+.1f}%",
            f"[{d.latest.low:+.1f}, {d.latest.high:+.1f}]",
            *([d.outcome(limit_pct)] if limit_pct is not None else []),
        )
        for d in drifts
    ]
    if limit_pct is not None:
        columns = (*columns, f"vs −{limit_pct:g}%")
    return Table(columns, tuple(rows), frozenset({3, 4}))
