"""Achieved prefill TFLOP/s and gen GB/s against the machine's peak.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...analysis.study import Study, cell_labels, on, ordered_cells, ordered_workloads, trial_medians, variants_in
from ...core.records import ROOFLINE_FIELDS
from ..document import Block, Bullets, Heading, Paragraph, Table
from ..format import format_rate

ROOFLINE_MEANING = (
    "% of peak: prefill TFLOP/s (2 FLOPs per active parameter and prompt token, plus attention) against the "
    "matmul peak (fp32; bf16 for 16-bit models), gen GB/s (the bytes each decode step must move: active weights "
    "and KV cache) against the memory-read peak, so a fusion that saves memory traffic moves gen toward its roof."
)


def roofline_section(study: Study) -> list[Block]:
    """Achieved prefill TFLOP/s and gen GB/s per cell and variant, with their share of the machine's peak."""
    if study.timed.empty or "prefill_tflops" not in study.timed or study.timed["prefill_tflops"].isna().all():
        return []
    blocks: list[Block] = [Heading("Roofline"), Paragraph(f"Medians of the timed trials. {ROOFLINE_MEANING}")]
    for machine in study.machines:
        timed = on(study.timed, machine)
        if timed.empty:
            continue
        suffix = "" if len(study.machines) == 1 else f" · {machine}"
        blocks.append(Bullets(tuple(f"Peak{suffix}: {describe_peak(peak)}" for peak in _peaks(study, timed))))
        for workload in ordered_workloads([timed]):
            blocks += [Heading(f"{workload}{suffix}", 3), roofline_table(study, on(timed, machine, workload))]
    return blocks


def _peaks(study: Study, timed: pd.DataFrame) -> list[dict[str, Any] | None]:
    """The distinct peaks the runs of these trials were held against (one, unless runs measured it apart)."""
    runs = study.results.runs
    peaks = [runs.get(run_id, {}).get("peak") for run_id in dict.fromkeys(timed["run_id"])]
    return list({repr(peak): peak for peak in peaks}.values())


def describe_peak(peak: dict[str, Any] | None) -> str:
    if not peak:
        return ("none known (a CPU run without a probe, or a device missing from the chip table): achieved rates "
                "only, no percentages")
    figures = [f"{format_rate(peak[key])} {unit}" for key, unit in (
        ("fp32_tflops", "TFLOP/s fp32"), ("bf16_tflops", "TFLOP/s bf16"), ("memory_gbps", "GB/s memory")
    ) if peak.get(key)]
    return (f"{peak.get('name', '?')}: {', '.join(figures) or 'no figures'} (source: {peak.get('source', '?')}; "
            f"confidence: {peak.get('confidence', '?')})")


def roofline_table(study: Study, timed: pd.DataFrame) -> Table:
    """Size | Variant | prefill TFLOP/s (% of peak) | gen GB/s (% of peak), for one machine and workload."""
    labels = cell_labels(ordered_cells([timed]))
    fields = [f for f in ROOFLINE_FIELDS if f in timed]
    medians = trial_medians(timed, fields).set_index(["model_key", "variant"])
    above = _above_peak(timed)
    rows = []
    for cell, label in labels.items():
        for variant in variants_in(study, timed[timed["model_key"] == cell[0]]):
            row, over = medians.loc[(cell[0], variant)], above.get((cell[0], variant), set())
            rows.append((label, variant, _with_percent(row, "prefill_tflops", "prefill_pct_of_peak", "prefill" in over),
                         _with_percent(row, "gen_gbps", "gen_pct_of_peak", "gen" in over)))
    return Table(("Size", "Variant", "Prefill TFLOP/s (% of peak)", "Gen GB/s (% of peak)"), tuple(rows),
                 frozenset({2, 3}))


def _above_peak(timed: pd.DataFrame) -> dict[tuple[str, str], set[str]]:
    """(model_key, variant) -> the metrics some trial achieved above the peak (the peak was underestimated)."""
    above: dict[tuple[str, str], set[str]] = {}
    if "above_peak" in timed:
        for key, variant, metrics in zip(timed["model_key"], timed["variant"], timed["above_peak"], strict=True):
            if isinstance(metrics, list):
                above.setdefault((key, variant), set()).update(metrics)
    return above


def _with_percent(row: pd.Series, rate: str, percent: str, above_peak: bool) -> str:
    value, share = row.get(rate, math.nan), row.get(percent, math.nan)
    if pd.isna(value):
        return "—"
    if above_peak:
        return f"{format_rate(value)} (peak underestimated)"
    return format_rate(value) if pd.isna(share) else f"{format_rate(value)} ({share:.1f}%)"
