"""Latency as users feel it: time to first token, and inter-token latency percentiles, per
variant."""

from __future__ import annotations

from collections.abc import Sequence

from ...analysis import stats
from ...analysis.study import cell_labels, on, ordered_cells, ordered_workloads
from ..document import Block, Heading, Paragraph, Table
from ..format import format_seconds
from . import ReportContext

LATENCY_COLUMNS = ("Size", "Variant", "TTFT p50", "ITL p50", "ITL p90", "ITL p99", "Steps")
MLX_LM_TTFT_COLUMN = "TTFT mlx-lm p50"


def latency_section(context: ReportContext) -> list[Block]:
    study = context.study
    latencies = stats.latencies(study.timed)
    if not any(r.steps for r in latencies):
        return []
    blocks: list[Block] = [
        Heading("Latency"),
        Paragraph(
            "TTFT is the prefill's time to the first generated token (median over timed rounds); "
            "ITL is the time between consecutive generated tokens, every decode step of every "
            "timed round pooled, read where mlx-lm's pipelined loop waits for each token. Tail "
            "percentiles need many steps: p99 of fewer than 100 is the maximum. "
            f"{MLX_LM_TTFT_COLUMN}, where the trials recorded it, is the first token as mlx-lm's "
            "stream_generate reads it, after queuing the first decode step (its prompt_tps "
            "clock): on a GPU close to TTFT, on the CPU backend later by the part of that step "
            "the queuing waits for."
        ),
    ]
    for machine in study.machines:
        for workload in ordered_workloads([on(study.timed, machine)]):
            rows = [r for r in latencies if (r.machine, r.workload) == (machine, workload)]
            blocks += [
                Heading(workload if len(study.machines) == 1 else f"{workload} · {machine}", 3),
                _latency_table(
                    rows, cell_labels(ordered_cells([on(study.timed, machine, workload)]))
                ),
            ]
    return blocks


def _latency_table(rows: Sequence[stats.Latency], labels: dict[tuple[str, str], str]) -> Table:
    """One machine and workload; the mlx-lm TTFT column only where its trials carry it."""
    with_mlx_lm = any(r.mlx_lm_ttft_p50 is not None for r in rows)
    columns = (
        (*LATENCY_COLUMNS[:3], MLX_LM_TTFT_COLUMN, *LATENCY_COLUMNS[3:])
        if with_mlx_lm
        else LATENCY_COLUMNS
    )
    body = []
    for r in rows:
        if not r.steps:
            continue
        mlx_lm = (
            (("—" if r.mlx_lm_ttft_p50 is None else format_seconds(r.mlx_lm_ttft_p50)),)
            if with_mlx_lm
            else ()
        )
        body.append(
            (
                labels[(r.model_key, r.size)],
                r.variant,
                format_seconds(r.ttft_p50),
                *mlx_lm,
                *(format_seconds(v) for v in (r.itl_p50, r.itl_p90, r.itl_p99)),
                str(r.steps),
            )
        )
    return Table(columns, tuple(body), frozenset(range(2, len(columns))))
