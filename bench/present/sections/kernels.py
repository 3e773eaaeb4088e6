"""Which kernels really ran: each probed op's fused kernel or its fallback, and what mx.compile made
of each variant."""

from __future__ import annotations

import pandas as pd

from models.registry import REGISTRY

from ...analysis.study import Study, cell_labels, on, ops_changes, ordered_cells
from ..document import Block, Heading, Paragraph
from ..kernels import compile_note, kernel_table, probe_facts, summarize_probes
from . import ReportContext


def kernel_section(context: ReportContext) -> list[Block]:
    """Per model: one sentence per fused-kernel probe, and the kernel count of every variant of the
    ops the comparisons change."""
    study, comparisons = context.study, context.comparisons
    if study.kernels.empty:
        return []
    changed = {op for pair in comparisons for op in ops_changes(study, *pair)} or set(
        study.kernels["op"]
    )
    blocks: list[Block] = [
        Heading("Kernels"),
        Paragraph(
            " ".join(
                [
                    "An A/B of a fused path means something only if the fused kernel runs.",
                    *(spec.probe_doc for spec in REGISTRY.values() if spec.probe_doc),
                    "For each variant of each op the comparisons change, the kernels in its graph "
                    "after mx.compile, at one representative shape (views left out).",
                ]
            )
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
                Paragraph(summarize_probes(mine)),
            ]
            if graphs:
                blocks.append(kernel_table(graphs))
                if note := compile_note(graphs):
                    blocks.append(Paragraph(note))
    return blocks


def probe_note(study: Study, machine: str, workload: str, pair: tuple[str, str]) -> str | None:
    """The sentences beside a comparison that switches a probed op: whether its fused kernel ran
    here, and, where it fell back everywhere, what the Δ then measures (the op's declaration
    says)."""
    if study.kernels.empty:
        return None
    facts = _unique(on(study.kernels, machine, workload))
    notes = []
    for op in ops_changes(study, *pair):
        probes = probe_facts(facts, op)
        if probes:
            fell_back = all(f["status"] != "fused" for f in probes)
            meaning = REGISTRY[op].fallback_note if fell_back and op in REGISTRY else ""
            notes.append(" ".join([f"Kernels: {summarize_probes(probes)}.", meaning]).strip())
    return " ".join(notes) or None


def _unique(facts: pd.DataFrame) -> list[dict]:
    """One fact per op, variant and shape (every cell and round of a run repeats them)."""
    if facts.empty:
        return []
    return facts.drop_duplicates(["op", "variant", "probe", "shape_label"]).to_dict("records")
