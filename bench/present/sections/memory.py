"""Peak memory per phase, beside each comparison's change."""

from __future__ import annotations

from ...analysis.memory import PhasePeak, peak_change, phase_peaks
from ..document import Block, Heading, Paragraph, Table
from ..format import format_bytes
from . import ReportContext

EXPLAINED = (
    "The highest memory MLX held in a prefill and in the decode steps (the prefill's KV cache "
    "still held), the median over each variant's timed trials; each comparison's change is new "
    "against baseline. A peak is nearly the same every trial, so no interval is given; a fusion "
    "that writes no intermediates shows here as a lower peak in the phase that runs it."
)


def memory_section(context: ReportContext) -> list[Block]:
    peaks = phase_peaks(context.study.timed)
    if not peaks:
        return []
    variants = list(dict.fromkeys(p.variant for p in peaks))
    columns = (
        "Size",
        "Phase",
        *variants,
        *(f"{new} vs {base}" for base, new in context.comparisons),
    )
    rows = []
    for cell in dict.fromkeys((p.machine, p.workload, p.model_key, p.metric) for p in peaks):
        mine = {
            p.variant: p for p in peaks if (p.machine, p.workload, p.model_key, p.metric) == cell
        }
        first = next(iter(mine.values()))
        rows.append(
            (
                first.size if len(context.study.machines) == 1 else f"{first.size} · {cell[0]}",
                "prefill" if first.metric == "prefill" else "decode",
                *(format_bytes(int(mine[v].bytes)) if v in mine else "—" for v in variants),
                *(
                    peak_change_text(peaks, mine.get(base), new)
                    for base, new in context.comparisons
                ),
            )
        )
    numeric = frozenset(range(2, len(columns)))
    return [Heading("Peak memory"), Paragraph(EXPLAINED), Table(columns, tuple(rows), numeric)]


def peak_change_text(peaks: list[PhasePeak], base: PhasePeak | None, new: str) -> str:
    """The new variant's peak against `base`'s, "+1.2%"; "—" where either recorded none."""
    change = None if base is None else peak_change(peaks, base, new)
    return "—" if change is None else f"{100 * change:+.1f}%"
