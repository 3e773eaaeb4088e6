"""Decode speed against KV depth."""

from __future__ import annotations

from pathlib import Path

from ...analysis.study import DepthGroup, Study, cell_labels, depth_groups
from .. import plots
from ..document import Block, Figure, Heading, Paragraph, Table
from ..format import format_tps
from . import ReportContext
from .context import machine_suffix, plot_caption


def depth_section(context: ReportContext) -> list[Block]:
    study = context.study
    if study.depth.empty:
        return []
    blocks: list[Block] = [
        Heading("Decode speed vs KV depth"),
        Paragraph(
            "Each round prefills one long prompt, stopping at every KV depth to time the decode "
            "steps that follow there: median decode tokens/s over rounds, IQR shaded. Each model "
            "has one curve, recorded with its first workload: the KV depth, not the workload's "
            "prompt, sets the context here."
        ),
    ]
    for machine in study.machines:
        for group in depth_groups(study, machine):
            blocks += _depth_group(study, machine, group, context.out_dir)
    return blocks


def _depth_group(study: Study, machine: str, group: DepthGroup, out_dir: Path) -> list[Block]:
    """The medians table and the curves of the depth records sharing a batch and a number of decode
    steps."""
    labels = cell_labels(group.cells)
    steps, batch, variants = group.steps, group.batch, group.variants
    where = f"{steps} decode steps per depth, batch {batch}"
    where += "" if len(study.machines) == 1 else f" · {machine}"
    table_rows = tuple(
        (label, f"{depth:,}", *(format_tps(group.median(cell[0], depth, v)) for v in variants))
        for cell, label in labels.items()
        for depth in group.depths(cell[0])
    )
    points = [
        plots.DepthPoint(labels[(s.model_key, s.size)], s.variant, s.depth, s.gen_tps)
        for s in group.samples
    ]
    name = f"depth-{steps}steps-b{batch}{machine_suffix(study, machine)}.png"
    title = f"Decode throughput vs KV depth · {steps} steps per depth, b{batch}"
    path = plots.depth_plot(
        points,
        list(labels.values()),
        variants,
        title=title,
        caption=plot_caption(study, machine),
        path=out_dir / name,
    )
    return [
        Heading(where, 3),
        Paragraph(
            f"Timed at each depth: {steps} decode steps (batch "
            f"{batch}), in {group.rounds} round(s); median tokens/s."
        ),
        Table(("Size", "KV depth", *variants), table_rows, frozenset(range(1, 2 + len(variants)))),
        Figure(path, f"{title} (median over rounds, IQR band)"),
    ]
