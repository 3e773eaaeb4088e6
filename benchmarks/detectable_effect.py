"""The smallest effect this machine can detect, by number of rounds, from a real A/A run.

Reads an `experiments/aa.yaml` results file (two identically configured variants interleaved exactly
as an A/B is, so every true Δ is 0), takes each comparison's per-round log-ratio SD, and prints the
95% CI half-width a paired comparison reaches at 5, 10, 20 and 40 rounds on this machine (the
t-interval that analysis.inference uses), beside the half-width the run itself reached. An effect
smaller than the half-width cannot be told from this noise.

    python3 benchmarks/detectable_effect.py results/aa-<time>.jsonl
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from scipy import stats as sps

from fusebench.analysis.inference import paired_estimate, rounds_needed
from fusebench.analysis.stats import compare
from fusebench.analysis.study import build_study
from fusebench.commands.sources import load_results
from fusebench.present.document import Table, markdown_table

ROUNDS = (5, 10, 20, 40)


def half_width_pct(sd_log: float, n: int) -> float:
    """The 95% t-interval's half-width on the ratio scale, at a ratio of 1."""
    return 100 * math.sinh(sps.t.ppf(0.975, n - 1) * sd_log / math.sqrt(n))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    study = build_study(load_results([args.results]))
    rows = []
    for baseline, new in study.planned:
        table = compare(study.timed, baseline, new, ["prefill", "gen"])
        for row in table:
            pairs = study.timed[study.timed["variant"].isin([baseline, new])]
            wide = pairs.pivot_table(index="round", columns="variant", values=f"{row.metric}_tps")
            sd = paired_estimate(wide[baseline], wide[new]).sd_log
            rows.append(
                (
                    f"{new} vs {baseline}",
                    row.metric,
                    str(row.n_pairs),
                    f"±{row.half_width_pct:.1f}%",
                    f"{row.delta_pct:+.1f}%",
                    *(f"±{half_width_pct(sd, n):.1f}%" for n in ROUNDS),
                    str(rounds_needed(sd, 2.0)),
                )
            )
    columns = (
        "A/A comparison",
        "Metric",
        "Rounds run",
        "Reached (Holm)",
        "A/A Δ",
        *(f"n = {n}" for n in ROUNDS),
        "Rounds for ±2%",
    )
    print(markdown_table(Table(columns, tuple(rows), frozenset(range(2, len(columns))))))


if __name__ == "__main__":
    main()
