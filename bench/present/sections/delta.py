"""The PR-style delta tables: `Size | Metric | Baseline | New | Δ | 95% CI | Verdict`, with context, notes and plots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ...analysis import stats
from ...analysis.reference import Reference
from ...analysis.stats import SEED
from ...analysis.study import (
    ALPHA,
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
from ..format import format_ci, format_delta, format_tps
from .context import environment_line, machine_suffix, plot_caption, slug

DELTA_COLUMNS = ("Size", "Metric", "Baseline", "New", "Δ", "95% CI", "Verdict")

REF_COLUMN = "Ref Δ"

MIN_PAIRS_FOR_CI = 3

INCORRECT = "✗ incorrect"


@dataclass
class DeltaSection:
    """One machine x comparison x workload, rendered, with what to warn about."""

    blocks: list[Block]
    warnings: list[str]


def delta_cells(row: Any, failed: Sequence[str], new: str) -> tuple[str, str, str]:
    """(Δ, CI, verdict) of one compare() row; a variant that failed correctness is never shown as a speed-up."""
    if failed:
        return "—", "—", INCORRECT if new in failed else f"{INCORRECT} (baseline)"
    if row.n_pairs == 0:
        return "—", "—", "no paired rounds"
    ci = stats.RatioCI(ratio=row.ratio, low=row.low, high=row.high, n=row.n_pairs)
    interval = format_ci(ci) if row.n_pairs >= MIN_PAIRS_FOR_CI else f"n/a (n={row.n_pairs})"
    return format_delta(ci), interval, row.verdict


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
            delta, interval, verdict = delta_cells(row, failed, new)
            medians = format_tps(row.baseline_median), format_tps(row.new_median)
            ref = [_ref_delta(fitting, cell[1], row.metric)] if reference else []
            rows.append((label, row.metric, *medians, delta, *ref, interval, verdict))
    columns = (*DELTA_COLUMNS[:5], *([REF_COLUMN] if reference else []), *DELTA_COLUMNS[5:])
    numeric = frozenset(range(2, len(columns) - 1))
    return Table(columns, tuple(rows), numeric), comparison, notes


def _reason_row(label: str, reason: str, reference: Reference | None) -> tuple[str, ...]:
    return (label, "—", "—", "—", "—", *(["—"] if reference else []), "—", reason)


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
    where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
    blocks: list[Block] = [Heading(f"{pair[0]} → {pair[1]} · {where}", 3), Bullets(tuple(context)), table]
    if notes:
        blocks.append(Bullets(tuple(notes)))
    plotted = comparison[comparison["n_pairs"] > 0]
    if not plotted.empty:
        blocks.append(_delta_figure(study, pair, machine, workload, plotted, labels, reference, out_dir))
    return DeltaSection(blocks, _table_warnings(comparison, f"{pair[0]} → {pair[1]} · {where}"))


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
        "low_pct": (comparison["low"] - 1) * 100,
        "high_pct": (comparison["high"] - 1) * 100,
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
    return Figure(path, f"{title}: median of the paired per-round ratios, with its 95% bootstrap CI")


def _table_warnings(comparison: pd.DataFrame, where: str) -> list[str]:
    warnings = [
        f"too few rounds for a CI: {where}: {r.size} {r.metric} has {r.n_pairs} paired round(s); "
        f"a CI needs at least {MIN_PAIRS_FOR_CI}"
        for r in comparison.itertuples() if 0 < r.n_pairs < MIN_PAIRS_FOR_CI
    ]
    tested = comparison[comparison["p_value"].notna()]
    if not tested.empty:
        m = len(tested)
        best = min(stats.mann_whitney_min_p(a, b) for a, b in zip(tested["n_baseline"], tested["n_new"], strict=True))
        if best * m >= ALPHA:
            needed = next(n for n in range(2, 100) if stats.mann_whitney_min_p(n, n) * m < ALPHA)
            warnings.append(
                f"too few rounds for a verdict: {where}: Mann-Whitney's smallest possible p with these rounds is "
                f"{best:.4f}, and Holm over {m} rows needs p < {ALPHA / m:.4f}, so every verdict stays ≈ whatever "
                f"the CI says; run at least {needed} trials"
            )
    return warnings


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


def method_section() -> list[Block]:
    return [Heading("Method"), Bullets((
        "Warmup trials are excluded from every statistic.",
        "Baseline and New are the medians of each variant's timed rounds; tok/s with a thousands separator from "
        "1,000 and one decimal below.",
        "Δ is the median of the per-round paired ratios new/baseline minus 1 (variants share each round's prompt and "
        "run in alternating order), so drift common to a round cancels.",
        f"95% CI: percentile bootstrap of that median (10,000 resamples, seed {SEED}); n/a below "
        f"{MIN_PAIRS_FOR_CI} paired rounds.",
        f"Verdict: faster or slower only when the CI excludes 0 and the two-sided Mann-Whitney p-value, Holm-corrected "
        f"across the rows of its table, is below {ALPHA}; otherwise ≈. A variant that failed its correctness check "
        f"shows {INCORRECT} instead of a Δ.",
        "Machines and workloads are never pooled: each has its own table.",
    ))]
