"""Each variant's logits against the reference variant's: the proof that a faster path computes the
same thing."""

from __future__ import annotations

from ...analysis.study import (
    CorrectnessCheck,
    cell_labels,
    correctness_checks,
    on,
    ordered_cells,
    ordered_workloads,
)
from ..document import Block, Heading, Paragraph, Table
from . import ReportContext

COLUMNS = (
    "Size",
    "Workload",
    "Variant",
    "Reference",
    "max |Δlogit|",
    "max rel",
    "Greedy agreement",
    "atol",
    "Result",
)


def correctness_section(context: ReportContext) -> list[Block]:
    study = context.study
    if not study.has_trials:
        return []
    blocks: list[Block] = [Heading("Correctness")]
    if study.correctness.empty:
        return [*blocks, Paragraph("No correctness records in these results.")]
    blocks.append(
        Paragraph(
            "Each variant's logits against the reference variant's on the same prompt, "
            "teacher-forced along the reference's greedy tokens. A variant passes when max "
            "|Δlogit| ≤ atol and every decisive greedy token agrees."
        )
    )
    for machine in study.machines:
        records = on(study.correctness, machine)
        if records.empty:
            continue
        labels = cell_labels(ordered_cells([records]))
        cells, workloads = list(labels), ordered_workloads([records])
        variants = {v: i for i, v in enumerate(study.variants)}
        checks = sorted(
            correctness_checks(records),
            key=lambda c: (
                cells.index((c.model_key, c.size)),
                workloads.index(c.workload),
                variants.get(c.variant, len(variants)),
            ),
        )
        if len(study.machines) > 1:
            blocks.append(Heading(machine, 3))
        blocks.append(
            Table(COLUMNS, tuple(_row(c, labels) for c in checks), frozenset({4, 5, 6, 7}))
        )
    return blocks


def _row(c: CorrectnessCheck, labels: dict[tuple[str, str], str]) -> tuple[str, ...]:
    return (
        labels[(c.model_key, c.size)],
        c.workload,
        c.variant,
        c.reference,
        f"{c.max_abs_err:.3g}",
        f"{c.max_rel_err:.3g}",
        f"{c.tokens_agree}/{c.tokens_checked}",
        f"{c.atol:.3g}",
        "✓ passed" if c.passed else "✗ failed",
    )
