"""The fixed-n interval after a first run's two stages, simulated: does it still cover?

On a machine's first run no row's spread is known, so the plan gives the first size
MIN_PLANNED_ROUNDS (8) rounds; once they are done its rounds are fixed again on the spreads they
showed (planning.RunPlanner.fix_again), and every later size is planned on that spread too. The
count depends on the first stage's spreads alone, never on a Δ; the row's interval is then the
fixed-n t interval over all its rounds. Stein's two-stage design keeps exact coverage by using
the first stage's spread alone; this one uses all rounds, so this checks by simulation, with the
product's own estimates (outlier and stall rules), Holm table and verdict words, that:

- false claims: A/A tables of the main job's 16 rows (4 sizes x 4 rows: 2 comparisons x prefill,
  gen) in which any row reads faster or slower stay within the stated 5%, the first size two-stage
  (8 rounds, then the rounds its rows' median spread asks, `rounds_for` at 80% a row, at most
  --cap) and the others at the rounds the first size's spread asks; beside them the same tables
  with the first size kept at its 8 rounds (one stage), the control;
- coverage: the first size's rows whose unadjusted 95% interval holds the true Δ (0), against
  the same rows at a fixed 8 rounds.

Noise models: benchmarks/sequential_coverage.py's (normal 1.3-2.8% the fast VM's; normal, t(3)
tails, 5% dips at the slow VM's 4-11%; the slow VM's rounds replayed), and the Intel Xeon's
main-job rounds replayed at 1.3-5% (benchmarks/rounds_to_decide.py's residuals).

    .venv/bin/python benchmarks/two_stage_coverage.py [--tables 4000] [--cap 40] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)
from rounds_to_decide import REPLAYED, emit, replayed_residuals  # noqa: E402
from sequential_coverage import MODELS, Model, replay_ratios  # noqa: E402

from fusebench.analysis.inference import adjust, paired_estimate, verdict  # noqa: E402
from fusebench.analysis.planner import rounds_for  # noqa: E402
from fusebench.analysis.stopping import Goal  # noqa: E402
from fusebench.core.experiment import MIN_PLANNED_ROUNDS  # noqa: E402

SIZES, ROWS_A_SIZE, MARGIN_PCT = 4, 4, 5.0
ROWS = SIZES * ROWS_A_SIZE
ALPHA = 0.05 / ROWS  # the level the plan plans a row at
XEON = Model("Intel Xeon, its rounds replayed, 1.3-5%", (0.013, 0.05), None)


def draw_rows(model: Model, rng: np.random.Generator, n: int, pool: np.ndarray) -> np.ndarray:
    """One size's rows, (ROWS_A_SIZE, n) log ratios; replayed pools at the model's SD range
    where it has one (the Xeon's unit-SD residuals), else as sequential_coverage draws them."""
    if model.trial_noise is None and model.sd_range != (0.0, 0.0):
        sds = rng.uniform(*model.sd_range, (ROWS_A_SIZE, 1))
        return sds * rng.choice(pool, (ROWS_A_SIZE, n))
    rows = [model.rounds(rng, n, 0.0, pool) for _ in range(ROWS_A_SIZE)]
    return np.array([np.log(new / base) for base, new in rows])


def second_stage(first: np.ndarray, cap: int) -> int:
    """The rounds the first stage's spreads ask: its rows' median SD, planned as the plan does."""
    spread = statistics.median(float(row.std(ddof=1)) for row in first)
    asked = rounds_for(spread, ALPHA, Goal(MARGIN_PCT)) or cap
    return min(cap, max(MIN_PLANNED_ROUNDS, asked))


def estimates(rows: np.ndarray):
    return [paired_estimate(np.ones(row.size), np.exp(row), fixed_rounds=True) for row in rows]


def claims(table: list) -> bool:
    """Whether an A/A table reads any row faster or slower."""
    words = [verdict(row, margin_pct=MARGIN_PCT).word.value for row in adjust(table)]
    return any(word in ("faster", "slower") for word in words)


def one_table(
    model: Model, rng: np.random.Generator, pool: np.ndarray, cap: int
) -> tuple[bool, bool, int, int, int]:
    """(a false claim, one with the first size kept at 8 rounds, first-size rows covered
    two-stage, covered at 8, the rounds it ran)."""
    first = draw_rows(model, rng, cap, pool)
    n = second_stage(first[:, :MIN_PLANNED_ROUNDS], cap)
    two_stage, single = estimates(first[:, :n]), estimates(first[:, :MIN_PLANNED_ROUNDS])
    others = [e for _ in range(SIZES - 1) for e in estimates(draw_rows(model, rng, n, pool))]
    covers = sum(e.low <= 1.0 <= e.high for e in two_stage)
    fixed = sum(e.low <= 1.0 <= e.high for e in single)
    return claims(two_stage + others), claims(single + others), covers, fixed, n


def simulate(model: Model, tables: int, cap: int, seed: int, pool: np.ndarray) -> str:
    rng = np.random.default_rng(seed)
    runs = [one_table(model, rng, pool, cap) for _ in range(tables)]
    claimed, claimed_single = (sum(r[i] for r in runs) / tables for i in (0, 1))
    covered, fixed = (sum(r[i] for r in runs) / (tables * ROWS_A_SIZE) for i in (2, 3))
    rounds = [r[4] for r in runs]
    se = math.sqrt(0.05 * 0.95 / tables)
    return (
        f"| {model.name} | {claimed:.1%} (±{2 * se:.1%}) | {claimed_single:.1%} | "
        f"{covered:.1%} | {fixed:.1%} | {int(np.median(rounds))}, "
        f"{int(np.percentile(rounds, 90))} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=4000)
    parser.add_argument("--cap", type=int, default=40, help="the most rounds a size gets (40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    slow, xeon = replay_ratios(), replayed_residuals(REPLAYED)
    lines = [
        "# Two stages on a first run: false claims and coverage",
        "",
        f"`python benchmarks/two_stage_coverage.py --tables {args.tables} --cap {args.cap} "
        f"--seed {args.seed}`: A/A tables of {ROWS} rows, the first size two-stage. Stated: at "
        "most 5% of tables claim a row; 95% of rows' unadjusted intervals cover.",
        "",
        "| noise | A/A false claims (2 SE) | the same tables, the first size kept at "
        f"{MIN_PLANNED_ROUNDS} | first size covered, two stages | the same rows at "
        f"{MIN_PLANNED_ROUNDS} rounds | rounds: median, 90th percentile |",
        "|---|---|---|---|---|---|",
    ]
    for i, model in enumerate([*MODELS, XEON]):
        pool = xeon if model is XEON else slow
        lines.append(simulate(model, args.tables, args.cap, args.seed + i, pool))
        print(lines[-1], flush=True)
    emit(lines, args.out)


if __name__ == "__main__":
    main()
