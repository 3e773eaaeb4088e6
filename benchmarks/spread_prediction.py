"""How well does a plan's spread forecast the next run's? Each row's per-round spread (the SD of
its rounds' log ratios) in a series of runs of one experiment on one machine, in time order,
forecast before each run from the runs before it: by the last run's spread alone (the plan until
2026-12-05) and by the product's pooling over the last runs (measure.run.planning.pool_spreads,
POOLED_RUNS); and, for the sizes a run measures after its first, by the rows the run measured
before them (the product's plan since issue 64: the machine's noise now). The error of a
forecast is |log(forecast / spread)|, averaged over every row that has one.

    .venv/bin/python benchmarks/spread_prediction.py results/plan-zen4/default-*.jsonl.gz \\
        results/newcomer-zen4/*.jsonl.gz results/threads-zen4/default-t1.jsonl.gz \\
        results/threads-weigh-zen4/default-auto-*.jsonl.gz
    .venv/bin/python benchmarks/spread_prediction.py results/newcomer-xeon/*.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.measure.run.planning import POOLED_RUNS, pool_spreads  # noqa: E402

MIN_ROUNDS = 6  # a row with fewer rounds has no spread worth forecasting


def row_spreads(path: Path) -> tuple[float, dict[str, float]]:
    """When the run's first timed trial started, and each row's per-round spread, the rows in the
    order the run measured their models."""
    rounds: dict[tuple[str, int], dict[tuple[str, str], dict]] = defaultdict(dict)
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if record["kind"] == "trial" and not record["warmup"]:
                arm = (record.get("build", "current"), record["variant"])
                rounds[(record["model"], record["round"])][arm] = record
    logs: dict[str, list[float]] = defaultdict(list)
    for (model, _), arms in rounds.items():
        for (build, variant), trial in arms.items():
            # a row: a variant against the baseline in one build, or a build against the reference
            against = ("reference", variant) if build != "reference" else None
            if build == "current" and variant != "baseline" and ("reference", variant) not in arms:
                against = ("current", "baseline")
            if against not in arms:
                continue
            for metric in ("prefill", "gen"):
                ratio = trial[f"{metric}_tps"] / arms[against][f"{metric}_tps"]
                logs[f"{model} {build} {variant} vs {against} {metric}"].append(math.log(ratio))
    first: dict[str, float] = {}  # model -> when its first timed trial started
    for (model, _), arms in rounds.items():
        started = min(t["started_unix_s"] for t in arms.values())
        first[model] = min(first.get(model, started), started)
    order = sorted(logs, key=lambda row: first[row.split(" ")[0]])
    spreads = {
        row: float(np.std(logs[row], ddof=1)) for row in order if len(logs[row]) >= MIN_ROUNDS
    }
    return min(first.values()), spreads


def _model(row: str) -> str:
    return row.split(" ")[0]


def forecast_errors(runs: list[dict[str, float]]) -> dict[str, list[float]]:
    """Each forecast's errors over the rows that have one. Besides the last run and the pool, on
    the sizes a run measures after its first (those a plan fixes with the run's own rows known):
    the pool scaled by how this run's earlier sizes' rows compare with their pools (the machine's
    noise now), and those rows' median spread alone (what an unmeasured size is planned at)."""
    last: dict[str, float] = {}
    pooled: dict[str, tuple[float, int]] = {}  # row -> (spread, runs it stands for)
    pool = f"pooled (POOLED_RUNS = {POOLED_RUNS})"
    later = {
        pool + ", later sizes": [],
        "pooled x this run's level, later sizes": [],
        "this run's earlier sizes' median, later sizes": [],
        "geometric mean of the two above, later sizes": [],
    }
    errors: dict[str, list[float]] = {
        "last run": [],
        pool: [],
        "every row's pool, median": [],
        **later,
    }
    for spreads in runs:
        for row, sd in spreads.items():
            # the rows of the sizes this run measured before this row's
            before = list(spreads)[: list(spreads).index(row)]
            earlier = [r for r in before if _model(r) != _model(row)]
            if row in last:
                errors["last run"].append(abs(math.log(last[row] / sd)))
                errors[pool].append(abs(math.log(pooled[row][0] / sd)))
                every = float(np.median([p for p, _ in pooled.values()]))
                errors["every row's pool, median"].append(abs(math.log(every / sd)))
            if row not in last or not earlier:
                continue
            level = [math.log(spreads[r] / pooled[r][0]) for r in earlier if r in pooled]
            scaled = pooled[row][0] * math.exp(float(np.median(level))) if level else pooled[row][0]
            median = float(np.median([spreads[r] for r in earlier]))
            errors[pool + ", later sizes"].append(abs(math.log(pooled[row][0] / sd)))
            errors["pooled x this run's level, later sizes"].append(abs(math.log(scaled / sd)))
            errors["this run's earlier sizes' median, later sizes"].append(
                abs(math.log(median / sd))
            )
            errors["geometric mean of the two above, later sizes"].append(
                abs(math.log(math.sqrt(median * scaled) / sd))
            )
        for row, sd in spreads.items():
            if row in pooled:
                earlier_sd, count = pooled[row]
                pooled[row] = (
                    pool_spreads({row: earlier_sd}, count, {row: sd})[row],
                    min(count, POOLED_RUNS - 1) + 1,
                )
            else:
                pooled[row] = (sd, 1)
            last[row] = sd
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    runs = sorted(((*row_spreads(path), path.name) for path in args.files), key=lambda r: r[0])
    print(f"{len(runs)} runs, in time order: {', '.join(name for _, _, name in runs)}")
    print()
    print("| forecast | rows forecast | mean error | median error |")
    print("|---|---|---|---|")
    for name, errors in forecast_errors([spreads for _, spreads, _ in runs]).items():
        print(
            f"| {name} | {len(errors)} | {np.mean(errors):.3f} (x{math.exp(np.mean(errors)):.2f})"
            f" | {np.median(errors):.3f} |"
        )


if __name__ == "__main__":
    main()
