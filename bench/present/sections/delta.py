"""The PR-style delta tables, `Size | Metric | Baseline | New | Δ | 95% CI (Holm) | ± | Rounds | Verdict`, with
context, notes and plots. Baseline and New are geometric means over the paired rounds, so New / Baseline − 1 = Δ on
every row; the interval is the one the verdict is dual to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from ...analysis.inference import OUTLIER_K, OUTLIER_MIN_ROUNDS, STALL_ALPHA, STALLS_NEW
from ...analysis.reference import Reference
from ...analysis.stats import ALPHA
from ...analysis.study import (
    Study,
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
from ..format import format_tps, signed_pct
from .context import environment_line, machine_suffix, plot_caption, slug, threads_note
from .kernels import attention_note

DELTA_COLUMNS = ("Size", "Metric", "Baseline", "New", "Δ", "95% CI (Holm)", "±", "Rounds", "Verdict")
REF_COLUMN = "Ref Δ"
INCORRECT = "✗ incorrect"


class DeltaCells(NamedTuple):
    """What a compare() row shows after Baseline and New."""

    delta: str
    interval: str
    half_width: str
    rounds: str
    verdict: str


@dataclass
class DeltaSection:
    """One machine x comparison x workload, rendered, with what to warn about."""

    blocks: list[Block]
    warnings: list[str]


def delta_cells(row: Any, failed: Sequence[str], new: str) -> DeltaCells:
    """The cells of one compare() row; a variant that failed correctness is never shown as a speed-up."""
    if failed:
        return DeltaCells("—", "—", "—", "—", INCORRECT if new in failed else f"{INCORRECT} (baseline)")
    if row.n_pairs == 0:
        return DeltaCells("—", "—", "—", "0", row.verdict_text)
    rounds, delta = _rounds_cell(row), signed_pct(row.delta_pct)
    if row.over_all_rounds:  # Δ is over all rounds: the trimmed Δ goes beside it
        delta += f" (trimmed {signed_pct(row.trimmed_delta_pct)})"
    if math.isnan(row.adj_low):
        return DeltaCells(delta, "—", "—", rounds, row.verdict_text)
    interval = f"[{signed_pct((row.adj_low - 1) * 100)}, {signed_pct((row.adj_high - 1) * 100)}]"
    return DeltaCells(delta, interval, f"±{row.half_width_pct:.1f}%", rounds, row.verdict_text)


def _rounds_cell(row: Any) -> str:
    """"40", "38 (2 outliers)", "40 (compiled stalls in 6)" or "40 (all; 2 outliers kept)"."""
    outliers = row.excluded_new + row.excluded_baseline
    if _flags_an_arm(row):
        return f"{row.n_pairs} ({stalling_arm(row)} stalls in {_against_arm(row)})"
    if row.over_all_rounds:
        return f"{row.n_pairs} (all; {outliers} outlier{'s' if outliers > 1 else ''} kept)"
    return f"{row.n_pairs}" + (f" ({row.excluded} outlier{'s' if row.excluded > 1 else ''})" if row.excluded else "")


def stalling_arm(row: Any) -> str:
    """The name of the arm the stall rule flags, as the table names it (a variant, or "current" for a build)."""
    return row.new if row.stalls == STALLS_NEW else row.baseline


def _flags_an_arm(row: Any) -> bool:
    return isinstance(row.stalls, str)  # None, or NaN where pandas read a column of None


def _against_arm(row: Any) -> int:
    return row.excluded_new if row.stalls == STALLS_NEW else row.excluded_baseline


def stall_warnings(comparison: pd.DataFrame, where: str) -> list[str]:
    """Rows whose Δ the stall rule took over all rounds, naming the arm that stalls when the sign test says which."""
    warnings = []
    for r in comparison[comparison["over_all_rounds"].astype(bool)].itertuples():
        what = " ".join(str(part) for part in (r.size, getattr(r, "variant", ""), r.metric) if part)
        every = f"{signed_pct(r.all_delta_pct)} [{_pct(r.all_low)}, {_pct(r.all_high)}]"
        without = f"{signed_pct(r.trimmed_delta_pct)} [{_pct(r.trimmed_low)}, {_pct(r.trimmed_high)}]"
        if _flags_an_arm(r):
            warnings.append(
                f"{stalling_arm(r)} stalls: {where}: {what}: {_against_arm(r)} of {r.all_rounds} rounds "
                f"excluded against it (sign test p = {r.sign_p:.2g} < {STALL_ALPHA:g}); Δ over all rounds {every}; "
                f"without them {without}"
            )
            continue
        warnings.append(
            f"outlier rounds moved Δ: {where}: {what}: {r.excluded_new} round(s) against {r.new}, "
            f"{r.excluded_baseline} against {r.baseline} lay beyond the fence; without them Δ would be {without}, "
            f"outside its own interval, so Δ is over all {r.all_rounds} rounds: {every} (too few to say which arm "
            f"stalls: sign test p = {r.sign_p:.2g})"
        )
    return warnings


def _pct(ratio: float) -> str:
    return signed_pct((ratio - 1) * 100)


def delta_table(
    study: Study, machine: str, workload: str, pair: tuple[str, str], reference: Reference | None
) -> tuple[Table, pd.DataFrame, list[str]]:
    """The PR-style table for one machine x comparison x workload, its stats, and notes for under it."""
    new = pair[1]
    timed, closed = on(study.timed, machine, workload), on(study.closed, machine, workload)
    comparison = compare_scope(study, machine, workload, pair)
    failing = failed_correctness(study, machine, workload)
    fitting = reference if reference and reference_fits(reference, study, pair) else None
    cells = ordered_cells([timed, closed])
    labels = cell_labels(cells)
    rows, notes = [], []
    for cell in cells:
        label, reason = labels[cell], closed_reason(closed, cell[0])
        cell_rows = comparison[comparison["model_key"] == cell[0]]
        if cell_rows.empty or (reason and (cell_rows["n_pairs"] == 0).all()):
            rows.append(_reason_row(label, reason or "no trials", reference))
            continue
        if reason:
            notes.append(f"{label}: {reason} (the row uses the {cell_rows['n_pairs'].max()} rounds recorded before it)")
        failed = [v for v in dict.fromkeys(pair) if (cell[0], v) in failing]
        notes.extend(_incorrect_note(label, failing[(cell[0], v)], cell_rows) for v in failed)
        for row in cell_rows.itertuples():
            shown = delta_cells(row, failed, new)
            means = format_tps(row.baseline_gmean), format_tps(row.new_gmean)
            ref = [_ref_delta(fitting, cell[1], row.metric)] if reference else []
            rows.append((label, row.metric, *means, shown.delta, *ref, *shown[1:]))
    columns = (*DELTA_COLUMNS[:5], *([REF_COLUMN] if reference else []), *DELTA_COLUMNS[5:])
    numeric = frozenset(range(2, len(columns) - 1))
    return Table(columns, tuple(rows), numeric), comparison, notes


def _reason_row(label: str, reason: str, reference: Reference | None) -> tuple[str, ...]:
    return (label, "—", "—", "—", "—", *(["—"] if reference else []), "—", "—", "—", reason)


def _ref_delta(reference: Reference | None, size: str, metric: str) -> str:
    row = reference.row(size, metric) if reference else None
    return "—" if row is None else f"{row.delta_pct:+.1f}%"


def _incorrect_note(label: str, record: dict[str, Any], cell_rows: pd.DataFrame) -> str:
    measured = ", ".join(
        f"{r.metric} {r.delta_pct:+.1f}%" for r in cell_rows.itertuples() if not math.isnan(r.delta_pct)
    )
    return (
        f"{label}: {record['variant']} failed correctness against {record['reference']}: max |Δlogit| "
        f"{record['max_abs_err']:.3g} > atol {record['atol']:.3g} or greedy tokens {record['tokens_agree']}"
        f"/{record['tokens_checked']}; its timing ({measured or 'none'}) is not a speed-up until it computes the same "
        "logits"
    )


def reference_fits(reference: Reference, study: Study, pair: tuple[str, str]) -> bool:
    """A reference's figures belong beside a comparison only when both change the same ops the same way."""
    return not reference.ops or reference.ops == ops_changes(study, *pair)


def _workload_line(frames: Sequence[pd.DataFrame]) -> str:
    row = next(f.iloc[0] for f in frames if not f.empty)
    return f"prompt {row['prompt_tokens']} tokens, gen {row['gen_tokens']} tokens, batch {row['batch']}"


def _models_line(frames: Sequence[pd.DataFrame], labels: dict[tuple[str, str], str]) -> str:
    """Each row label with its precision, in table order: "E2B (2/35 layers): float32; 26B: bfloat16, nvfp4"."""
    rows = pd.concat([f for f in frames if not f.empty]).drop_duplicates(["model_key", "size"])
    precision = {}
    for row in rows.to_dict("records"):
        quantize = row.get("quantize")
        precision[(row["model_key"], row["size"])] = str(row.get("dtype", "?")) + (
            f", {quantize}" if isinstance(quantize, str) else ""
        )
    return "; ".join(f"{label}: {precision[cell]}" for cell, label in labels.items())


def reference_note(
    reference: Reference, study: Study, machine: str, frames: Sequence[pd.DataFrame], pair: tuple[str, str]
) -> str:
    """Where the reference and this table were measured, side by side, so the difference is in plain view."""
    envs = study.envs.get(machine) or [{}]
    rows = pd.concat([f for f in frames if not f.empty])
    precision = ", ".join(dict.fromkeys(
        str(q) if isinstance(q, str) else str(d) for d, q in zip(rows["dtype"], rows["quantize"], strict=True)
    ))
    measured = f"{envs[0].get('backend', '?')} ({envs[0].get('device', '?')}), {precision}, {rows['workload'].iloc[0]}"
    note = (
        f"{REF_COLUMN}: {reference.title} ({reference.source}). Reference: {reference.describe()}; "
        f"measured: {measured}. Hardware, backend and precision all change the size of a Δ: compare the "
        "direction and rough size, not the digits."
    )
    if not reference_fits(reference, study, pair):
        note += (f" {REF_COLUMN} is left blank here: the reference changed {describe_changes(reference.ops)}, "
                 f"this comparison changes {ops_difference(study, *pair)}.")
    return note


def delta_section(
    study: Study, pair: tuple[str, str], machine: str, workload: str, reference: Reference | None, out_dir: Path
) -> DeltaSection:
    """Heading, context lines, the table, notes and the Δ plot for one machine x comparison x workload."""
    timed, closed = on(study.timed, machine, workload), on(study.closed, machine, workload)
    table, comparison, notes = delta_table(study, machine, workload, pair, reference)
    labels = cell_labels(ordered_cells([timed, closed]))
    ops = ops_difference(study, *pair)
    context = [
        f"Ops that differ: {ops}",
        f"Workload: {workload} ({_workload_line([timed, closed])})",
        f"Environment: {environment_line(study.envs.get(machine) or [{}])}",
        f"Models: {_models_line([timed, closed], labels)}",
    ]
    if reference:
        context.append(reference_note(reference, study, machine, [timed, closed], pair))
    if note := attention_note(study, machine, workload, pair):
        context.append(note)
    if note := threads_note(study.envs.get(machine) or []):
        context.append(note)
    where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
    blocks: list[Block] = [Heading(f"{pair[0]} → {pair[1]} · {where}", 3), Bullets(tuple(context)), table]
    if notes:
        blocks.append(Bullets(tuple(notes)))
    notes += _stop_notes(study, machine, workload, labels)
    plotted = comparison[comparison["n_pairs"] > 0]
    if not plotted.empty:
        blocks.append(_delta_figure(study, pair, machine, workload, plotted, labels, reference, out_dir))
    return DeltaSection(blocks, _table_warnings(comparison, f"{pair[0]} → {pair[1]} · {where}"))


def _stop_notes(study: Study, machine: str, workload: str, labels: dict[tuple[str, str], str]) -> list[str]:
    """Cells whose precision target was not reached: they stopped at their round or time cap."""
    stops = on(study.stops, machine, workload)
    if stops.empty:
        return []
    return [
        f"{labels.get((r['model_key'], r['size']), r['size'])}: stopped at {r['reason']} after {r['rounds']} rounds, "
        f"widest 95% CI ±{max(r['half_width_pct'].values()):.1f}%"
        for r in stops.to_dict("records") if r["reason"] in ("max_rounds", "budget") and r.get("half_width_pct")
    ]


def _delta_figure(
    study: Study, pair: tuple[str, str], machine: str, workload: str, comparison: pd.DataFrame,
    labels: dict[tuple[str, str], str], reference: Reference | None, out_dir: Path,
) -> Figure:
    failing = failed_correctness(study, machine, workload)
    incorrect = {key for key, variant in failing if variant in pair}
    points = pd.DataFrame({
        "size": [labels[c] for c in zip(comparison["model_key"], comparison["size"], strict=True)],
        "metric": comparison["metric"],
        "delta_pct": comparison["delta_pct"],
        "low_pct": (comparison["adj_low"] - 1) * 100,
        "high_pct": (comparison["adj_high"] - 1) * 100,
        "verdict": comparison["verdict"],
    })
    points["incorrect"] = [key in incorrect for key in comparison["model_key"]]
    fitting = reference if reference and reference_fits(reference, study, pair) else None
    points["ref_delta_pct"] = [
        row.delta_pct if fitting and (row := fitting.row(size, metric)) else math.nan
        for size, metric in zip(comparison["size"], comparison["metric"], strict=True)
    ]
    sizes = [label for label in labels.values() if label in set(points["size"])]
    name = f"delta-{slug(pair[0])}-vs-{slug(pair[1])}-{slug(workload)}{machine_suffix(study, machine)}.png"
    title = f"Δ throughput, {pair[1]} vs {pair[0]} · {workload}"
    path = plots.delta_plot(points, sizes, title=title, caption=plot_caption(study, machine), path=out_dir / name)
    return Figure(path, f"{title}: mean of the paired per-round log ratios, with its Holm-adjusted 95% CI; faint "
                        "bars: no verdict of faster or slower")


def _table_warnings(comparison: pd.DataFrame, where: str) -> list[str]:
    """Rows with too few rounds for a verdict, and rounds the outlier rule set aside."""
    warnings = [
        f"too few rounds: {where}: {r.size} {r.metric} has {r.n_pairs} paired round(s): {r.verdict_text}"
        for r in comparison.itertuples() if r.verdict == "needs more rounds"
    ]
    warnings += [
        f"outlier rounds: {where}: {r.size} {r.metric}: {r.excluded} of {r.n_pairs + r.excluded} round(s) lay more "
        f"than {OUTLIER_K:g} robust SDs from the median ratio ({r.excluded_new} against {r.new}, "
        f"{r.excluded_baseline} against {r.baseline}) and were left out of Δ (their spread still counts)"
        for r in comparison.itertuples() if r.excluded
    ]
    return warnings + stall_warnings(comparison, where)


def delta_sections(
    study: Study, comparisons: Sequence[tuple[str, str]], reference: Reference | None, out_dir: Path
) -> tuple[list[Block], list[str]]:
    """Every comparison's tables, one per machine x workload, and their warnings."""
    blocks: list[Block] = []
    warnings: list[str] = []
    for pair in comparisons:
        blocks.append(Heading(f"Δ {pair[0]} → {pair[1]}"))
        for machine in study.machines:
            for workload in ordered_workloads([on(study.timed, machine), on(study.closed, machine)]):
                section = delta_section(study, pair, machine, workload, reference, out_dir)
                blocks += section.blocks
                warnings += section.warnings
    return blocks, warnings


def method_section(margin_pct: float) -> list[Block]:
    return [Heading("Method"), Bullets((
        "Warmup trials are excluded from every statistic. Variants share each round's prompt and run in alternating "
        "order, so drift common to a round cancels in its ratio new/baseline.",
        "Δ = exp(mean of the per-round log ratios) − 1; Baseline and New are the geometric means of the same rounds, "
        "so New / Baseline − 1 = Δ on every row. tok/s with a thousands separator from 1,000, one decimal below.",
        f"One bad trial cannot swing a row: from {OUTLIER_MIN_ROUNDS} rounds on, a round whose log ratio lies more "
        f"than {OUTLIER_K:g} robust SDs (pairwise scale) from the median is left out of Δ; its spread still counts, "
        "and the Rounds column names it.",
        "Unless one arm stalls: when the left-out rounds go against one arm more often than chance allows (exact sign "
        f"test, p < {STALL_ALPHA:g}) or would move Δ outside its own interval, Δ, its interval and the verdict use "
        "every round, the trimmed Δ is shown beside it, and the Rounds column names the arm that stalls.",
        "95% CI (Holm): the Student t interval on the mean log ratio, widened to Holm's level for its rank among the "
        f"rows of its table, so the whole table holds a {1 - ALPHA:.0%} family-wise guarantee; ± is its half-width, "
        "the smallest effect this row could have detected.",
        f"Verdict: faster or slower when that interval excludes 0; no change when it lies within ±{margin_pct:g}%; "
        "inconclusive (±X%) otherwise; needs ≥ N rounds when too few rounds were paired. A variant that failed its "
        f"correctness check shows {INCORRECT} instead of a Δ.",
        "Machines and workloads are never pooled: each has its own table.",
    ))]
