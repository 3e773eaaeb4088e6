"""`fusebench ops` records: each op variant on its own, at the exact shapes each size produces."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from fusebench.models.registry import REGISTRY

from ...analysis.opstats import VariantSummary
from ...analysis.study import Study
from .. import plots
from ..document import Block, Bullets, Figure, Heading, Paragraph, Table
from ..format import format_ci, format_delta, format_rate, format_seconds, op_verdict_text
from . import ReportContext
from .context import environment_line, envs_caption

OP_COLUMNS = (
    "Shape",
    "Variant",
    "Median time",
    "GB/s",
    "GFLOP/s",
    "max abs err",
    "Δ speed",
    "95% CI",
    "Verdict",
)


def op_section(context: ReportContext) -> list[Block]:
    """`fusebench ops` records: per op a table of every shape and variant, and per run one plot of
    the Δs."""
    study, out_dir = context.study, context.out_dir
    if not study.op_summaries:
        return []
    blocks: list[Block] = [
        Heading("Op microbenchmarks"),
        Paragraph(
            "Each op variant timed on its own at the exact shapes each size produces (fusebench "
            "ops), in rounds interleaved ABBA: median time per call; GB/s counts the bytes read "
            "and written, GFLOP/s the arithmetic (— for pure data movement); max abs err is the "
            "output's largest deviation from the reference variant's. Δ speed is the geometric "
            "mean of the paired per-round speed ratios against the op's reference variant, "
            "with its Holm-adjusted 95% CI (the same paired method as the delta tables, "
            "each op's table one Holm family)."
        ),
    ]
    runs = list(dict.fromkeys(s.run_id for s in study.op_summaries))
    notes = {s.shape_label: s.note for s in study.op_summaries if s.note}
    for index, run_id in enumerate(runs):
        summaries = [s for s in study.op_summaries if s.run_id == run_id]
        blocks += _op_run(
            study, run_id, summaries, notes, "" if len(runs) == 1 else f"-r{index + 1}", out_dir
        )
    return blocks


def _op_run(
    study: Study,
    run_id: str | None,
    summaries: list[VariantSummary],
    notes: dict[str, str],
    suffix: str,
    out_dir: Path,
) -> list[Block]:
    env = study.run_env(run_id)
    rounds = max((s.rounds for s in summaries), default=0)
    where = "" if not suffix else f" · run {run_id}"
    blocks: list[Block] = [
        Paragraph(f"Run {run_id}, {rounds} rounds; environment: {environment_line([env])}")
    ]
    blocks += op_tables(summaries, notes, where)
    compared = [s for s in summaries if s.speed is not None]
    if compared:
        blocks.append(
            _op_figure(compared, envs_caption([env]), where, out_dir / f"op-deltas{suffix}.png")
        )
    return blocks


def op_tables(
    summaries: Sequence[VariantSummary], notes: dict[str, str], where: str = ""
) -> list[Block]:
    """Per op: its heading, its table and the notes on its shapes (also what `fusebench ops` prints
    at the end)."""
    blocks: list[Block] = []
    for op in dict.fromkeys(s.op for s in summaries):
        rows = [s for s in summaries if s.op == op]
        title = f"{op}: {REGISTRY[op].doc}" if op in REGISTRY else op
        blocks += [Heading(f"{title}{where}", 3), op_table(rows)]
        shape_notes = [
            f"{label}: {notes[label]}"
            for label in dict.fromkeys(s.shape_label for s in rows)
            if label in notes
        ]
        if shape_notes:
            blocks.append(Bullets(tuple(shape_notes)))
    return blocks


def op_table(summaries: Sequence[VariantSummary]) -> Table:
    """One op's shapes, the reference variant first in each, the shape named once per group."""
    rows = []
    for label in dict.fromkeys(s.shape_label for s in summaries):
        group = sorted(
            (s for s in summaries if s.shape_label == label), key=lambda s: s.variant != s.reference
        )
        for i, s in enumerate(group):
            delta, interval = (
                ("—", "—") if s.speed is None else (format_delta(s.speed), format_ci(s.speed))
            )
            rows.append(
                (
                    label if i == 0 else "",
                    s.variant,
                    format_seconds(s.median_s),
                    format_rate(s.gbps),
                    "—" if s.gflops is None else format_rate(s.gflops),
                    f"{s.max_abs_err:.2g}",
                    delta,
                    interval,
                    op_verdict_text(s),
                )
            )
    return Table(OP_COLUMNS, tuple(rows), frozenset(range(2, 8)))


def _op_figure(summaries: Sequence[VariantSummary], caption: str, where: str, path: Path) -> Figure:
    # A variant is named on its bar only where its op has several besides the reference.
    variants_per_op = Counter(op for op, _ in {(s.op, s.variant) for s in summaries})
    several = {op for op, n in variants_per_op.items() if n > 1}
    bars = [
        plots.OpBar(
            s.shape_label + (f" · {s.variant}" if s.op in several else ""),
            s.op,
            s.speed,
            bool(s.verdict and s.verdict.decided),
        )
        for s in summaries
        if s.speed
    ]
    title = f"Op microbenchmarks: speed vs each op's reference variant{where}"
    plots.op_delta_plot(bars, title=title, caption=caption, path=path)
    return Figure(
        path,
        f"{title}: geometric mean of the paired per-round speed ratios, with its Holm-adjusted 95% "
        "CI; faint bars: no verdict of faster or slower",
    )
