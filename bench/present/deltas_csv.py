"""deltas.csv: the delta tables, machine-readable (for pandas users): one row per machine x size x
workload x metric x comparison, with the measured Δ, its Holm-adjusted 95% interval and verdict, and
the expected Δ the ops that differ account for (empty where the run timed no op shares)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ..analysis.shares import shares_on
from ..analysis.study import Study, compare_scope, on, ordered_workloads

COLUMNS = (
    "machine",
    "size",
    "model_key",
    "workload",
    "metric",
    "baseline",
    "new",
    "baseline_tps",
    "new_tps",
    "delta_pct",
    "low_pct",
    "high_pct",
    "rounds",
    "verdict",
    "expected_delta_pct",
    "expected_low_pct",
    "expected_high_pct",
)


def deltas_frame(study: Study, comparisons: Sequence[tuple[str, str]]) -> pd.DataFrame:
    rows = []
    for pair in comparisons:
        for machine in study.machines:
            shares = shares_on(study, machine)
            for workload in ordered_workloads([on(study.timed, machine)]):
                for row in compare_scope(study, machine, workload, pair, family=comparisons):
                    expected = shares.expected_delta(
                        f"{row.model_key}|{workload}", *pair, row.metric
                    )
                    rows.append(
                        (
                            machine,
                            row.size,
                            row.model_key,
                            workload,
                            row.metric,
                            row.baseline,
                            row.new,
                            row.baseline_gmean,
                            row.new_gmean,
                            row.delta_pct,
                            (row.adj_low - 1) * 100,
                            (row.adj_high - 1) * 100,
                            row.n_pairs,
                            row.verdict.word.value if row.verdict else None,
                            *(
                                (expected.delta_pct, expected.low_pct, expected.high_pct)
                                if expected
                                else (None,) * 3
                            ),
                        )
                    )
    return pd.DataFrame(rows, columns=list(COLUMNS))
