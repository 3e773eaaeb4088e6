"""Latency as users feel it: time to first token, and inter-token latency percentiles, per variant."""

from __future__ import annotations

from ...analysis import stats
from ...analysis.study import Study, cell_labels, on, ordered_cells, ordered_workloads
from ..document import Block, Heading, Paragraph, Table
from ..format import format_seconds

LATENCY_COLUMNS = ("Size", "Variant", "TTFT p50", "ITL p50", "ITL p90", "ITL p99", "Steps")


def latency_section(study: Study) -> list[Block]:
    table = stats.latency_table(study.timed)
    if table.empty or not table["steps"].any():
        return []
    blocks: list[Block] = [Heading("Latency"), Paragraph(
        "TTFT is the prefill's time to the first generated token (median over timed rounds); ITL is the time between "
        "consecutive generated tokens, every decode step of every timed round pooled, read where mlx-lm's pipelined "
        "loop waits for each token. Tail percentiles need many steps: p99 of fewer than 100 is the maximum."
    )]
    for machine in study.machines:
        for workload in ordered_workloads([on(study.timed, machine)]):
            rows = on(table, machine, workload)
            labels = cell_labels(ordered_cells([rows]))
            body = tuple(
                (labels[(r.model_key, r.size)], r.variant, format_seconds(r.ttft_p50),
                 *(format_seconds(v) for v in (r.itl_p50, r.itl_p90, r.itl_p99)), str(r.steps))
                for r in rows.itertuples() if r.steps
            )
            where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
            blocks += [Heading(where, 3), Table(LATENCY_COLUMNS, body, frozenset(range(2, 7)))]
    return blocks
