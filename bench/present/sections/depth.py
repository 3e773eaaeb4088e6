"""Decode speed against KV depth.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ...analysis.study import Study, cell_labels, labelled, on, ordered_cells, variants_in
from .. import plots
from ..document import Block, Figure, Heading, Paragraph, Table
from ..format import format_tps
from .context import machine_suffix, plot_caption


def depth_section(study: Study, out_dir: Path) -> list[Block]:
    if study.depth.empty:
        return []
    blocks: list[Block] = [Heading("Decode speed vs KV depth"), Paragraph(
        "Each round prefills one long prompt, stopping at every KV depth to time the decode steps that follow "
        "there: median decode tokens/s over rounds, IQR shaded. Each model has one curve, recorded with its first "
        "workload: the KV depth, not the workload's prompt, sets the context here."
    )]
    for machine in study.machines:
        depth = on(study.depth, machine)
        if depth.empty:
            continue
        # gen_tokens of a depth record is the decode steps timed at each depth (the workload's gen_tokens - 1).
        for (batch, steps), rows in depth.groupby(["batch", "gen_tokens"], sort=True):
            blocks += _depth_group(study, machine, rows, int(batch), int(steps), out_dir)
    return blocks


def _depth_group(study: Study, machine: str, rows: pd.DataFrame, batch: int, steps: int, out_dir: Path) -> list[Block]:
    """The medians table and the curves of the depth records sharing a batch and a number of decode steps."""
    labels = cell_labels(ordered_cells([rows]))
    variants = variants_in(study, rows)
    where = f"{steps} decode steps per depth, batch {batch}"
    where += "" if len(study.machines) == 1 else f" · {machine}"
    medians = rows.groupby(["model_key", "depth", "variant"])["gen_tps"].median()
    table_rows = tuple(
        (label, f"{depth:,}", *(format_tps(medians.get((cell[0], depth, v), math.nan)) for v in variants))
        for cell, label in labels.items()
        for depth in sorted(rows.loc[rows["model_key"] == cell[0], "depth"].unique())
    )
    rounds = rows.groupby(["model_key", "variant"])["round"].nunique().max()
    name = f"depth-{steps}steps-b{batch}{machine_suffix(study, machine)}.png"
    title = f"Decode throughput vs KV depth · {steps} steps per depth, b{batch}"
    path = plots.depth_plot(labelled(rows, labels), list(labels.values()), variants, title=title,
                            caption=plot_caption(study, machine), path=out_dir / name)
    return [
        Heading(where, 3),
        Paragraph(f"Timed at each depth: {steps} decode steps (batch {batch}), in {rounds} round(s); median tokens/s."),
        Table(("Size", "KV depth", *variants), table_rows, frozenset(range(1, 2 + len(variants)))),
        Figure(path, f"{title} (median over rounds, IQR band)"),
    ]
