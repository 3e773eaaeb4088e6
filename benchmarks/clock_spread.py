"""Each clock's per-round spread in real A/B runs, per metric: what the schedule pilot's clock
choice is meant to predict. For every run file of each folder given (gate campaigns, A/As): the
per-round log ratio reference/current per variant, each variant's mean removed (so a built-in
slowdown does not count as spread), on the wall clock and the process CPU clock, for prefill and
gen. Per folder: the pooled SD per clock and metric, and in how many of its runs' metric rows the
CPU clock scattered less than the wall clock.

    .venv/bin/python benchmarks/clock_spread.py results/gate-ab-16 results/gate-ab-20
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from duet_aa import CLOCKS, log_ratios


def folder_line(folder: Path) -> str:
    paths = sorted(folder.glob("s*.jsonl*")) or sorted(folder.glob("*.jsonl*"))
    # each file read once per column: (clock, metric) -> every run's (ratios, s a round, variants)
    found = {
        (clock, metric): [log_ratios(path, column) for path in paths]
        for clock, columns in CLOCKS.items()
        for metric, column in columns.items()
    }
    sds: dict[tuple[str, str], float] = {}
    for key, runs in found.items():
        pooled = np.concatenate([ratios for ratios, _, _ in runs])
        dof = pooled.size - sum(variants for _, _, variants in runs)  # a mean per run and variant
        sds[key] = math.sqrt(float(np.sum(pooled**2)) / dof)
    cpu_quieter = sum(
        np.std(cpu[0]) < np.std(wall[0])
        for metric in ("prefill", "gen")
        for cpu, wall in zip(found[("CPU", metric)], found[("wall", metric)], strict=True)
    )
    cells = " | ".join(f"{100 * sds[(c, m)]:.2f}%" for c in CLOCKS for m in ("prefill", "gen"))
    return f"| {folder.name} | {len(paths)} | {cells} | {cpu_quieter} of {2 * len(paths)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    print(
        "| runs | files | wall prefill SD | wall gen SD | CPU prefill SD | CPU gen SD "
        "| CPU quieter |"
    )
    print("|---|---|---|---|---|---|---|")
    for folder in args.folders:
        print(folder_line(folder))


if __name__ == "__main__":
    main()
