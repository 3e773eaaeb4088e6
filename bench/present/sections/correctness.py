"""Each variant's logits against the reference variant's: the proof that a faster path computes the same thing.
"""

from __future__ import annotations

from typing import Any

from ...analysis.study import Study, cell_labels, on, ordered_cells, ordered_workloads
from ..document import Block, Heading, Paragraph, Table


def correctness_section(study: Study) -> list[Block]:
    blocks: list[Block] = [Heading("Correctness")]
    if study.correctness.empty:
        return [*blocks, Paragraph("No correctness records in these results.")]
    blocks.append(Paragraph(
        "Each variant's logits against the reference variant's on the same prompt, teacher-forced along the "
        "reference's greedy tokens. A variant passes when max |Δlogit| ≤ atol and every decisive greedy token agrees."
    ))
    columns = ("Size", "Workload", "Variant", "Reference", "max |Δlogit|", "max rel", "Greedy agreement", "atol",
               "Result")
    for machine in study.machines:
        records = on(study.correctness, machine)
        if records.empty:
            continue
        labels = cell_labels(ordered_cells([records]))
        order = {cell: i for i, cell in enumerate(labels)}
        workloads = ordered_workloads([records])
        variant_rank = {v: i for i, v in enumerate(study.variants)}
        records = records.assign(
            _cell=[order[c] for c in zip(records["model_key"], records["size"], strict=True)],
            _workload=[workloads.index(w) for w in records["workload"]],
            _variant=[variant_rank.get(v, len(variant_rank)) for v in records["variant"]],
        ).sort_values(["_cell", "_workload", "_variant"], kind="stable")
        rows = tuple(_correctness_row(r, labels) for r in records.to_dict("records"))
        if len(study.machines) > 1:
            blocks.append(Heading(machine, 3))
        blocks.append(Table(columns, rows, frozenset({4, 5, 6, 7})))
    return blocks


def _correctness_row(r: dict[str, Any], labels: dict[tuple[str, str], str]) -> tuple[str, ...]:
    return (
        labels[(r["model_key"], r["size"])], r["workload"], r["variant"], r["reference"], f"{r['max_abs_err']:.3g}",
        f"{r['max_rel_err']:.3g}", f"{r['tokens_agree']}/{r['tokens_checked']}", f"{r['atol']:.3g}",
        "✓ passed" if r["passed"] else "✗ failed",
    )
