"""Achieved prefill TFLOP/s and gen GB/s against the machine's peak."""

from __future__ import annotations

import math

import pandas as pd

from ...analysis.study import (
    AchievedRates,
    Study,
    cell_labels,
    has_roofline,
    on,
    ordered_cells,
    ordered_workloads,
    rooflines,
)
from ...core.fileformat import Column
from ...core.header import Peak
from ..document import Block, Bullets, Heading, Paragraph, Table
from ..format import format_rate
from . import ReportContext

ROOFLINE_MEANING = (
    "% of peak: prefill TFLOP/s (2 FLOPs per active parameter and prompt token, plus attention) "
    "against the matmul peak (fp32; bf16 for 16-bit models), gen GB/s (the bytes each decode step "
    "must move: active weights and KV cache) against the memory-read peak, so a fusion that saves "
    "memory traffic moves gen toward its roof."
)


def roofline_section(context: ReportContext) -> list[Block]:
    """Achieved prefill TFLOP/s and gen GB/s per cell and variant, with their share of the machine's
    peak."""
    study = context.study
    if not has_roofline(study.timed):
        return []
    blocks: list[Block] = [
        Heading("Roofline"),
        Paragraph(f"Medians of the timed trials. {ROOFLINE_MEANING}"),
    ]
    for machine in study.machines:
        timed = on(study.timed, machine)
        if timed.empty:
            continue
        suffix = "" if len(study.machines) == 1 else f" · {machine}"
        blocks.append(
            Bullets(tuple(f"Peak{suffix}: {describe_peak(peak)}" for peak in _peaks(study, timed)))
        )
        for workload in ordered_workloads([timed]):
            blocks += [
                Heading(f"{workload}{suffix}", 3),
                roofline_table(study, on(timed, machine, workload)),
            ]
    return blocks


def _peaks(study: Study, timed: pd.DataFrame) -> list[Peak | None]:
    """The distinct peaks the runs of these trials were held against (one, unless runs measured it
    apart)."""
    return list(
        dict.fromkeys(
            study.runs[run_id].peak if run_id in study.runs else None
            for run_id in dict.fromkeys(timed[Column.RUN_ID])
        )
    )


def describe_peak(peak: Peak | None) -> str:
    if not peak:
        return (
            "none known (a CPU run without a probe, or a device missing "
            "from the chip table): achieved rates only, no percentages"
        )
    figures = [
        f"{format_rate(value)} {unit}"
        for value, unit in (
            (peak.fp32_tflops, "TFLOP/s fp32"),
            (peak.bf16_tflops, "TFLOP/s bf16"),
            (peak.memory_gbps, "GB/s memory"),
        )
        if value
    ]
    return (
        f"{peak.name}: {', '.join(figures) or 'no figures'} "
        f"(source: {peak.source}; confidence: {peak.confidence or '?'})"
    )


def roofline_table(study: Study, timed: pd.DataFrame) -> Table:
    """Size | Variant | prefill TFLOP/s (% of peak) | gen GB/s (% of peak), for one machine and
    workload."""
    labels = cell_labels(ordered_cells([timed]))
    found = rooflines(timed)
    rows = []
    for cell, label in labels.items():
        for variant in (v for v in study.variants if (cell[0], v) in found):
            rows.append((label, variant, *_rates(found[(cell[0], variant)])))
    return Table(
        ("Size", "Variant", "Prefill TFLOP/s (% of peak)", "Gen GB/s (% of peak)"),
        tuple(rows),
        frozenset({2, 3}),
    )


def _rates(r: AchievedRates) -> tuple[str, str]:
    return (
        _with_percent(r.prefill_tflops, r.prefill_pct_of_peak, "prefill" in r.above_peak),
        _with_percent(r.gen_gbps, r.gen_pct_of_peak, "gen" in r.above_peak),
    )


def _with_percent(value: float, share: float, above_peak: bool) -> str:
    if math.isnan(value):
        return "—"
    if above_peak:
        return f"{format_rate(value)} (peak underestimated)"
    return format_rate(value) if math.isnan(share) else f"{format_rate(value)} ({share:.1f}%)"
