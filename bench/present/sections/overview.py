"""The report's opening: its title, the answer (a sentence per comparison), and what the results
hold."""

from __future__ import annotations

from ...analysis.study import on, ordered_workloads
from ..bottom_line import bottom_lines
from ..document import Block, Heading, Paragraph
from . import ReportContext


def title_section(context: ReportContext) -> list[Block]:
    return [Heading(f"fusebench report: {context.study.name}", 1)]


def bottom_line_section(context: ReportContext) -> list[Block]:
    """The answer, before anything else: a sentence per comparison, machine and workload."""
    study = context.study
    blocks: list[Block] = []
    for machine in study.machines:
        for workload in ordered_workloads([on(study.timed, machine)]):
            lines = bottom_lines(study, machine, workload, context.comparisons)
            if lines:
                blocks += [
                    Heading(f"Bottom line: {workload} on {machine}", 2),
                    *map(Paragraph, lines),
                ]
    return blocks


def overview_section(context: ReportContext) -> list[Block]:
    """Which files, runs, machines, trials, op samples and variants the report is drawn from."""
    study, sources = context.study, context.sources
    measured = [f"{len(study.timed)} timed trials"] if study.has_trials else []
    if study.op_summaries:
        cases = {(s.run_id, s.op, s.shape_label) for s in study.op_summaries}
        ops = dict.fromkeys(s.op for s in study.op_summaries)
        measured.append(
            f"{len(study.results.of_kind('op'))} op samples "
            f"({len(cases)} shapes of {', '.join(ops)})"
        )
    text = (
        f"From {len(sources) or '?'} results file(s) "
        f"({', '.join(str(s) for s in sources) or 'in memory'}): {len(study.runs)} run(s) "
        f"on {len(study.machines)} machine(s), {', '.join(measured)}"
    )
    text += f", variants {', '.join(study.variants)}." if study.variants else "."
    if study.results.corrupt_lines:
        text += f" {len(study.results.corrupt_lines)} corrupt line(s) were skipped (see Warnings)."
    return [Paragraph(text)]
