"""The fixed-n interval fusebench gives a run whose rounds were fixed in advance, simulated.

A run with `trials: N` (no stopping rule) never looked at its data, so its rows get the fixed-n
Student t interval on the mean log ratio (analysis.inference, `fixed_rounds`), not the confidence
sequence. This checks, with the product's own estimates (outlier rule, stall rule), Holm table and
verdict words, that at the round counts PRs use:
- false claims: A/A tables of 8 rows (4 sizes x prefill and gen, as PR 15587's) in which any row
  reads faster or slower, against the stated 5%;
- coverage: rows whose unadjusted 95% interval holds the true Δ;
- PR 15587: tables whose eight rows (+4.8% to +16.6%) all read faster at 1% trial noise.

Noise models: benchmarks/sequential_coverage.py's (a row's per-round SD of log(new/baseline)
drawn from each machine's range: normal 1.3-2.8% on the AVX-512 VM; normal, Student-t(3) tails, and
5% of trials 40% slower at the AVX2 VM's 4-11%; and the AVX2 VM's own rounds replayed).

    .venv/bin/python benchmarks/fixed_rounds_coverage.py [--tables 4000] [--rounds 3,5,8,12,20]
                                                         [--out FILE]

The gate's `trials: budget` fixes 30-60 rounds before its first: `--rounds 40,60`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)
from sequential_coverage import MODELS, Model, replay_ratios  # noqa: E402

from fusebench.analysis.inference import adjust, paired_estimate, verdict  # noqa: E402

ROWS = 8
ROUNDS = (3, 5, 8, 12, 20)
PR15587_DELTAS = np.log1p(np.array([16.6, 15.0, 15.8, 11.6, 10.5, 6.1, 11.7, 4.8]) / 100)


def draw(model: Model, rng: np.random.Generator, n: int, replay: np.ndarray) -> np.ndarray:
    """One A/A table's log ratios, (rows, rounds), each row at its own noise."""
    rows = [model.rounds(rng, n, 0.0, replay) for _ in range(ROWS)]
    return np.array([np.log(new / base) for base, new in rows])


def table(log_ratios: np.ndarray) -> tuple[list[str], list[tuple[float, float]]]:
    """The product's verdicts and unadjusted 95% intervals (log units) for one table."""
    estimates = [
        paired_estimate(np.ones(row.size), np.exp(row), fixed_rounds=True) for row in log_ratios
    ]
    words = [verdict(row, margin_pct=5.0).word for row in adjust(estimates)]
    return words, [(np.log(e.low), np.log(e.high)) for e in estimates]


def simulate(model: Model, n: int, tables: int, seed: int) -> tuple[float, float]:
    """False-claim rate of A/A tables, and per-row coverage of the true Δ (0)."""
    rng = np.random.default_rng(seed)
    replay = replay_ratios()
    claims, covered = 0, 0
    for _ in range(tables):
        words, intervals = table(draw(model, rng, n, replay))
        claims += any(word in ("faster", "slower") for word in words)
        covered += sum(low <= 0.0 <= high for low, high in intervals)
    return claims / tables, covered / (tables * ROWS)


def pr15587_power(n: int, tables: int, seed: int) -> float:
    """Tables at 1% trial noise whose eight rows all read faster."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(tables):
        noise = rng.normal(0, 0.01, (ROWS, n)) - rng.normal(0, 0.01, (ROWS, n))
        words, _ = table(PR15587_DELTAS[:, None] + noise)
        hits += words == ["faster"] * ROWS
    return hits / tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", default=",".join(map(str, ROUNDS)), help="comma-separated")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rounds = tuple(int(n) for n in args.rounds.split(","))
    lines = [
        "# Fixed-n intervals: false claims and coverage at fixed round counts",
        "",
        f"`python benchmarks/fixed_rounds_coverage.py --tables {args.tables} --seed {args.seed} "
        f"--rounds {args.rounds}`: "
        f"{args.tables} tables of {ROWS} rows per cell; the product's paired estimate with "
        "`fixed_rounds=True`, Holm across the table, margin 5%. Stated: at most 5% of A/A "
        "tables claim a row (any faster/slower); 95% of rows' unadjusted intervals cover.",
        "",
        "| noise | " + " | ".join(f"n = {n}" for n in rounds) + " |",
        "|---|" + "---|" * len(rounds),
    ]
    for model in MODELS:
        cells = []
        for n in rounds:
            claims, coverage = simulate(model, n, args.tables, args.seed + n)
            cells.append(f"{claims:.1%} / {coverage:.1%}")
        lines.append(f"| {model.name} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    lines += [
        "",
        "Each cell: false-claim rate of A/A tables / coverage of rows.",
        "",
        "PR 15587's eight rows (+4.8% to +16.6%) at 1% trial noise, tables with all eight faster: "
        + ", ".join(f"n = {n}: {pr15587_power(n, 1000, args.seed):.1%}" for n in rounds),
    ]
    print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
