"""Precision per second of each workload in a results file: which prompt length and decode steps
decide a row soonest on the machine that ran it.

For every cell and metric: the per-round SD of log(new/baseline) (the outlier rule's pairwise scale,
so one wild round does not decide), the seconds a round's trials took, and 1 / (SD² · seconds): the
rounds a decision needs scale with SD², and each round costs its seconds. Relative to the
experiment's default workload (pp128 tg3) per size, so the column reads "this many times the
precision per second".

    .venv/bin/fusebench run workload-precision --out results/workload-precision.jsonl
    .venv/bin/python benchmarks/workload_precision.py results/workload-precision.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import own_tree  # noqa: F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.inference import pairwise_scale
from fusebench.analysis.stats import round_seconds, timed_trials
from fusebench.core.results import read_results

REFERENCE_WORKLOAD = "pp128 tg3 b1"


def main(path: Path) -> None:
    trials = timed_trials(read_results([path]).frame("trial"))
    pace = round_seconds(trials)
    rows = []
    for (key, size, workload), cell in trials.groupby(
        ["model_key", "size", "workload"], sort=False
    ):
        base = cell[cell["variant"] == "baseline"].set_index("round")
        new = cell[cell["variant"] != "baseline"].set_index("round")
        shared = base.index.intersection(new.index)
        for metric in ("prefill_tps", "gen_tps"):
            r = np.log(new.loc[shared, metric].to_numpy() / base.loc[shared, metric].to_numpy())
            sd = pairwise_scale(r)
            seconds = pace[key, workload]
            rows.append(
                (size, workload, metric.split("_")[0], len(r), sd, seconds, 1.0 / (sd**2 * seconds))
            )
    reference = {
        (size, metric): pps
        for size, workload, metric, *_, pps in rows
        if workload == REFERENCE_WORKLOAD
    }
    print(
        "| size | workload | metric | rounds | SD per round "
        "| s a round | precision/s vs pp128 tg3 |"
    )
    print("|---|---|---|---|---|---|---|")
    for size, workload, metric, n, sd, seconds, pps in rows:
        relative = pps / reference[size, metric] if (size, metric) in reference else float("nan")
        print(
            f"| {size} | {workload} | {metric} | {n} | {sd:.2%} | {seconds:.2f} | {relative:.2f}x |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
