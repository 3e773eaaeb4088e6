"""Throughput per variant: medians with their spread, tok/s against prompt length, and every trial
in round order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...analysis import stats
from ...analysis.study import (
    Study,
    cell_infos,
    cell_labels,
    closed_reason,
    on,
    optional_medians,
    ordered_cells,
    ordered_workloads,
    prompt_sweeps,
    variants_in,
)
from .. import plots
from ..document import Block, Figure, Heading, Paragraph, Table
from ..format import format_tps
from . import ReportContext
from .context import machine_suffix, plot_caption, slug

# mlx_lm.benchmark's prompt_tps: prompt tokens over stream_generate's time to first token, which
# takes in queuing the first decode step (on the CPU backend, running its head; see
# bench/measure/worker.py).
TTFT_METRIC = "prefill as mlx-lm reports it (TTFT)"


@dataclass(frozen=True)
class MedianRow:
    """One row of the medians table: a cell and metric (or, for a cell with no trials, the reason in
    its place)."""

    cell: tuple[str, str]  # (model_key, size)
    label: str
    metric: str
    values: tuple[str, ...]  # per variant


def median_rows(
    study: Study, machine: str, workload: str, *, geometric: bool = False, with_cv: bool = True
) -> tuple[list[str], list[MedianRow]]:
    """The variants measured, and tok/s per size x metric x variant: the median of the timed rounds
    (or, `geometric`, their geometric mean, which the delta tables use), with the CV unless
    `with_cv` is False."""
    timed, closed = on(study.timed, machine, workload), on(study.closed, machine, workload)
    summaries = stats.summaries(timed)
    cells = ordered_cells([timed, closed])
    labels = cell_labels(cells)
    variants = variants_in(study, timed) if not timed.empty else []
    rows = []
    for cell in cells:
        mine = [s for s in summaries if s.model_key == cell[0]]
        if not mine:
            # The reason sits in the Metric column, so it shows even when no variant has a column.
            reason = closed_reason(closed, cell[0]) or "no trials"
            rows.append(MedianRow(cell, labels[cell], reason, ("—",) * len(variants)))
            continue
        for metric in stats.METRICS:
            by_variant = {s.variant: s.summary for s in mine if s.metric == metric}
            if not by_variant:
                continue
            values = tuple(
                _median_cell(by_variant[v], geometric, with_cv) if v in by_variant else "—"
                for v in variants
            )
            rows.append(MedianRow(cell, labels[cell], metric, values))
    return variants, rows


def medians_table(study: Study, machine: str, workload: str) -> Table:
    """Median tok/s per size x metric x variant, with the CV; under prefill, the TTFT rate where
    trials carry it."""
    variants, rows = median_rows(study, machine, workload)
    ttft = optional_medians(on(study.timed, machine, workload), "ttft_tps")
    body = []
    for r in rows:
        body.append((r.label, r.metric, *r.values))
        if r.metric == "prefill" and any((r.cell[0], v) in ttft for v in variants):
            values = (
                format_tps(ttft[(r.cell[0], v)]) if (r.cell[0], v) in ttft else "—"
                for v in variants
            )
            body.append((r.label, TTFT_METRIC, *values))
    return Table(("Size", "Metric", *variants), tuple(body), frozenset(range(2, 2 + len(variants))))


def _median_cell(summary: stats.Summary, geometric: bool, with_cv: bool) -> str:
    value = format_tps(summary.gmean if geometric else summary.median)
    return f"{value} (CV {summary.cv:.1%})" if with_cv else value


def throughput_section(context: ReportContext) -> list[Block]:
    study, out_dir = context.study, context.out_dir
    if not study.has_trials:
        return []
    blocks: list[Block] = [
        Heading("Throughput"),
        Paragraph(
            "Median tokens/s of the timed rounds (warmups excluded) with the coefficient of "
            "variation; summary.csv holds the quartiles and n. Where the trials recorded it, "
            "a row under prefill gives the prompt rate as mlx-lm's stream_generate reports it "
            "(mlx_lm.benchmark's prompt_tps): prompt tokens over its time to the first token, "
            "which also takes in queuing the first decode step (on the CPU backend, "
            "running all of it but its last ~100 kernels), so this rate is a little lower than "
            "prefill's, which stops at the first token."
        ),
    ]
    for machine in study.machines:
        for workload in ordered_workloads([on(study.timed, machine), on(study.closed, machine)]):
            timed = on(study.timed, machine, workload)
            where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
            blocks += [Heading(where, 3), medians_table(study, machine, workload)]
            if timed.empty:
                continue
            labels = cell_labels(ordered_cells([timed]))
            name = f"throughput-{slug(workload)}{machine_suffix(study, machine)}.png"
            title = f"Throughput per variant · {workload}"
            path = plots.throughput_plot(
                _spreads(timed, labels),
                list(labels.values()),
                variants_in(study, timed),
                title=title,
                caption=plot_caption(study, machine),
                path=out_dir / name,
            )
            blocks.append(Figure(path, f"{title} (median, IQR whiskers)"))
        blocks += _prompt_sweep(study, machine, out_dir)
    return blocks


def _spreads(
    trials: pd.DataFrame, labels: dict[tuple[str, str], str], prompts: dict[str, int] | None = None
) -> list[plots.Spread]:
    """The median and quartiles of each cell, metric and variant, placed at its row label (and
    prompt length)."""
    return [
        plots.Spread(
            labels[(s.model_key, s.size)],
            s.metric,
            s.variant,
            s.summary.median,
            s.summary.q1,
            s.summary.q3,
            (prompts or {}).get(s.workload, 0),
        )
        for s in stats.summaries(trials)
    ]


def _prompt_sweep(study: Study, machine: str, out_dir: Path) -> list[Block]:
    """tok/s against prompt length, for each gen/batch setting whose prompt length the experiment
    sweeps."""
    blocks: list[Block] = []
    for gen, batch, trials in prompt_sweeps(on(study.timed, machine)):
        labels = cell_labels(ordered_cells([trials]))
        prompts = {cell.workload: cell.prompt_tokens for cell in cell_infos([trials])}
        name = f"prompt-sweep-tg{gen}-b{batch}{machine_suffix(study, machine)}.png"
        title = f"Throughput vs prompt length · tg{gen} b{batch}"
        path = plots.prompt_sweep_plot(
            _spreads(trials, labels, prompts),
            list(labels.values()),
            variants_in(study, trials),
            title=title,
            caption=plot_caption(study, machine),
            path=out_dir / name,
        )
        blocks.append(Figure(path, f"{title} (median, IQR bars)"))
    return blocks


def rounds_section(context: ReportContext) -> list[Block]:
    study = context.study
    if not study.has_trials:
        return []
    blocks: list[Block] = [
        Heading("Round by round"),
        Paragraph(
            "Every timed trial in round order: a trend is drift (thermal, background load), "
            "scatter is noise. Variants alternate order each round (ABBA), so drift lands on each "
            "alike."
        ),
    ]
    for machine in study.machines:
        for workload in ordered_workloads([on(study.timed, machine)]):
            timed = on(study.timed, machine, workload)
            labels = cell_labels(ordered_cells([timed]))
            points = [
                plots.TrialPoint(labels[(v.model_key, v.size)], v.variant, v.metric, v.round, v.tps)
                for v in stats.trial_values(timed)
            ]
            name = f"rounds-{slug(workload)}{machine_suffix(study, machine)}.png"
            title = f"Per-trial throughput in round order · {workload}"
            path = plots.rounds_plot(
                points,
                list(labels.values()),
                variants_in(study, timed),
                title=title,
                caption=plot_caption(study, machine),
                path=context.out_dir / name,
            )
            blocks.append(Figure(path, title))
    return blocks
