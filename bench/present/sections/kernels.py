"""Which kernels really ran: the fused SDPA kernel or its fallback, and what mx.compile made of each
variant."""

from __future__ import annotations

import pandas as pd

from ...analysis.study import Study, cell_labels, on, ops_changes, ordered_cells
from ..document import Block, Heading, Paragraph
from ..kernels import compile_note, kernel_table, summarize_attention
from . import ReportContext


def kernel_section(context: ReportContext) -> list[Block]:
    """Per model: one sentence on SDPA, and the kernel count of every variant of the ops the
    comparisons change."""
    study, comparisons = context.study, context.comparisons
    if study.kernels.empty:
        return []
    changed = {op for pair in comparisons for op in ops_changes(study, *pair)} or set(study.kernels["op"])
    blocks: list[Block] = [
        Heading("Kernels"),
        Paragraph(
            "An A/B of a fused path means something only if the fused kernel runs. For each attention shape, MLX was "
            "asked for its fused SDPA kernel (force_fused): fused, or fallback with MLX's reason. For each variant of "
            "each op the comparisons change, the kernels in its graph after mx.compile, at one representative shape "
            "(views left out)."
        ),
    ]
    for machine in study.machines:
        facts = on(study.kernels, machine)
        if facts.empty:
            continue
        labels = cell_labels(ordered_cells([facts]))
        for (key, _size), label in labels.items():
            mine = _unique(facts[facts["model_key"] == key])
            graphs = [f for f in mine if f["probe"] == "graph" and f["op"] in changed]
            blocks += [
                Heading(label + ("" if len(study.machines) == 1 else f" · {machine}"), 3),
                Paragraph(summarize_attention(mine)),
            ]
            if graphs:
                blocks.append(kernel_table(graphs))
                if note := compile_note(graphs):
                    blocks.append(Paragraph(note))
    return blocks


def attention_note(study: Study, machine: str, workload: str, pair: tuple[str, str]) -> str | None:
    """The sentence beside a comparison that switches attention when SDPA got no fused kernel
    here."""
    if "attention" not in ops_changes(study, *pair) or study.kernels.empty:
        return None
    facts = _unique(on(study.kernels, machine, workload))
    probes = [f for f in facts if f["op"] == "attention" and f["probe"] == "force_fused"]
    if not probes:
        return None
    summary = summarize_attention(probes)
    if all(f["status"] != "fused" for f in probes):
        return (
            f"Kernels: {summary}. This Δ measures the manual path (K/V repeated per query head, additive mask) "
            "against MLX's composed fallback, not against a fused kernel."
        )
    return f"Kernels: {summary}."


def _unique(facts: pd.DataFrame) -> list[dict]:
    """One fact per op, variant and shape (every cell and round of a run repeats them)."""
    if facts.empty:
        return []
    return facts.drop_duplicates(["op", "variant", "probe", "shape_label"]).to_dict("records")
