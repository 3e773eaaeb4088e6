"""Which kernels really ran: each probed op's fused kernel or its fallback, and what mx.compile made
of each variant."""

from __future__ import annotations

from fusebench.models.registry import REGISTRY

from ...analysis.study import Study, cell_labels, ops_changes, size_order
from ...core.cell import KernelFact, SiteCalls
from ...core.fileformat import KernelRecord
from ..document import Block, Heading, Paragraph
from ..kernels import (
    compile_note,
    graph_facts,
    kernel_table,
    probe_facts,
    summarize_probes,
    switched_sentence,
)
from . import ReportContext


def kernel_section(context: ReportContext) -> list[Block]:
    """Per model: one sentence per fused-kernel probe, and the kernel count of every variant of the
    ops the comparisons change."""
    study, comparisons = context.study, context.comparisons
    if not study.kernels:
        return []
    changed = {op for pair in comparisons for op in ops_changes(study, *pair)} or {
        k.fact.op for k in study.kernels
    }
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
        records = [k for k in study.kernels if k.machine == machine]
        labels = cell_labels(size_order((k.model_key, k.size) for k in records))
        for (key, _size), label in labels.items():
            mine = _unique([k for k in records if k.model_key == key])
            graphs = [f for f in graph_facts(mine) if f.op in changed]
            sites = _sites(study, machine, key)
            blocks += [
                Heading(label + ("" if len(study.machines) == 1 else f" · {machine}"), 3),
                *([Paragraph(switched_sentence(sites))] if sites else []),
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
    facts = _unique([k for k in study.kernels if (k.machine, k.workload) == (machine, workload)])
    notes = []
    for op in ops_changes(study, *pair) if facts else []:
        probes = probe_facts(facts, op)
        if probes:
            fell_back = all(f.status != "fused" for f in probes)
            meaning = REGISTRY[op].fallback_note if fell_back and op in REGISTRY else ""
            notes.append(" ".join([f"Kernels: {summarize_probes(probes)}.", meaning]).strip())
    return " ".join(notes) or None


def _sites(study: Study, machine: str, model_key: str) -> list[SiteCalls]:
    """The model's switched names, once each (every cell records them), at the first workload."""
    mine = [s for s in study.sites if (s.machine, s.model_key) == (machine, model_key)]
    first = mine[0].workload if mine else None
    return list(dict.fromkeys(s.site for s in mine if s.workload == first))


def _unique(records: list[KernelRecord]) -> list[KernelFact]:
    """One fact per op, variant, probe and shape (every cell and round of a run repeats them)."""
    found: dict[tuple[str, str, str, str], KernelFact] = {}
    for record in records:
        fact = record.fact
        found.setdefault((fact.op, fact.variant, fact.probe, fact.shape_label), fact)
    return list(found.values())
