"""`fusebench report`: the report built once as blocks, then written as report.md, report.html and
summary.csv with its plots, into `reports/<experiment>/`.

Results files merge (shards of a suite, or one suite on several machines); one table is drawn per
machine x comparison x workload, so machines and workloads are never pooled into one median. Every
number comes from fusebench.analysis, which `fusebench check` uses too.

The report is SECTIONS, in order: each a Section (fusebench.present.sections) taking the one
ReportContext. A new section is a function of that context, registered here by one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..analysis.reference import Reference
from ..analysis.study import Study
from .deltas_csv import deltas_frame
from .document import Block, Figure, to_html, to_markdown
from .sections import ReportContext, Section
from .sections.builds import builds_section
from .sections.correctness import correctness_section
from .sections.delta import deltas_section, method_section
from .sections.depth import depth_section
from .sections.fusions import fusions_section
from .sections.kernels import kernel_section
from .sections.latency import latency_section
from .sections.memory import memory_section
from .sections.ops import op_section
from .sections.overview import bottom_line_section, overview_section, title_section
from .sections.projection import projection_section
from .sections.roofline import roofline_section
from .sections.shares import shares_section
from .sections.throughput import rounds_section, throughput_section
from .sections.warnings import warnings_section
from .summary_csv import summary_csv


@dataclass(frozen=True)
class Registered:
    section: Section
    on_terminal: bool = False  # `fusebench report` prints its blocks too


SECTIONS = (
    Registered(title_section),
    Registered(bottom_line_section, on_terminal=True),
    Registered(overview_section),
    Registered(deltas_section, on_terminal=True),
    Registered(shares_section),
    Registered(projection_section, on_terminal=True),
    Registered(builds_section),
    Registered(warnings_section),  # lists the warnings of the sections above it
    Registered(correctness_section),
    Registered(throughput_section),
    Registered(rounds_section),
    Registered(latency_section),
    Registered(memory_section),
    Registered(kernel_section),
    Registered(roofline_section),
    Registered(depth_section),
    Registered(op_section, on_terminal=True),
    Registered(fusions_section),
    Registered(method_section),
)


@dataclass
class Report:
    # what the terminal shows: the bottom line, the delta and op tables
    terminal_blocks: list[Block]
    warnings: list[str]
    files: list[Path]


def write_report(
    study: Study,
    comparisons: Sequence[tuple[str, str]],
    out_dir: Path,
    reference: Reference | None = None,
    sources: Sequence[str | Path] = (),
) -> Report:
    """Write report.md, report.html, summary.csv, deltas.csv (with comparisons) and the PNGs into
    out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    corrupt = study.results.corrupt_lines
    context = ReportContext(
        study,
        list(comparisons),
        out_dir,
        reference,
        sources,
        warnings=[
            *([f"{len(corrupt)} corrupt line(s) skipped: {', '.join(corrupt)}"] if corrupt else []),
            *study.unread_experiments,
        ],
    )
    built = [(entry, entry.section(context)) for entry in SECTIONS]
    blocks = [block for _, section in built for block in section]
    files = [out_dir / "report.md", out_dir / "report.html", out_dir / "summary.csv"]
    files[0].write_text(to_markdown(blocks, out_dir), encoding="utf-8")
    files[1].write_text(to_html(blocks, f"fusebench report: {study.name}"), encoding="utf-8")
    summary_csv(study).to_csv(files[2], index=False)
    if study.has_trials and comparisons:
        files.append(out_dir / "deltas.csv")
        deltas_frame(study, comparisons).to_csv(files[-1], index=False)
    files += [b.path for b in blocks if isinstance(b, Figure)]
    terminal = [block for entry, section in built if entry.on_terminal for block in section]
    return Report(terminal, context.warnings, files)
