"""The CPU clock's intervals, simulated: do they cover at the stated rate once the row's fallback to
the wall clock (analysis.clocks: a paired t test of the two clocks' Δs at DISAGREE_P) is part of the
rule, and what do they buy?

Per round, each arm's CPU seconds carry the trial's own noise; its wall seconds add time the
process did not run (stolen or taken by other processes). Rows go through the product's own
clocked_estimate at fixed n (the fixed-n t interval) and, for runs that stop on their data, the
confidence sequence (fixed_rounds False), and count:
- coverage: rows whose 95% interval holds the true Δ (the same on both clocks here);
- fallbacks: rows the clocks' disagreement sent to the wall clock;
- width: the median half-width on the CPU clock against the wall clock's, same rounds.
Noise: normal trial noise at 3% and 8%, stolen time exponential with mean 0%, 5% and 15% of a
trial, and the A/A rounds of results/duet-aa replayed (each round's wall and CPU log ratios kept
together, resampled with replacement and centred on each clock's own mean, so the truth is 0).

    .venv/bin/python benchmarks/clock_coverage.py [--rows 4000] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.clocks import clocked_estimate  # noqa: E402
from fusebench.core.fileformat import Clock  # noqa: E402
from fusebench.core.results import read_results  # noqa: E402

ROUNDS = (5, 10, 20, 40)
DELTA = math.log(1 / 0.9)  # the new arm takes 10% less time


def synthetic(rng: np.random.Generator, n: int, trial_sd: float, stolen: float):
    """Each arm's (wall, CPU) seconds over n rounds."""
    cpu = np.exp(rng.normal(0.0, trial_sd, (2, n)))
    cpu[1] *= math.exp(-DELTA)
    wall = cpu * (1.0 + rng.exponential(stolen, (2, n))) if stolen else cpu.copy()
    return wall, cpu, DELTA


def replayed_rounds() -> np.ndarray:
    """results/duet-aa's A/A rounds: (wall, CPU) log ratio current/reference, prefill and gen."""
    found = []
    for path in sorted((ROOT / "results" / "duet-aa").glob("*.jsonl*")):
        trials = [t for t in read_results([path]).of_kind("trial") if not t["warmup"]]
        sides: dict[tuple, dict[str, dict]] = {}
        for t in trials:
            sides.setdefault((t["cell"], t["variant"], t["round"]), {})[t["build"]] = t
        for pair in sides.values():
            if len(pair) == 2:
                new, base = pair["current"], pair["reference"]
                for wall, cpu in (("prefill_s", "prefill_cpu_s"), ("gen_s", "gen_cpu_s")):
                    found.append((math.log(base[wall] / new[wall]), math.log(base[cpu] / new[cpu])))
    rounds = np.array(found)
    return rounds - rounds.mean(axis=0)  # each clock's truth: 0


def replay(rng: np.random.Generator, n: int, rounds: np.ndarray):
    picked = rounds[rng.integers(0, len(rounds), n)]
    wall = np.vstack([np.ones(n), np.exp(-picked[:, 0])])
    cpu = np.vstack([np.ones(n), np.exp(-picked[:, 1])])
    return wall, cpu, 0.0


def row(wall: np.ndarray, cpu: np.ndarray, fixed: bool):
    on_cpu = clocked_estimate(
        1 / wall[0], 1 / wall[1], 1 / cpu[0], 1 / cpu[1], Clock.CPU, fixed_rounds=fixed
    )
    on_wall = clocked_estimate(1 / wall[0], 1 / wall[1], None, None, Clock.WALL, fixed_rounds=fixed)
    return on_cpu, on_wall


def simulate(draw, n: int, rows: int, fixed: bool, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    covered = fallbacks = 0
    widths = []
    for _ in range(rows):
        wall, cpu, truth = draw(rng, n)
        on_cpu, on_wall = row(wall, cpu, fixed)
        e = on_cpu.estimate
        covered += math.log(e.low) <= truth <= math.log(e.high)
        fallbacks += on_cpu.clock == Clock.WALL
        widths.append(
            (math.log(e.high) - math.log(e.low))
            / (math.log(on_wall.estimate.high) - math.log(on_wall.estimate.low))
        )
    return {
        "coverage": covered / rows,
        "fallbacks": fallbacks / rows,
        "width": float(np.median(widths)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rounds = replayed_rounds()
    models = {
        f"trial SD {sd:.0%}, stolen {stolen:.0%}": (
            lambda rng, n, sd=sd, stolen=stolen: synthetic(rng, n, sd, stolen)
        )
        for sd in (0.03, 0.08)
        for stolen in (0.0, 0.05, 0.15)
    }
    models[f"duet-aa replayed ({len(rounds)} rounds)"] = lambda rng, n: replay(rng, n, rounds)
    lines = [
        f"Rows a cell: {args.rows}. Each cell: coverage of the true Δ by the 95% interval on the "
        "CPU clock with its fallback · fallbacks to the wall clock · median width CPU / wall on "
        "the same rounds.",
        "",
        "| noise | interval | " + " | ".join(f"n = {n}" for n in ROUNDS) + " |",
        "|---|---|" + "---|" * len(ROUNDS),
    ]
    for seed, (name, draw) in enumerate(models.items()):
        for fixed in (True, False):
            cells = []
            for n in ROUNDS:
                r = simulate(draw, n, args.rows, fixed, seed * 100 + n)
                cells.append(f"{r['coverage']:.1%} · {r['fallbacks']:.1%} · {r['width']:.2f}x")
            kind = "fixed-n t" if fixed else "sequence"
            lines.append(f"| {name} | {kind} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
