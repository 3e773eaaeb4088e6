"""The PR-style delta tables, `Size | Metric | Baseline | New | Δ | 95% CI
(Holm) | ± | Rounds | Verdict`, with context, notes and plots. Baseline and New are geometric means
over the paired rounds, so New / Baseline − 1 = Δ on every row; the interval is the one the verdict
is dual to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ...analysis.amdahl import IN_MODEL_ERROR
from ...analysis.inference import (
    OUTLIER_K,
    OUTLIER_MIN_ROUNDS,
    STALL_ALPHA,
    STALLS_NEW,
    VerdictWord,
)
from ...analysis.reference import Reference
from ...analysis.shares import ExpectedDelta, disagrees, shares_on
from ...analysis.stats import ALPHA, ComparisonRow
from ...analysis.study import (
    CellInfo,
    CorrectnessCheck,
    Study,
    cell_infos,
    cell_labels,
    closed_reason,
    compare_scope,
    describe_changes,
    failed_correctness,
    on,
    ops_changes,
    ops_difference,
    ordered_cells,
    ordered_workloads,
)
from .. import plots
from ..document import Block, Bullets, Figure, Heading, Table
from ..format import format_ci, format_delta, format_tps, signed_pct, verdict_text
from . import ReportContext
from .context import (
    design_note,
    environment_line,
    machine_suffix,
    plot_caption,
    sequential_sizes,
    slug,
    threads_note,
    time_note,
    weighed_stops,
    weighing_note,
    weights_note,
)
from .kernels import probe_note

DELTA_COLUMNS = (
    "Size",
    "Metric",
    "Baseline",
    "New",
    "Δ",
    "95% CI (Holm)",
    "±",
    "Rounds",
    "Verdict",
)
REF_COLUMN = "Ref Δ"
EXPECTED_COLUMN = "Expected Δ (ops)"
INCORRECT = "✗ incorrect"
NOTHING = "—"


class DeltaCells(NamedTuple):
    """What a compare() row shows after Baseline and New."""

    delta: str
    interval: str
    half_width: str
    rounds: str
    verdict: str


@dataclass(frozen=True)
class DeltaRow:
    """One row of a delta table: a cell's metric, or in its place the reason a cell has none."""

    label: str
    metric: str
    baseline: str
    new: str
    shown: DeltaCells
    reference: str | None  # the published Δ, in a table with a reference column
    # the Δ the ops that differ account for, in a table of a run that timed op shares
    expected: str | None = None

    def cells(self) -> tuple[str, ...]:
        ref = () if self.reference is None else (self.reference,)
        expected = () if self.expected is None else (self.expected,)
        return (
            self.label,
            self.metric,
            self.baseline,
            self.new,
            self.shown.delta,
            *ref,
            *self.shown[1:],
            *expected,
        )


@dataclass
class DeltaSection:
    """One machine x comparison x workload, rendered, with what to warn about."""

    blocks: list[Block]
    warnings: list[str]


def delta_cells(row: ComparisonRow, failed: Sequence[str], new: str) -> DeltaCells:
    """The cells of one compare() row; a variant that failed correctness is never shown as a
    speed-up."""
    if failed:
        return DeltaCells(
            NOTHING,
            NOTHING,
            NOTHING,
            NOTHING,
            INCORRECT if new in failed else f"{INCORRECT} (baseline)",
        )
    if row.verdict is None:
        return DeltaCells(NOTHING, NOTHING, NOTHING, "0", "no paired rounds")
    rounds, delta = _rounds_cell(row), signed_pct(row.delta_pct)
    # Δ is over all rounds: the trimmed Δ goes beside it
    if row.stalls and row.stalls.over_all_rounds:
        delta += f" (trimmed {format_delta(row.stalls.trimmed)})"
    if math.isnan(row.adj_low):
        return DeltaCells(delta, NOTHING, NOTHING, rounds, verdict_text(row.verdict))
    return DeltaCells(
        delta,
        format_ci(row.interval),
        f"±{row.half_width_pct:.1f}%",
        rounds,
        verdict_text(row.verdict),
    )


def _rounds_cell(row: ComparisonRow) -> str:
    """ "40", "38 (2 outliers)", "40 (compiled stalls in 6)" or "40 (all; 2 outliers kept)"."""
    if row.stalls and row.stalls.arm:
        return f"{row.n_pairs} ({stalling_arm(row)} stalls in {row.stalls.against_arm})"
    if row.stalls and row.stalls.over_all_rounds:
        outliers = row.stalls.against_new + row.stalls.against_baseline
        return f"{row.n_pairs} (all; {outliers} outlier{'s' if outliers > 1 else ''} kept)"
    return f"{row.n_pairs}" + (
        f" ({row.excluded} outlier{'s' if row.excluded > 1 else ''})" if row.excluded else ""
    )


def stalling_arm(row: ComparisonRow) -> str:
    """The name of the arm the stall rule flags, as the table names it (a variant, or "current" for
    a build)."""
    return row.new if row.stalls and row.stalls.arm == STALLS_NEW else row.baseline


def stall_warnings(comparison: Sequence[ComparisonRow], where: str) -> list[str]:
    """Rows whose Δ the stall rule took over all rounds, naming the arm that stalls when the sign
    test says which."""
    warnings = []
    for r in comparison:
        s = r.stalls
        if s is None or not s.over_all_rounds:
            continue
        what = " ".join(part for part in (r.size, r.variant, r.metric) if part)
        every = f"{format_delta(s.all_rounds)} {format_ci(s.all_rounds)}"
        without = f"{format_delta(s.trimmed)} {format_ci(s.trimmed)}"
        if s.arm:
            warnings.append(
                f"{stalling_arm(r)} stalls: {where}: {what}: {s.against_arm} of {s.rounds} rounds "
                f"excluded against it (sign test p = {s.sign_p:.2g} < {STALL_ALPHA:g}); "
                f"Δ over all rounds {every}; without them {without}"
            )
            continue
        warnings.append(
            f"outlier rounds moved Δ: {where}: {what}: {s.against_new} round(s) against {r.new}, "
            f"{s.against_baseline} against {r.baseline} lay beyond the fence; without them Δ "
            f"would be {without}, outside its own interval, so Δ is over all {s.rounds} rounds: "
            f"{every} (too few to say which arm stalls: sign test p = {s.sign_p:.2g})"
        )
    return warnings


def delta_table(
    study: Study,
    machine: str,
    workload: str,
    pair: tuple[str, str],
    reference: Reference | None,
    family: Sequence[tuple[str, str]],
) -> tuple[Table, list[ComparisonRow], list[str]]:
    """The PR-style table for one machine x comparison x workload, its stats (Holm across
    `family`, every comparison of the report), and notes for under it."""
    new = pair[1]
    timed, closed = on(study.timed, machine, workload), on(study.closed, machine, workload)
    comparison = compare_scope(study, machine, workload, pair, family=family)
    failing = failed_correctness(study, machine, workload)
    fitting = reference if reference and reference_fits(reference, study, pair) else None
    cells = ordered_cells([timed, closed])
    labels = cell_labels(cells)
    shares = shares_on(study, machine)
    with_shares = bool(shares.cells)
    rows: list[DeltaRow] = []
    notes = []
    for cell in cells:
        label, reason = labels[cell], closed_reason(closed, cell[0])
        cell_rows = [row for row in comparison if row.model_key == cell[0]]
        if not cell_rows or (reason and not any(row.n_pairs for row in cell_rows)):
            shown = DeltaCells(NOTHING, NOTHING, NOTHING, NOTHING, reason or "no trials")
            rows.append(
                DeltaRow(
                    label,
                    NOTHING,
                    NOTHING,
                    NOTHING,
                    shown,
                    NOTHING if reference else None,
                    NOTHING if with_shares else None,
                )
            )
            continue
        if reason:
            rounds = max(row.n_pairs for row in cell_rows)
            notes.append(f"{label}: {reason} (the row uses the {rounds} rounds recorded before it)")
        failed = [v for v in dict.fromkeys(pair) if (cell[0], v) in failing]
        notes.extend(_incorrect_note(label, failing[(cell[0], v)], cell_rows) for v in failed)
        for row in cell_rows:
            if row.clock_note:
                notes.append(f"{label} {row.metric}: on the wall clock: {row.clock_note}")
            ref = _ref_delta(fitting, cell[1], row.metric) if reference else None
            # A variant that fails correctness gets no expected speed-up either.
            expected = (
                shares.expected_delta(f"{cell[0]}|{workload}", *pair, row.metric)
                if with_shares and not failed
                else None
            )
            if (
                expected
                and not math.isnan(row.adj_low)
                and disagrees(expected, *_adjusted_pct(row))
            ):
                notes.append(_disagreement_note(label, row, expected))
            rows.append(
                DeltaRow(
                    label,
                    row.metric,
                    format_tps(row.baseline_gmean),
                    format_tps(row.new_gmean),
                    delta_cells(row, failed, new),
                    ref,
                    (_expected_cell(expected) if with_shares else None),
                )
            )
    columns = (
        *DELTA_COLUMNS[:5],
        *([REF_COLUMN] if reference else []),
        *DELTA_COLUMNS[5:],
        *([EXPECTED_COLUMN] if with_shares else []),
    )
    verdict_index = columns.index("Verdict")
    numeric = frozenset(i for i in range(2, len(columns)) if i != verdict_index)
    return Table(columns, tuple(row.cells() for row in rows), numeric), comparison, notes


def _adjusted_pct(row: ComparisonRow) -> tuple[float, float]:
    return (row.adj_low - 1) * 100, (row.adj_high - 1) * 100


def _expected_cell(expected: ExpectedDelta | None) -> str:
    if expected is None:
        return NOTHING
    return f"{signed_pct(expected.delta_pct)} [{expected.low_pct:+.1f}%, {expected.high_pct:+.1f}%]"


def _disagreement_note(label: str, row: ComparisonRow, expected: ExpectedDelta) -> str:
    low, high = _adjusted_pct(row)
    return (
        f"{label} {row.metric}: the measured Δ {signed_pct(row.delta_pct)} [{low:+.1f}%, "
        f"{high:+.1f}%] lies outside what the ops that differ ({', '.join(expected.ops)}) "
        f"account for, {_expected_cell(expected)}: the variant changed more of the step than "
        "those ops' own time (a fused kernel that also saves copies or memory traffic, "
        f"or a compile that fuses across the op), or the ops cost more than {IN_MODEL_ERROR:.0%} "
        "more or less inside the model than alone"
    )


def _ref_delta(reference: Reference | None, size: str, metric: str) -> str:
    row = reference.row(size, metric) if reference else None
    return NOTHING if row is None else f"{row.delta_pct:+.1f}%"


def _incorrect_note(label: str, check: CorrectnessCheck, cell_rows: Sequence[ComparisonRow]) -> str:
    measured = ", ".join(
        f"{r.metric} {r.delta_pct:+.1f}%" for r in cell_rows if not math.isnan(r.delta_pct)
    )
    return (
        f"{label}: {check.variant} failed correctness against {check.reference}: max |Δlogit| "
        f"{check.max_abs_err:.3g} > atol {check.atol:.3g} or greedy tokens "
        f"{check.tokens_agree}/{check.tokens_checked}; its timing ({measured or 'none'}) "
        "is not a speed-up until it computes the same logits"
    )


def reference_fits(reference: Reference, study: Study, pair: tuple[str, str]) -> bool:
    """A reference's figures belong beside a comparison only when both change the same ops the same
    way."""
    return not reference.ops or reference.ops == ops_changes(study, *pair)


def _workload_line(cells: Sequence[CellInfo]) -> str:
    cell = cells[0]
    return f"prompt {cell.prompt_tokens} tokens, gen {cell.gen_tokens} tokens, batch {cell.batch}"


def _models_line(cells: Sequence[CellInfo], labels: dict[tuple[str, str], str]) -> str:
    """Each row label with its precision, in table order: "E2B (2/35 layers): float32; 26B:
    bfloat16, nvfp4"."""
    precision = {}
    for cell in cells:
        precision.setdefault(
            (cell.model_key, cell.size),
            cell.dtype + (f", {cell.quantize}" if cell.quantize else ""),
        )
    return "; ".join(f"{label}: {precision[cell]}" for cell, label in labels.items())


def reference_note(
    reference: Reference,
    study: Study,
    machine: str,
    cells: Sequence[CellInfo],
    pair: tuple[str, str],
) -> str:
    """Where the reference and this table were measured, side by side, so the difference is in plain
    view."""
    env = study.envs(machine)[0]
    precision = ", ".join(dict.fromkeys(cell.quantize or cell.dtype for cell in cells))
    measured = f"{env.backend} ({env.device}), {precision}, {cells[0].workload}"
    note = (
        f"{REF_COLUMN}: {reference.title} ({reference.source}). Reference: "
        f"{reference.describe()}; measured: {measured}. Hardware, backend and precision all "
        "change the size of a Δ: compare the direction and rough size, not the digits."
    )
    if not reference_fits(reference, study, pair):
        note += (
            f" {REF_COLUMN} is left blank here: the reference changed "
            f"{describe_changes(reference.ops)}, this comparison changes "
            f"{ops_difference(study, *pair)}."
        )
    return note


def delta_section(
    study: Study,
    pair: tuple[str, str],
    machine: str,
    workload: str,
    reference: Reference | None,
    out_dir: Path,
    family: Sequence[tuple[str, str]],
) -> DeltaSection:
    """Heading, context lines, the table, notes and the Δ plot for one machine x comparison x
    workload."""
    timed, closed = on(study.timed, machine, workload), on(study.closed, machine, workload)
    table, comparison, notes = delta_table(study, machine, workload, pair, reference, family)
    labels = cell_labels(ordered_cells([timed, closed]))
    cells = cell_infos([timed, closed])
    context = [
        f"Ops that differ: {ops_difference(study, *pair)}",
        f"Workload: {workload} ({_workload_line(cells)})",
        f"Environment: {environment_line(study.envs(machine))}",
        f"Models: {_models_line(cells, labels)}",
    ]
    if reference:
        context.append(reference_note(reference, study, machine, cells, pair))
    if note := probe_note(study, machine, workload, pair):
        context.append(note)
    runs = [run for run in study.runs.values() if run.machine == machine]
    if note := threads_note(runs):
        context.append(note)
    stops = study.results.stop_records()
    sequential = sequential_sizes(stops, runs, workload)
    weighed = weighed_stops(stops, runs)
    kept = weighed[0].weighing.kept if weighed and weighed[0].weighing else None
    if note := design_note(runs, sequential, kept):
        context.append(note)
    context.extend(weighing_note(stop) for stop in weighed)
    if note := weights_note(runs):
        context.append(note)
    if note := time_note(runs, study.times):
        context.append(note)
    uncompiled = compile_note(study, machine, pair)
    if uncompiled:
        context.append(uncompiled)
    where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
    blocks: list[Block] = [
        Heading(f"{pair[0]} → {pair[1]} · {where}", 3),
        Bullets(tuple(context)),
        table,
    ]
    if notes:
        blocks.append(Bullets(tuple(notes)))
    plotted = [row for row in comparison if row.n_pairs > 0]
    if plotted:
        blocks.append(
            _delta_figure(study, pair, machine, workload, plotted, labels, reference, out_dir)
        )
    warnings = _table_warnings(comparison, f"{pair[0]} → {pair[1]} · {where}")
    if uncompiled:
        warnings.append(f"{pair[0]} → {pair[1]} · {where}: {uncompiled}")
    return DeltaSection(blocks, warnings)


def compile_note(study: Study, machine: str, pair: tuple[str, str]) -> str | None:
    """Where a run on the machine found that mx.compile fuses nothing, a comparison whose variants
    differ in a compiled implementation compared the same code: said beside its table."""
    if not any(env.compiles is False for env in study.envs(machine)):
        return None
    base, new = study.ops.get(pair[0], {}), study.ops.get(pair[1], {})
    compiled = [
        op
        for op in dict.fromkeys([*base, *new])
        if base.get(op) != new.get(op) and "compiled" in f"{base.get(op)} {new.get(op)}"
    ]
    if not compiled:
        return None
    return (
        f"mx.compile fused nothing on this machine (no C++ compiler found): {', '.join(compiled)} "
        "ran its eager code in the compiled variant too, so this Δ is not the fusion's"
    )


def _delta_figure(
    study: Study,
    pair: tuple[str, str],
    machine: str,
    workload: str,
    comparison: Sequence[ComparisonRow],
    labels: dict[tuple[str, str], str],
    reference: Reference | None,
    out_dir: Path,
) -> Figure:
    failing = failed_correctness(study, machine, workload)
    incorrect = {key for key, variant in failing if variant in pair}
    fitting = reference if reference and reference_fits(reference, study, pair) else None
    bars = [
        plots.DeltaBar(
            size=labels[(row.model_key, row.size)],
            metric=row.metric,
            delta_pct=row.delta_pct,
            low_pct=(row.adj_low - 1) * 100,
            high_pct=(row.adj_high - 1) * 100,
            decided=bool(row.verdict and row.verdict.decided),
            incorrect=row.model_key in incorrect,
            reference_pct=published.delta_pct
            if fitting and (published := fitting.row(row.size, row.metric))
            else None,
        )
        for row in comparison
    ]
    shown = {bar.size for bar in bars}
    sizes = [label for label in labels.values() if label in shown]
    name = (
        f"delta-{slug(pair[0])}-vs-{slug(pair[1])}-"
        f"{slug(workload)}{machine_suffix(study, machine)}.png"
    )
    title = f"Δ throughput, {pair[1]} vs {pair[0]} · {workload}"
    path = plots.delta_plot(
        bars, sizes, title=title, caption=plot_caption(study, machine), path=out_dir / name
    )
    return Figure(
        path,
        f"{title}: mean of the paired per-round log ratios, with its Holm-adjusted 95% CI; faint "
        "bars: no verdict of faster or slower",
    )


def _table_warnings(comparison: Sequence[ComparisonRow], where: str) -> list[str]:
    """Rows with too few rounds for a verdict, and rounds the outlier rule set aside."""
    warnings = [
        f"too few rounds: {where}: {r.size} {r.metric} has "
        f"{r.n_pairs} paired round(s): {verdict_text(r.verdict)}"
        for r in comparison
        if r.verdict and r.verdict.word is VerdictWord.NEEDS_ROUNDS
    ]
    warnings += [
        f"outlier rounds: {where}: {r.size} {r.metric}: {r.excluded} of {r.n_pairs + r.excluded} "
        f"round(s) lay more than {OUTLIER_K:g} robust SDs from the median ratio "
        f"({r.stalls.against_new} against {r.new}, {r.stalls.against_baseline} against "
        f"{r.baseline}) and were left out of Δ (their spread still counts)"
        for r in comparison
        if r.excluded and r.stalls
    ]
    return warnings + stall_warnings(comparison, where)


def deltas_section(context: ReportContext) -> list[Block]:
    """Every comparison's tables, one per machine x workload; their warnings go to the Warnings
    section."""
    study = context.study
    blocks: list[Block] = []
    for pair in context.comparisons:
        blocks.append(Heading(f"Δ {pair[0]} → {pair[1]}"))
        for machine in study.machines:
            for workload in ordered_workloads(
                [on(study.timed, machine), on(study.closed, machine)]
            ):
                section = delta_section(
                    study,
                    pair,
                    machine,
                    workload,
                    context.reference,
                    context.out_dir,
                    context.comparisons,
                )
                blocks += section.blocks
                context.warnings += section.warnings
    return blocks


def method_section(context: ReportContext) -> list[Block]:
    if not context.study.has_trials:
        return []
    margin_pct = context.study.margin_pct
    return [
        Heading("Method"),
        Bullets(
            (
                "Warmup trials are excluded from every statistic. Variants share each round's "
                "prompt and run in alternating order, so drift common to a round cancels in its "
                "ratio new/baseline.",
                "Δ = exp(mean of the per-round log ratios) − 1; Baseline and New are the "
                "geometric means of the same rounds, so New / Baseline − 1 = Δ on every row. "
                "tok/s with a thousands separator from 1,000, one decimal below, two below 10.",
                f"One bad trial cannot swing a row: from {OUTLIER_MIN_ROUNDS} rounds on, "
                f"a round whose log ratio lies more than {OUTLIER_K:g} robust SDs (pairwise "
                "scale) from the median is left out of Δ; its spread still counts, "
                "and the Rounds column names it.",
                "Unless one arm stalls: when the left-out rounds go against one arm more often "
                f"than chance allows (exact sign test, p < {STALL_ALPHA:g}) or would move Δ "
                "outside its own interval, Δ, its interval and the verdict use every round, "
                "the trimmed Δ is shown beside it, and the Rounds column names the arm that "
                "stalls.",
                "95% CI (Holm): the interval on the mean log ratio that the run's design calls "
                "for (the fixed-n Student t interval where the rounds were fixed before the run, "
                "else a confidence sequence, valid wherever the run stopped on its data), "
                "widened to Holm's level for its rank among the rows of every comparison at "
                "this machine and workload (the run's whole table), so all of them together "
                f"hold a {1 - ALPHA:.0%} family-wise guarantee; ± is its half-width, the smallest "
                "effect this row could have detected.",
                "Verdict: faster or slower when that interval excludes 0; no change when it lies "
                f"within ±{margin_pct:g}%; inconclusive (±X%) otherwise; needs ≥ N rounds when "
                "too few rounds were paired. A variant that failed its correctness check shows "
                f"{INCORRECT} instead of a Δ.",
                "Machines and workloads are never pooled: each has its own table.",
                f"{EXPECTED_COLUMN} (runs that timed op shares): the tok/s Δ the ops that differ "
                "between the two variants account for (Amdahl): the seconds per step those ops "
                "add or save, each distinct call of a prefill or decode step timed alone per "
                "implementation times its calls per step, paired round by round, "
                "over the baseline's measured step, with a Student t 95% interval over the share "
                f"rounds, its ends taken with those ops costing {IN_MODEL_ERROR:.0%} more and "
                "less inside the model than alone (the in-model error calibrated here). It "
                "assumes op times add up; a note says where the measured interval misses it.",
            )
        ),
    ]
