"""The table `fusebench run` prints when it ends: medians per size, metric and variant, each
comparison's Δ, and beside it the change of its peak memory in that phase."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from ..analysis.memory import phase_peaks
from ..analysis.study import (
    Study,
    build_study,
    compare_scope,
    failed_correctness,
    on,
    ordered_workloads,
    resolve_comparisons,
)
from ..core.results import Results
from .bottom_line import bottom_lines
from .document import Heading, Paragraph, Table, to_console
from .sections.context import time_line
from .sections.delta import delta_cells
from .sections.memory import peak_change_text
from .sections.throughput import median_rows


def print_summary(
    console: Console, results: Results, comparisons: list[tuple[str, str]] | None = None
) -> None:
    """A compact table for the end of `fusebench run`: medians per size x metric x variant, then
    each comparison's Δ with its CI and verdict (the same numbers the report shows)."""
    study = build_study(results)
    if study.timed.empty and study.closed.empty:
        console.print("no trials recorded")
        return
    pairs = (
        list(comparisons)
        if comparisons
        else (resolve_comparisons((), study) if study.variants else [])
    )
    for machine in study.machines:
        for workload in ordered_workloads([on(study.timed, machine), on(study.closed, machine)]):
            where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
            answers = [Paragraph(line) for line in bottom_lines(study, machine, workload, pairs)]
            to_console(
                [Heading(where, 3), *answers, run_summary_table(study, machine, workload, pairs)],
                console,
            )
    for spent in results.time_spent():
        console.print(time_line(spent), highlight=False)


def run_summary_table(
    study: Study, machine: str, workload: str, pairs: Sequence[tuple[str, str]]
) -> Table:
    # Geometric means, as the Δ columns' Baseline and New: each Δ then reads off the variant
    # columns.
    variants, rows = median_rows(study, machine, workload, geometric=True, with_cv=False)
    failing = failed_correctness(study, machine, workload)
    peaks = [p for p in phase_peaks(study.timed) if (p.machine, p.workload) == (machine, workload)]
    scoped = {pair: compare_scope(study, machine, workload, pair, family=pairs) for pair in pairs}
    table_rows = []
    for row in rows:
        deltas = []
        for (baseline, new), comparison in scoped.items():
            match = next(
                (c for c in comparison if (c.model_key, c.metric) == (row.cell[0], row.metric)),
                None,
            )
            if match is None:
                deltas.append("—")
                continue
            failed = [v for v in dict.fromkeys((baseline, new)) if (row.cell[0], v) in failing]
            shown = delta_cells(match, failed, new)
            deltas.append(
                " ".join(
                    part for part in (shown.delta, shown.interval, shown.verdict) if part != "—"
                )
            )
        mine = [p for p in peaks if (p.model_key, p.metric) == (row.cell[0], row.metric)]
        base = {p.variant: p for p in mine}
        changes = [peak_change_text(mine, base.get(b), n) for b, n in pairs] if peaks else []
        table_rows.append((row.label, row.metric, *row.values, *deltas, *changes))
    columns = (
        "Size",
        "Metric",
        *variants,
        *(f"Δ {new} vs {baseline}" for baseline, new in pairs),
        *((f"Peak Δ {new}" for _, new in pairs) if peaks else ()),
    )
    return Table(columns, tuple(table_rows), frozenset(range(2, 2 + len(variants))))
