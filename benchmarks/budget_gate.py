"""The A/B gate with its rounds fixed from the budget (`trials: budget`) against rounds added until
its rows are decided (`trials: auto`), simulated at both machines' noise.

Each simulated run is the gate's table (benchmarks/sequential_coverage.py's `gate_runs`: 3
variants × 2 metrics of the current build against the reference, judged against a −5% limit) for
identical builds and a 10% slower one. `auto`: the runner's stopping rule (a 6-round pilot, then a
look every round, confidence sequences) capped at the budget's rounds; the real rule also stops a
cell "out of reach" before that, which only lowers its share of decided runs. `budget`: exactly the
budget's rounds and the fixed-n paired t interval, as a run whose count was fixed before its first
timed round gets. The intervals are the product's own (analysis.inference), Holm-adjusted.

    .venv/bin/python benchmarks/budget_gate.py [--runs 400] [--rounds 20,40] [--out FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)
from sequential_coverage import (  # noqa: E402
    LIMIT_PCT,
    MARGIN_PCT,
    METRICS,
    MODELS,
    GateTally,
    replay_ratios,
    stopped_cell,
)

from fusebench.analysis.inference import adjust, paired_estimate  # noqa: E402
from fusebench.analysis.stopping import Goal, print_level  # noqa: E402

SLOWDOWNS = (0.0, 0.10)


def gate_runs(model, slowdown: float, runs: int, rounds: int, fixed: bool, seed: int) -> GateTally:
    """`runs` simulated gate runs of `rounds` rounds at most; `fixed`: all of them and the fixed-n
    interval, else the stopping rule and confidence sequences."""
    rng = np.random.default_rng(seed)
    replay = replay_ratios() if model.trial_noise is None else None
    alpha = 1.0 - print_level((3 + 1) * METRICS)
    goal = Goal(MARGIN_PCT, limit_pct=LIMIT_PCT)
    tally = GateTally()
    for _ in range(runs):
        rows = [model.rounds(rng, rounds, -slowdown, replay) for _ in range(3 * METRICS)]
        n = rounds if fixed else stopped_cell(rows, goal, alpha, rounds)
        estimates = [paired_estimate(b[:n], x[:n], fixed_rounds=fixed) for b, x in rows]
        tally.judge(adjust(estimates))
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--rounds", default="20,40", help="the budget's rounds, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = parser.parse_args()
    lines = [
        f"{args.runs} simulated gate runs a row (seed {args.seed}); share passed / regressed / "
        "cannot tell",
        "",
        "| noise | rounds | builds | auto (stopping rule, CS) | budget (fixed n, t) |",
        "|---|---|---|---|---|",
    ]
    for model in MODELS:
        for rounds in map(int, args.rounds.split(",")):
            for slowdown in SLOWDOWNS:
                cells = []
                for fixed in (False, True):
                    t = gate_runs(model, slowdown, args.runs, rounds, fixed, args.seed)
                    cells.append(
                        f"{t.passed / t.runs:.0%} / {t.failed / t.runs:.0%} / "
                        f"{t.cannot_tell / t.runs:.0%}"
                    )
                builds = "identical" if slowdown == 0 else f"{slowdown:.0%} slower"
                lines.append(f"| {model.name} | {rounds} | {builds} | {' | '.join(cells)} |")
                print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
