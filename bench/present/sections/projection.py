"""At full depth (projected): each comparison's Δ projected from the depths a model was measured at,
beside the measured tables. Only for results with some preset at several depths
(`layers: [2, 4, 6, 8]`)."""

from __future__ import annotations

from ...analysis.projection import ProjectionError, has_several_depths, project
from ..document import Block, Heading, Paragraph
from ..projection import delta_table, method_line
from . import ReportContext


def projection_section(context: ReportContext) -> list[Block]:
    study, comparisons = context.study, context.comparisons
    if not has_several_depths(study):
        return []
    heading = Heading("At full depth (projected)")
    try:
        projection = project(study, comparisons)
    except ProjectionError as err:
        return [heading, Paragraph(f"Not projected: {err}")]
    blocks: list[Block] = [
        heading,
        Paragraph(
            method_line(projection)
            + " Per-layer costs, tok/s and held-out checks: `fusebench project`."
        ),
    ]
    for machine, workload in dict.fromkeys(
        (d.scope.machine, d.scope.workload) for d in projection.deltas
    ):
        deltas = [
            d
            for d in projection.deltas
            if (d.scope.machine, d.scope.workload) == (machine, workload)
        ]
        blocks += [Heading(f"{workload} · {machine}", 3), delta_table(deltas)]
    return blocks
