"""`fusebench project`'s output: tables of projected tok/s, Δs and fitted per-layer costs (text or
markdown), or a JSON list with one object per size × variant.

--format json prints a list of objects: {"size", "machine", "preset", "dtype", "quantize",
"workload", "variant", "layers", "full_layers", "prefill_tps", "prefill_low", "prefill_high",
"gen_tps", "gen_low", "gen_high", "fitted_on", "note", "fit", "deltas"}. The tok/s bounds are the
95% interval (null where unbounded or undefined); "fit" holds each metric's fitted seconds per term
with their 95% half-widths, its dof and χ²/dof; "deltas" each comparison this row is the new side
of: {"baseline", "metric", "delta_pct", "ci_low_pct", "ci_high_pct"}.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from ..analysis.projection import (
    TERMS,
    DepthCheck,
    LayerFit,
    ProjectedDelta,
    ProjectedRow,
    Projection,
    RateInterval,
)
from .document import Block, Heading, Paragraph, Table
from .format import format_ci, format_delta, format_rate, format_tps, json_number

COST_COLUMNS = {
    "fixed": "Fixed ms",
    "sliding": "Sliding ms/layer",
    "full": "Full ms/layer",
    "shared": "KV-shared extra ms/layer",
}


def method_line(projection: Projection) -> str:
    """What a projected table is, in one paragraph: the label every projection carries."""
    where = f"{projection.layers} layers" if projection.layers else "each model's full depth"
    fitted = "; ".join(
        dict.fromkeys(
            f"{row.scope.size} on depths {_depths(row.fitted_on)}" for row in projection.rows
        )
    )
    return (
        f"Projected to {where}, not measured. A step's time (the prefill, or one decode step) "
        "is fitted as fixed + a cost per sliding-attention layer + one per full-attention layer "
        "(+ the extra of a KV-shared layer, where the model has them) by weighted least squares "
        "over the measured depths, then evaluated at the projected depth's layer counts. It "
        "assumes each layer of a type costs the same at every depth. 95% intervals come from the "
        "fit (Student t with the Welch–Satterthwaite dof of the depths' rounds; where the depths "
        "scatter beyond their noise, χ²/dof > 1, widened by its root and t with at most the "
        "residual dof). Each run measures a depth in a worker process of its own, and processes "
        "differ by more than their rounds say: where a depth was measured in several runs "
        "(project several results files of one experiment together), every depth's SE comes from "
        "how far its runs differ, pooled over the depths (the Fit column's runs ±SD), "
        "and a Δ pairs the two variants of each run, since a process's speed cancels in their "
        "ratio; with 1 run per depth the SEs are the rounds' alone and leave that spread out "
        "(run the experiment again to include it), and a Δ treats the two fits as independent "
        f"(conservative). Fitted: {fitted}."
    )


def blocks(projection: Projection) -> list[Block]:
    title = f"at {projection.layers} layers" if projection.layers else "at full depth"
    out: list[Block] = [
        Heading(f"fusebench project: {title} (projected)", 2),
        Paragraph(method_line(projection)),
    ]
    for machine, workload in dict.fromkeys(
        (row.scope.machine, row.scope.workload) for row in projection.rows
    ):
        rows = [
            r for r in projection.rows if (r.scope.machine, r.scope.workload) == (machine, workload)
        ]
        deltas = [
            d
            for d in projection.deltas
            if (d.scope.machine, d.scope.workload) == (machine, workload)
        ]
        out += [Heading(f"{workload} · {machine}", 3), rates_table(rows)]
        if deltas:
            out.append(delta_table(deltas))
        out += [
            Paragraph(
                "Fitted cost of each term per step, "
                "± its 95% half-width, and how well the depths fit:"
            ),
            costs_table([fit for row in rows for fit in row.fits]),
        ]
    held_out = [c for c in projection.checks if not c.in_fit]
    if held_out:
        out += [Heading("Held out of the fit: measured vs projected", 3), held_out_table(held_out)]
    return out


def rates_table(rows: Sequence[ProjectedRow]) -> Table:
    columns = (
        "Size",
        "Variant",
        "Prefill tok/s",
        "95% interval",
        "Gen tok/s",
        "95% interval",
        "Fitted on depths",
    )
    cells = tuple(
        (row.size, row.variant, *_rate(row.prefill), *_rate(row.gen), _depths(row.fitted_on))
        for row in rows
    )
    return Table(columns, cells, frozenset({2, 3, 4, 5}))


def delta_table(deltas: Sequence[ProjectedDelta]) -> Table:
    """Size | Comparison | Metric | Baseline | New | Δ | 95% CI: the projected counterpart of the
    report's Δ table."""
    columns = ("Size", "Comparison", "Metric", "Baseline", "New", "Δ", "95% CI")
    cells = tuple(
        (
            d.size,
            f"{d.baseline} → {d.new}",
            d.metric,
            format_tps(d.baseline_tps),
            format_tps(d.new_tps),
            format_delta(d),
            format_ci(d),
        )
        for d in deltas
    )
    return Table(columns, cells, frozenset({3, 4, 5, 6}))


def costs_table(fits: Sequence[LayerFit]) -> Table:
    """The fitted seconds of each term, ± their 95% half-width, and how well the depths fit."""
    terms = [t for t in TERMS if any(t in fit.terms for fit in fits)]
    columns = ("Size", "Variant", "Metric", *(COST_COLUMNS[t] for t in terms), "Fit")
    cells = tuple(
        (
            fit.series.scope.size,
            fit.series.variant,
            fit.series.metric,
            *(_cost(fit, t) for t in terms),
            fit.residual_note,
        )
        for fit in fits
    )
    return Table(columns, cells, frozenset(range(3, 3 + len(terms))))


def held_out_table(checks: Sequence[DepthCheck]) -> Table:
    """Measured against projected tok/s at depths held out of the fit. The interval is a prediction
    interval: the projection's with the measurement's own noise added, so Inside is a fair test of
    the fit."""
    columns = (
        "Size",
        "Variant",
        "Metric",
        "Measured tok/s",
        "Projected tok/s",
        "95% prediction interval",
        "Error",
        "Inside",
    )
    cells = tuple(
        (
            c.size,
            c.fit.series.variant,
            c.fit.series.metric,
            format_tps(c.measured_tps),
            format_tps(c.fitted.tps),
            _rate(c.predicted)[1],
            f"{c.error_pct:+.1f}%",
            "yes" if c.within else "no",
        )
        for c in checks
    )
    return Table(columns, cells, frozenset({3, 4, 5, 6}))


def _rate(rate: RateInterval | None) -> tuple[str, str]:
    if rate is None:
        return "—", "—"
    high = "∞" if rate.high == math.inf else format_tps(rate.high)
    return format_tps(rate.tps), f"[{format_tps(rate.low)}, {high}]"


def _cost(fit: LayerFit, term: str) -> str:
    if term not in fit.terms:
        return "—"
    seconds, half = fit.cost(term)
    return f"{format_rate(seconds * 1e3)} ± {format_rate(half * 1e3)}"


def _depths(depths: Sequence[int]) -> str:
    return ", ".join(map(str, depths))


# --- json -----------------------------------------------------------------------------------------


def to_json(projection: Projection) -> str:
    return json.dumps(
        [_row_json(row, projection.deltas) for row in projection.rows], indent=1, ensure_ascii=False
    )


def _row_json(row: ProjectedRow, deltas: Sequence[ProjectedDelta]) -> dict[str, Any]:
    scope = row.scope
    return {
        "size": row.size,
        "machine": scope.machine,
        "preset": scope.preset,
        "dtype": scope.dtype,
        "quantize": scope.quantize,
        "workload": scope.workload,
        "variant": row.variant,
        "layers": row.layers,
        "full_layers": scope.full_layers,
        **_rate_json("prefill", row.prefill),
        **_rate_json("gen", row.gen),
        "fitted_on": list(row.fitted_on),
        "note": row.residual_note,
        "fit": {fit.series.metric: _fit_json(fit) for fit in row.fits},
        "deltas": [
            {
                "baseline": d.baseline,
                "metric": d.metric,
                "delta_pct": json_number(d.delta_pct),
                "ci_low_pct": json_number(d.low_pct),
                "ci_high_pct": json_number(d.high_pct),
            }
            for d in deltas
            if d.scope == scope and d.new == row.variant
        ],
    }


def _rate_json(metric: str, rate: RateInterval | None) -> dict[str, float | None]:
    if rate is None:
        return {f"{metric}_tps": None, f"{metric}_low": None, f"{metric}_high": None}
    return {
        f"{metric}_tps": json_number(rate.tps),
        f"{metric}_low": json_number(rate.low),
        f"{metric}_high": json_number(rate.high),
    }


def _fit_json(fit: LayerFit) -> dict[str, Any]:
    costs = {f"{term}_s": fit.cost(term) for term in fit.terms}
    return {
        **{name: value for name, (value, _) in costs.items()},
        **{f"{name}_half_width": half for name, (_, half) in costs.items()},
        "dof": fit.dof,
        "reduced_chi2": fit.reduced_chi2,
    }
