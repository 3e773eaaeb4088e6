"""Does a duet measure the same Δ as sequential trials? Each case runs in both schedules
(alternating, the same fixed rounds), and each row's Δ is compared across the schedules.

Co-running arms share memory bandwidth and caches, which can shrink a fusion's Δ (a fused kernel
saves memory traffic). Cases, each `fusebench run EXPERIMENT --trials N --schedule S`:
- tenfold: experiments/tenfold-softcap.yaml, the softcap computed ten times over (a known slowdown);
- geglu-e4b: experiments/duet-geglu-e4b.yaml, compiled against unfused GeGLU on E4B's shapes.
Per row: Δ with its fixed-n 95% interval in each schedule, their difference and its SE (the runs
are independent), so |difference| / SE above 2 flags a disagreement.

    .venv/bin/python benchmarks/duet_effects.py --rounds 20 --out results/duet-effects
    .venv/bin/python benchmarks/duet_effects.py --out results/duet-effects --summary
"""

from __future__ import annotations

import argparse
import math
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.inference import paired_estimate  # noqa: E402
from fusebench.core.results import read_results  # noqa: E402
from fusebench.measure.machine.env import child_command  # noqa: E402

CASES = {
    "tenfold": (ROOT / "experiments" / "tenfold-softcap.yaml", "baseline", "tenfold"),
    "geglu-e4b": (ROOT / "experiments" / "duet-geglu-e4b.yaml", "baseline", "compiled"),
}
SCHEDULES = ("sequential", "duet")
METRICS = {"prefill": "prefill_tps", "gen": "gen_tps"}


def run(experiment: Path, schedule: str, rounds: int, out: Path) -> None:
    command = [*child_command("fusebench"), "run", str(experiment), "--trials", str(rounds)]
    command += ["--schedule", schedule, "--out", str(out), "--quiet"]
    print(" ".join(command[2:]), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def estimate(path: Path, baseline: str, new: str, column: str):
    trials = [t for t in read_results([path]).of_kind("trial") if not t["warmup"]]
    side = {(t["variant"], t["round"]): t[column] for t in trials}
    rounds = sorted(r for v, r in side if v == new and (baseline, r) in side)
    return paired_estimate(
        [side[(baseline, r)] for r in rounds], [side[(new, r)] for r in rounds], fixed_rounds=True
    )


def _cell(e) -> str:
    return f"{e.delta_pct:+.1f}% [{e.low_pct:+.1f}%, {e.high_pct:+.1f}%] (n {e.n})"


def summary(out: Path) -> list[str]:
    lines = [
        "| case | metric | sequential Δ [95% CI] | duet Δ [95% CI] | duet − sequential | "
        "difference / SE |",
        "|---|---|---|---|---|---|",
    ]
    for case, (_, baseline, new) in CASES.items():
        duet = next(iter(sorted(out.glob(f"{case}-duet.jsonl*"))), out / f"{case}-duet.jsonl")
        # the sequential run at the run's own thread choice, and one at 1 thread where it was made
        for sequential in sorted(out.glob(f"{case}-sequential*.jsonl*")):
            if not duet.exists():
                continue
            stem = sequential.name.split(".")[0]
            label = case + stem.removeprefix(f"{case}-sequential").replace("-", " ")
            threads = read_results([sequential]).of_kind("run")[0]["env"]["threads"]
            for metric, column in METRICS.items():
                seq, two = (estimate(p, baseline, new, column) for p in (sequential, duet))
                diff = two.mean_log - seq.mean_log
                se = math.hypot(two.se_log, seq.se_log)
                lines.append(
                    f"| {label} | {metric} | {_cell(seq)} on {threads} thread(s) | {_cell(two)} | "
                    f"{100 * np.expm1(diff):+.1f}% | {diff / se:+.1f} |"
                )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "duet-effects")
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summary:
        for i, case in enumerate(args.cases.split(",")):
            experiment = CASES[case][0]
            for schedule in SCHEDULES if i % 2 == 0 else SCHEDULES[::-1]:
                run(experiment, schedule, args.rounds, args.out / f"{case}-{schedule}.jsonl")
    text = "\n".join(summary(args.out))
    print(text)
    (args.out / "summary.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
