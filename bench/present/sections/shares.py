"""Where the time goes: per cell, each switchable op's time in a prefill and in one decode step of
every variant, and the rest of the step, from the run's op shares (fusebench.analysis.shares). Only
for runs that timed them."""

from __future__ import annotations

from ...analysis.shares import PHASE_OF_METRIC, ShareData, StepShares, shares_on
from ...analysis.study import cell_labels, on, ordered_cells, ordered_workloads
from ...core.fileformat import METRICS
from ..document import Block, Heading, Paragraph, Table
from ..format import format_seconds
from . import ReportContext

METHOD = (
    "Each distinct switchable-op call of one prefill and one decode step, traced from the model "
    "at the cell's exact shapes (only calls whose output is computed: mlx-lm-style prefill never "
    "computes the logits of the prompt's other positions, nor the KV-shared layers for them), "
    "timed alone per implementation in interleaved rounds, times its calls per step; "
    "the median over rounds, less mx.eval's fixed cost per call. Rest: the measured step (the "
    "median timed trial) less the ops: the matmuls (the LM head above all), embeddings and "
    "everything that is not a switchable op. The Expected Δ column of the delta tables is built "
    "from these."
)
NOTHING = "—"
REUSED = (
    "The op times are those an earlier run timed on this machine at {} (the same ops' code, mlx "
    "and BLAS threads; `fusebench cache --clear plans` times them again); the steps are this run's."
)


def shares_section(context: ReportContext) -> list[Block]:
    study = context.study
    blocks: list[Block] = []
    for machine in study.machines:
        data = shares_on(study, machine)
        if not data.cells:
            continue
        for workload in ordered_workloads([on(study.timed, machine)]):
            cells = ordered_cells([on(study.timed, machine, workload)])
            for (model_key, _size), label in cell_labels(cells).items():
                cell = f"{model_key}|{workload}"
                table = share_table(data, cell, study.variants)
                if table is None:
                    continue
                where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
                blocks += [Heading(f"{label} · {where}", 3), table]
                if cell in data.reused_from:
                    blocks.append(Paragraph(REUSED.format(data.reused_from[cell][:16])))
    if not blocks:
        return []
    return [Heading("Where the time goes"), Paragraph(METHOD), *blocks]


def share_table(data: ShareData, cell: str, variants: list[str]) -> Table | None:
    """Op | each variant's prefill and decode step: the op's time and its share of the step; then
    rest and step."""
    steps = {
        (v, m): step
        for v in variants
        for m in METRICS
        if (step := data.step_shares(cell, v, m)) is not None
    }
    if not steps:
        return None
    ops = list(dict.fromkeys(op.op for step in steps.values() for op in step.ops))
    switched = {op for op in ops if len({_implementation(step, op) for step in steps.values()}) > 1}
    rows = [(op, *(_op_cell(step, op, op in switched) for step in steps.values())) for op in ops]
    rows.append(("rest", *(_cell(step.rest_s, step.rest_pct) for step in steps.values())))
    rows.append(("step (measured)", *(format_seconds(step.step_s) for step in steps.values())))
    columns = ("Op", *(f"{v} {PHASE_OF_METRIC[m]}" for v, m in steps))
    return Table(columns, tuple(rows), frozenset(range(1, len(columns))))


def _implementation(step: StepShares, op: str) -> str | None:
    return next((o.implementation for o in step.ops if o.op == op), None)


def _op_cell(step: StepShares, op: str, switched: bool) -> str:
    found = next((o for o in step.ops if o.op == op), None)
    if found is None:
        return NOTHING
    return (f"{found.implementation} " if switched else "") + _cell(found.seconds, found.pct)


def _cell(seconds: float, pct: float) -> str:
    return f"{format_seconds(seconds)} ({pct:.1f}%)"
