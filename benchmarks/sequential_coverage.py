"""How fusebench's stopping rule and its intervals behave, simulated at both machines' noise.

The rule is the runner's (analysis.stopping, fusebench.measure.run.cellstop.CellStop): a pilot of 6
rounds, then a look after every round; a cell stops when each of its rows is decided at the table's
Bonferroni level, or at max_rounds. The rows are the product's own paired estimates (outlier rule,
stall rule, confidence sequence) and the verdicts its own Holm table. Each simulated table is one
comparison of the default experiment: 4 cells (sizes), each with a prefill and a gen row, every row
with its own per-round noise.

Noise models (the per-round SD of log(new/baseline) is drawn per row from the machine's range):
- fast VM: normal, 1.3-2.8% (the AVX-512 VM's measured range)
- slow VM: normal, 4-11% (the AVX2 VM's, ../shared/data/slow-vm/default.jsonl)
- slow VM, t(3): the same SDs, Student-t(3) tails
- slow VM, dips: the same SDs, and 5% of trials (either arm) 40% slower
- slow VM, replay: every round's log ratio drawn from the slow VM's own, centred per row
  (tests/fixtures/slow-vm)

For each model and true effect (0, +3, +5, +10, +20%):
- false claims: tables (0%) in which any row reads faster or slower; a table-wise rate, α = 5%
- wrong: rows whose verdict excludes the truth (faster/slower against its sign, or "no change" for
  an effect beyond the margin)
- coverage: rows whose unadjusted 95% interval, at the round the cell stopped, holds the true effect
- rounds: median and 90th percentile of the rounds a cell ran, and the share of cells decided before
  max_rounds

Also the A/B gate (`gate_table`): 3 variants × 2 metrics of the current build against the reference,
decided against a −5% limit, and the share of runs that pass, fail and cannot tell, for identical
builds and a 10% slower one, at max_rounds and at a small round cap.

And between processes (`process_table`): each build's worker process adds its own offset to every
round it runs, SD τ (a multiple of the per-round SD); an A/B of identical builds either keeps one
pair of workers for the whole run (what run --against did before worker_rounds) or starts a fresh
pair every 6 rounds and labels the rounds with their pair (what it does now, analysis.inference
"Between processes"). Per design: coverage of the true Δ at the stopping round (95% interval), the
gate's outcomes, and the rounds it took.

    .venv/bin/python benchmarks/sequential_coverage.py
        the full run (about 15 minutes on 2 cores)
    .venv/bin/python benchmarks/sequential_coverage.py --quick
        a small seeded run, as tests/test_sequential.py
    .venv/bin/python benchmarks/sequential_coverage.py --only processes
        the between-process table alone
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.inference import (  # noqa: E402
    Adjusted,
    VerdictWord,
    adjust,
    paired_estimate,
    verdict,
)
from fusebench.analysis.stopping import Goal, Row, print_level  # noqa: E402

PILOT, CELLS, METRICS, MARGIN_PCT, LIMIT_PCT = 6, 4, 2, 5.0, 5.0
REPLAY_FILES = ("default.jsonl", "ab-identical.jsonl", "ab-softcap-sleeps-15ms.jsonl")
REPLAY_DIR = ROOT / "tests" / "fixtures" / "slow-vm"

Noise = Callable[[np.random.Generator, tuple[int, ...], float], np.ndarray]


def _normal(rng: np.random.Generator, size: tuple[int, ...], sd: float) -> np.ndarray:
    return rng.normal(0.0, sd, size)


def _student_t(rng: np.random.Generator, size: tuple[int, ...], sd: float) -> np.ndarray:
    return sd / math.sqrt(3.0) * rng.standard_t(3, size)  # t(3) has variance 3


def _dips(rng: np.random.Generator, size: tuple[int, ...], sd: float) -> np.ndarray:
    return rng.normal(0.0, sd, size) + np.where(rng.random(size) < 0.05, math.log(0.6), 0.0)


def replay_ratios(folder: Path = REPLAY_DIR) -> np.ndarray:
    """The slow VM's per-round log ratios new/baseline, each row centred on its own mean (its effect
    removed)."""
    rows: dict[tuple, dict[int, dict[str, float]]] = {}
    for name in REPLAY_FILES:
        for line in (folder / name).read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "trial" and not record.get("warmup"):
                key = (name, record["cell"], record.get("build", "current"), record["variant"])
                rows.setdefault(key, {})[record["round"]] = record
    found = []
    for (name, cell, build, variant), rounds in rows.items():
        base = rows.get((name, cell, build, "baseline"))
        if variant == "baseline" or base is None:
            continue
        for metric in ("prefill_tps", "gen_tps"):
            shared = sorted(set(rounds) & set(base))
            r = np.log([rounds[k][metric] / base[k][metric] for k in shared])
            found.append(r - r.mean())
    return np.concatenate(found)


@dataclass(frozen=True)
class Model:
    name: str
    sd_range: tuple[float, float]  # per-round log-ratio SD, drawn per row
    trial_noise: Noise | None  # per trial; None: rounds drawn from the replayed ratios

    def rounds(
        self, rng: np.random.Generator, n: int, effect: float, replay: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(baseline, new) throughputs of one row's n rounds at a true ratio 1 + effect."""
        if self.trial_noise is None:
            log_ratio = rng.choice(replay, n)
            return np.ones(n), np.exp(math.log1p(effect) + log_ratio)
        # a round's ratio holds two trials' noise
        sd_trial = rng.uniform(*self.sd_range) / math.sqrt(2.0)
        base = self.trial_noise(rng, (n,), sd_trial)
        new = self.trial_noise(rng, (n,), sd_trial)
        return np.exp(base), np.exp(math.log1p(effect) + new)


MODELS = (
    Model("fast VM, normal 1.3-2.8%", (0.013, 0.028), _normal),
    Model("slow VM, normal 4-11%", (0.04, 0.11), _normal),
    Model("slow VM, t(3) 4-11%", (0.04, 0.11), _student_t),
    Model("slow VM, dips 4-11%", (0.04, 0.11), _dips),
    Model("slow VM, replayed rounds", (0.0, 0.0), None),
)
EFFECTS = (0.0, 0.03, 0.05, 0.10, 0.20)


def stopped_cell(
    rows: Sequence[tuple[np.ndarray, np.ndarray]],
    goal: Goal,
    alpha: float,
    max_rounds: int,
    min_rounds: int = PILOT,
    labels: np.ndarray | None = None,
) -> int:
    """The round at which the runner's rule stops a cell whose rows' rounds are given (each
    max_rounds long); `labels`: each round's pair of worker processes."""
    for n in range(min_rounds, max_rounds + 1):
        decided = True
        for base, new in rows:
            est = paired_estimate(
                base[:n], new[:n], processes=None if labels is None else labels[:n]
            )
            if not Row(est.mean_log, est.sd_log, est.n, alpha, goal).decided:
                decided = False
                break
        if decided:
            return n
    return max_rounds


class Counts:
    """Counters that add up across the worker processes' parts."""

    def add(self, other: Counts) -> None:
        for field in self.__dataclass_fields__:
            setattr(self, field, getattr(self, field) + getattr(other, field))


CountsT = TypeVar("CountsT", bound=Counts)


@dataclass
class Tally(Counts):
    tables: int = 0
    false_tables: int = 0
    rows: int = 0
    wrong_rows: int = 0
    covered: int = 0
    decided_cells: int = 0
    cells: int = 0


def _wrong(word: VerdictWord, effect: float) -> bool:
    if word is VerdictWord.FASTER:
        return effect <= 0.0
    if word is VerdictWord.SLOWER:
        return effect >= 0.0
    return word is VerdictWord.NO_CHANGE and abs(effect) * 100.0 > MARGIN_PCT


def comparison_tables(
    model: Model, effect: float, tables: int, max_rounds: int, seed: int
) -> tuple[Tally, list[int]]:
    """Simulated comparison tables (4 cells × 2 metrics): the tally and every cell's rounds."""
    rng = np.random.default_rng(seed)
    replay = replay_ratios() if model.trial_noise is None else None
    rows_in_table = CELLS * METRICS
    alpha = 1.0 - print_level(rows_in_table)
    goal = Goal(MARGIN_PCT)
    tally, rounds = Tally(), []
    for _ in range(tables):
        estimates = []
        for _ in range(CELLS):
            rows = [model.rounds(rng, max_rounds, effect, replay) for _ in range(METRICS)]
            n = stopped_cell(rows, goal, alpha, max_rounds)
            rounds.append(n)
            tally.cells += 1
            tally.decided_cells += n < max_rounds or all(
                Row(e.mean_log, e.sd_log, e.n, alpha, goal).decided
                for e in (paired_estimate(b[:n], x[:n]) for b, x in rows)
            )
            for base, new in rows:
                est = paired_estimate(base[:n], new[:n])
                estimates.append(est)
                tally.covered += est.low <= 1.0 + effect <= est.high
        words = [verdict(a, margin_pct=MARGIN_PCT, min_rounds=2).word for a in adjust(estimates)]
        tally.tables += 1
        tally.rows += len(words)
        wrong = [_wrong(w, effect) for w in words]
        tally.wrong_rows += sum(wrong)
        tally.false_tables += effect == 0.0 and any(
            w in (VerdictWord.FASTER, VerdictWord.SLOWER) for w in words
        )
    return tally, rounds


@dataclass
class GateTally(Counts):
    runs: int = 0
    passed: int = 0
    failed: int = 0
    cannot_tell: int = 0

    def judge(self, adjusted: Sequence[Adjusted]) -> None:
        """Count one run's outcome against the limit: failed, passed or cannot tell."""
        edge = 1.0 - LIMIT_PCT / 100.0
        self.runs += 1
        if any(a.high < edge for a in adjusted):
            self.failed += 1
        elif all(a.low >= edge for a in adjusted):
            self.passed += 1
        else:
            self.cannot_tell += 1


def gate_runs(model: Model, slowdown: float, runs: int, max_rounds: int, seed: int) -> GateTally:
    """Simulated A/B gate runs: 3 variants × 2 metrics, current against reference, decided against
    −5%."""
    rng = np.random.default_rng(seed)
    replay = replay_ratios() if model.trial_noise is None else None
    rows_in_table = (3 + 1) * METRICS  # the variants and the pooled row, as the runner counts them
    alpha = 1.0 - print_level(rows_in_table)
    goal = Goal(MARGIN_PCT, limit_pct=LIMIT_PCT)
    tally = GateTally()
    for _ in range(runs):
        rows = [model.rounds(rng, max_rounds, -slowdown, replay) for _ in range(3 * METRICS)]
        n = stopped_cell(rows, goal, alpha, max_rounds)
        tally.judge(adjust([paired_estimate(b[:n], x[:n]) for b, x in rows]))
    return tally


PROCESS_SDS = (0.0, 0.25, 0.5, 1.0)  # τ as a multiple of the per-round SD
WORKER_ROUNDS = 6


@dataclass
class ProcessTally(GateTally):
    rows: int = 0
    covered: int = 0
    rounds: int = 0


def _process_rows(
    rng: np.random.Generator, model: Model, tau: float, fresh_every: int, max_rounds: int
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The gate's 6 rows of identical builds with a process offset per pair of workers: each row's
    rounds, and each round's pair (one pair throughout when fresh_every is 0)."""
    pairs = np.arange(max_rounds) // fresh_every if fresh_every else np.zeros(max_rounds, dtype=int)
    rows = []
    for _ in range(3 * METRICS):
        base, new = model.rounds(rng, max_rounds, 0.0, None)
        sd_round = float(np.std(np.log(new / base), ddof=1))
        # the pair's own offset on this row
        offsets = rng.normal(0.0, tau * sd_round, pairs.max() + 1)
        rows.append((base, new * np.exp(offsets[pairs])))
    return rows, pairs


def process_runs(
    model: Model, tau: float, fresh_every: int, runs: int, max_rounds: int, seed: int
) -> ProcessTally:
    """Simulated A/B runs of identical builds with process offsets: coverage and the gate's
    outcomes."""
    rng = np.random.default_rng(seed)
    alpha = 1.0 - print_level((3 + 1) * METRICS)
    goal = Goal(MARGIN_PCT, limit_pct=LIMIT_PCT)
    tally = ProcessTally()
    for _ in range(runs):
        rows, pairs = _process_rows(rng, model, tau, fresh_every, max_rounds)
        labels = pairs if fresh_every else None
        n = stopped_cell(rows, goal, alpha, max_rounds, labels=labels)
        estimates = [
            paired_estimate(b[:n], x[:n], processes=None if labels is None else labels[:n])
            for b, x in rows
        ]
        tally.judge(adjust(estimates))
        tally.rounds += n
        tally.rows += len(estimates)
        tally.covered += sum(e.low <= 1.0 <= e.high for e in estimates)
    return tally


def _process_job(args: tuple) -> ProcessTally:
    return process_runs(*args)


def run_processes(
    model: Model, tau: float, fresh_every: int, runs: int, max_rounds: int, seed: int, workers: int
) -> ProcessTally:
    return _pooled(
        _process_job, ProcessTally(), (model, tau, fresh_every), runs, max_rounds, seed, workers
    )


def _pooled(
    job: Callable[[tuple], Counts],
    tally: CountsT,
    head: tuple,
    runs: int,
    max_rounds: int,
    seed: int,
    workers: int,
) -> CountsT:
    """`runs` split across `workers` processes, each `job(head + (its runs, max_rounds, its
    seed))`, their counts added up."""
    jobs = [
        (*head, n, max_rounds, seed * 100 + i) for i, n in enumerate(_split(runs, workers)) if n
    ]
    with ProcessPoolExecutor(workers) as pool:
        for part in pool.map(job, jobs):
            tally.add(part)
    return tally


def process_table(runs: int, max_rounds: int, workers: int) -> None:
    print(
        "| noise | process SD τ / round SD | workers | runs | "
        "95% coverage | passed | failed | cannot tell | rounds (mean) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for m, model in enumerate(MODELS[:2]):
        for t, tau in enumerate(PROCESS_SDS):
            for fresh_every in (0, WORKER_ROUNDS):
                r = run_processes(
                    model,
                    tau,
                    fresh_every,
                    runs,
                    max_rounds,
                    seed=5000 + 100 * m + 10 * t + fresh_every,
                    workers=workers,
                )
                design = f"fresh pair every {fresh_every} rounds" if fresh_every else "one pair"
                print(
                    f"| {model.name} | {tau:g} | {design} | {r.runs} | {r.covered / r.rows:.1%} | "
                    f"{r.passed / r.runs:.1%} | {r.failed / r.runs:.1%} | "
                    f"{r.cannot_tell / r.runs:.1%} | {r.rounds / r.runs:.0f} |",
                    flush=True,
                )


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def _tables_job(args: tuple) -> tuple[Tally, list[int]]:
    return comparison_tables(*args)


def _gate_job(args: tuple) -> GateTally:
    return gate_runs(*args)


def run_gate(
    model: Model, slowdown: float, runs: int, max_rounds: int, seed: int, workers: int
) -> GateTally:
    return _pooled(_gate_job, GateTally(), (model, slowdown), runs, max_rounds, seed, workers)


def run_tables(
    model: Model, effect: float, tables: int, max_rounds: int, seed: int, workers: int
) -> tuple[Tally, list[int]]:
    jobs = [
        (model, effect, n, max_rounds, seed * 100 + i)
        for i, n in enumerate(_split(tables, workers))
        if n
    ]
    tally, rounds = Tally(), []
    with ProcessPoolExecutor(workers) as pool:
        for part, more in pool.map(_tables_job, jobs):
            tally.add(part)
            rounds += more
    return tally, rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small, as the test suite runs it")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", choices=("processes",), help="one table alone")
    args = parser.parse_args()
    aa_tables, effect_tables, gate_n = (60, 20, 40) if args.quick else (1000, 150, 200)
    max_rounds = 120
    if args.only == "processes":
        process_table(gate_n, 60, args.workers)
        return
    print(
        "| noise | true Δ | tables | false claims per table | wrong rows | "
        f"95% coverage | rounds (median, p90) | cells decided by {max_rounds} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for m, model in enumerate(MODELS):
        for e, effect in enumerate(EFFECTS):
            tables = aa_tables if effect == 0.0 else effect_tables
            tally, rounds = run_tables(
                model, effect, tables, max_rounds, seed=10 * m + e, workers=args.workers
            )
            false = f"{tally.false_tables / tally.tables:.1%}" if effect == 0.0 else "-"
            print(
                f"| {model.name} | {effect:+.0%} | {tally.tables} | {false} | "
                f"{tally.wrong_rows / tally.rows:.2%} | {tally.covered / tally.rows:.1%} | "
                f"{np.median(rounds):.0f}, {np.percentile(rounds, 90):.0f} | "
                f"{tally.decided_cells / tally.cells:.0%} |",
                flush=True,
            )
    print()
    print("| noise | build | round cap | runs | passed | failed | cannot tell |")
    print("|---|---|---|---|---|---|---|")
    for m, model in enumerate(MODELS):
        for slowdown in (0.0, 0.10):
            for cap in (max_rounds, 12):
                t = run_gate(
                    model,
                    slowdown,
                    gate_n,
                    cap,
                    seed=1000 + 10 * m + int(slowdown * 100) + cap,
                    workers=args.workers,
                )
                name = "identical" if slowdown == 0.0 else f"{slowdown:.0%} slower"
                print(
                    f"| {model.name} | {name} | {cap} | {t.runs} | {t.passed / t.runs:.1%} | "
                    f"{t.failed / t.runs:.1%} | {t.cannot_tell / t.runs:.1%} |",
                    flush=True,
                )
    print()
    process_table(gate_n, 60, args.workers)


if __name__ == "__main__":
    main()
