"""How well an A/B's first screen foresaw the limit its rounds could decide (issue 75, item 5):
`run --against` says before its first round, from the rows' scatter the cell's last A/B on this
machine showed (measure.run.pairspreads), the widest half-width its rounds are expected to give
(analysis.allocation.widest_half_width_pct). Replayed here on consecutive A/Bs of one machine:
each file's rows (every variant x metric, current against reference, each round's worker pair)
give σ and τ, the next file's design (its rounds and rounds a pair) the forecast, and the next
file's own rows, at the same level (Bonferroni over the table's rows, as the run prints them),
the half-width it got.

    .venv/bin/python benchmarks/limit_forecast.py FILE1 FILE2 ... [--rows 8]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from fusebench.analysis import stats
from fusebench.analysis.allocation import Components, components, widest_half_width_pct
from fusebench.analysis.inference import paired_estimate
from fusebench.core.results import read_results


def _rows(path: Path) -> dict[str, tuple[list[float], list[float], list[int]]]:
    """Each variant x metric row: reference and current tok/s round by round, and each round's
    worker pair."""
    timed = stats.timed_trials(read_results([path]).frame("trial"))
    found = {}
    for metric in ("prefill", "gen"):
        sides = timed.pivot_table(
            index=["variant", "round", "process"], columns="build", values=f"{metric}_tps"
        ).dropna(subset=["current", "reference"])
        for variant, part in sides.groupby(level="variant"):
            pairs = list(part.index.get_level_values("process"))
            found[f"{variant} {metric}"] = (
                list(part["reference"]),
                list(part["current"]),
                pairs,
            )
    return found


def _design(rows: dict) -> tuple[int, int]:
    """A file's rounds and rounds a pair."""
    _, _, pairs = next(iter(rows.values()))
    return len(pairs), math.ceil(len(pairs) / len(set(pairs)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--rows", type=int, default=8, help="the table's rows (Bonferroni)")
    args = parser.parse_args()
    alpha = 0.05 / args.rows
    print("| file | rounds (a pair) | forecast widest ± | got widest ± | its row |")
    print("|---|---|---|---|---|")
    previous: dict[str, Components] | None = None
    for path in args.files:
        rows = _rows(path)
        rounds, k = _design(rows)
        widths = {}
        for label, (base, new, pairs) in rows.items():
            est = paired_estimate(base, new, processes=pairs, fixed_rounds=True)
            low, high = est.interval(1 - alpha)
            widths[label] = (high - low) / 2 * 100
        widest = max(widths, key=widths.__getitem__)
        forecast = (
            f"±{widest_half_width_pct(previous.values(), k, rounds, alpha):.1f}%"
            if previous
            else "-"
        )
        print(f"| {path.name} | {rounds} ({k}) | {forecast} | ±{widths[widest]:.1f}% | {widest} |")
        previous = {
            label: c
            for label, (base, new, pairs) in rows.items()
            if (c := components(list(np.log(np.array(new) / np.array(base))), pairs))
        }


if __name__ == "__main__":
    main()
