"""How many rounds a size needs before the main job's 16 rows are decided, at a given spread.

The main job decides a row when its Holm-adjusted interval lies within ±5% ("no change") or
excludes 0 (faster, slower): a table of 16 rows at a 5% family error. Issue 64 bounds the time of
a run that decides all 16 by 1.25 x (8 rounds of each size) + 30 s. This measures, with the
product's own estimates (outlier and stall rules), Holm table and verdict words, what 8 rounds
(and others) decide when no row has an effect (the CPU's case: every fusion reads "no change"):

- rows decided and the share of tables whose 16 rows are all decided, by the rows' per-round
  log-ratio SD, for three noise shapes: normal; Student-t(3) scaled to the SD; and the Intel
  Xeon's own main-job rounds replayed (each row's rounds centred and scaled to unit SD, pooled,
  then drawn and scaled to the SD: their tails kept);
- beside them what the plan expects (analysis.planner: each row at Bonferroni's α/16, which Holm
  never exceeds) and the rounds it plans for that spread (`rounds_for`, 80% a row).

    .venv/bin/python benchmarks/rounds_to_decide.py [--tables 600] [--seed 0] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.inference import (  # noqa: E402
    VerdictWord,
    adjust,
    paired_estimate,
    verdict,
)
from fusebench.analysis.planner import decide_probability, rounds_for  # noqa: E402
from fusebench.analysis.stopping import Goal  # noqa: E402

ROWS = 16  # the main job's table: 4 sizes x prefill, gen x 2 comparisons
MARGIN_PCT = 5.0
SDS = (0.015, 0.02, 0.025, 0.03, 0.035)
ROUNDS = (6, 8, 10, 12, 14)
REPLAYED = sorted((ROOT / "results" / "newcomer-xeon").glob("caches-*.jsonl.gz"))

Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]  # unit-SD log ratios


def replayed_residuals(files: list[Path]) -> np.ndarray:
    """Every main-job row's per-round log ratios in `files`, each row centred on its mean and
    scaled to unit SD (rows of fewer than 6 rounds left out)."""
    rows: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for path in files:
        with gzip.open(path, "rt") as lines:
            for line in lines:
                record = json.loads(line)
                if record.get("kind") == "trial" and not record.get("warmup"):
                    key = (path.name, record["cell"], record["variant"])
                    rows[key][record["round"]] = record
    found = []
    for (name, cell, variant), rounds in rows.items():
        base = rows.get((name, cell, "baseline"))
        if variant == "baseline" or base is None:
            continue
        shared = sorted(set(rounds) & set(base))
        for metric in ("prefill_tps", "gen_tps"):
            logs = np.log([rounds[r][metric] / base[r][metric] for r in shared])
            if logs.size >= 6 and logs.std(ddof=1) > 0:
                found.append((logs - logs.mean()) / logs.std(ddof=1))
    return np.concatenate(found)


def noise_shapes(residuals: np.ndarray) -> dict[str, Draw]:
    return {
        "normal": lambda rng, shape: rng.standard_normal(shape),
        "t(3)": lambda rng, shape: rng.standard_t(3, shape) / np.sqrt(3.0),
        "Xeon rounds replayed": lambda rng, shape: rng.choice(residuals, shape),
    }


def decided(log_ratios: np.ndarray) -> int:
    """The rows of one table the product decides (every word but inconclusive)."""
    estimates = [
        paired_estimate(np.ones(row.size), np.exp(row), fixed_rounds=True) for row in log_ratios
    ]
    words = [verdict(row, margin_pct=MARGIN_PCT).word for row in adjust(estimates)]
    return sum(word is not VerdictWord.INCONCLUSIVE for word in words)


def simulate(draw: Draw, sd: float, n: int, tables: int, seed: int) -> tuple[float, float]:
    """(mean rows decided, share of tables with all 16 decided) of A/A tables."""
    rng = np.random.default_rng(seed)
    counts = np.array([decided(sd * draw(rng, (ROWS, n))) for _ in range(tables)])
    return float(counts.mean()), float(np.mean(counts == ROWS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=600, help="A/A tables a point (600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    residuals = replayed_residuals(REPLAYED)
    goal, alpha = Goal(MARGIN_PCT), 0.05 / ROWS
    lines = [
        f"# Rows of {ROWS} decided at Δ = 0, {args.tables} tables a point, seed {args.seed}",
        "",
        f"Replayed: {residuals.size} rounds of {len(REPLAYED)} main-job runs "
        "(results/newcomer-xeon, Intel Xeon).",
        "",
        "| noise | SD a round | rounds | rows decided | all 16 decided | plan expects | "
        "plan's rounds (80% a row) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, draw in noise_shapes(residuals).items():
        for sd in SDS:
            planned = rounds_for(sd, alpha, goal)
            for n in ROUNDS:
                rows, whole = simulate(draw, sd, n, args.tables, args.seed)
                expects = ROWS * decide_probability(sd, n, alpha, goal)
                lines.append(
                    f"| {name} | {sd:.1%} | {n} | {rows:.1f} | {whole:.0%} | {expects:.1f} | "
                    f"{planned} |"
                )
            print(lines[-1], flush=True)
    emit(lines, args.out)


def emit(lines: list[str], out: Path | None) -> None:
    """The table, printed, and written to `out` where given."""
    text = "\n".join(lines) + "\n"
    if out:
        out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
