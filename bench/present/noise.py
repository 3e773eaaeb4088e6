"""`fusebench calibrate`'s table: this machine's noise per scope and metric."""

from __future__ import annotations

from ..core.calibration import Band
from .document import Table


def bands_table(bands: dict[str, dict[str, Band]]) -> Table:
    rows = tuple(
        (
            scope,
            metric,
            str(b.comparisons),
            f"{b.mde_pct:.1f}%",
            f"{b.max_aa_slowdown_pct:.1f}%",
            f"±{b.ci_half_width_pct:.1f}%",
        )
        for scope, by_metric in bands.items()
        for metric, b in by_metric.items()
    )
    columns = (
        "Scope",
        "Metric",
        "A/A comparisons",
        "MDE",
        "max A/A slowdown",
        "median CI half-width",
    )
    return Table(columns, rows, numeric=frozenset({2, 3, 4, 5}))
