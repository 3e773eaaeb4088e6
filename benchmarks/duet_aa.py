"""Duet against sequential rounds on this machine: an A/A of the `ci` experiment in each schedule.

Each run is `fusebench run ci --against HEAD --trials N --schedule S` (this tree against its own
last commit: identical code, so every build Δ is noise), the schedules alternating run by run so a
slow stretch of the machine lands on both. Per schedule, clock (wall, process CPU) and metric
(prefill, gen): the SD of the per-round log ratio current/reference over every variant's rounds
(each run's and variant's mean removed), the seconds a round took (the stop record's pace: loads of
fresh worker pairs included, as a user pays them), and the precision per second 1 / (SD² · s) per
variant row. The table compares the schedules on the same rounds, workload and machine.

    .venv/bin/python benchmarks/duet_aa.py --rounds 20 --repeats 2 --out results/duet-aa
    .venv/bin/python benchmarks/duet_aa.py --out results/duet-aa --summary   (re-read the files)
"""

from __future__ import annotations

import argparse
import math
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.core.results import read_results  # noqa: E402
from fusebench.measure.machine.env import child_command  # noqa: E402

SCHEDULES = ("sequential", "duet")
CLOCKS = {
    "wall": {"prefill": "prefill_s", "gen": "gen_s"},
    "CPU": {"prefill": "prefill_cpu_s", "gen": "gen_cpu_s"},
}


def run(schedule: str, rounds: int, out: Path) -> None:
    command = [
        *child_command("fusebench"),  # this tree's fusebench, as its workers are started
        "run",
        "ci",
        "--against",
        "HEAD",
        "--trials",
        str(rounds),
        "--schedule",
        schedule,
        "--out",
        str(out),
        "--quiet",
    ]
    print(" ".join(command[2:]), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def log_ratios(path: Path, seconds: str) -> tuple[np.ndarray, float, int]:
    """Every variant's per-round log(reference seconds / current seconds), each variant's mean
    removed; the stop record's seconds a round; and the rows (variants)."""
    results = read_results([path])
    trials = [t for t in results.of_kind("trial") if not t["warmup"]]
    by_key = {(t["build"], t["variant"], t["round"]): t[seconds] for t in trials}
    centred, variants = [], sorted({t["variant"] for t in trials})
    for variant in variants:
        rounds = sorted({r for b, v, r in by_key if v == variant and b == "current"})
        r = np.array(
            [
                math.log(by_key[("reference", variant, k)] / by_key[("current", variant, k)])
                for k in rounds
                if ("reference", variant, k) in by_key
            ]
        )
        centred.append(r - r.mean())
    (stop,) = results.of_kind("stop")
    return np.concatenate(centred), float(stop["round_s"]), len(variants)


def summary(out: Path) -> list[str]:
    files = {s: sorted(out.glob(f"{s}-*.jsonl*")) for s in SCHEDULES}
    lines = [
        "| schedule | runs | rounds | s a round | clock | prefill SD | gen SD "
        "| prefill precision/s | gen precision/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    precision: dict[tuple[str, str, str], float] = {}
    for schedule, paths in files.items():
        if not paths:
            continue
        for clock, columns in CLOCKS.items():
            sds, pace, rounds = {}, [], 0
            for metric, column in columns.items():
                found = [log_ratios(p, column) for p in paths]
                pooled = np.concatenate([f[0] for f in found])
                dof = pooled.size - sum(f[2] for f in found)  # a mean removed per run and row
                sds[metric] = math.sqrt(float(np.sum(pooled**2)) / dof)
                pace = [f[1] for f in found]
                rounds = pooled.size // found[0][2]
            seconds = float(np.mean(pace))
            for metric, sd in sds.items():
                precision[(schedule, clock, metric)] = 1.0 / (sd**2 * seconds)
            lines.append(
                f"| {schedule} | {len(paths)} | {rounds} | {seconds:.2f} | {clock} | "
                f"{100 * sds['prefill']:.2f}% | {100 * sds['gen']:.2f}% | "
                f"{precision[(schedule, clock, 'prefill')]:,.0f} | "
                f"{precision[(schedule, clock, 'gen')]:,.0f} |"
            )
    if all(files.values()):
        lines.append("")
        for clock in CLOCKS:
            gains = []
            for metric in ("prefill", "gen"):
                gain = (
                    precision[("duet", clock, metric)] / precision[("sequential", "wall", metric)]
                )
                gains.append(f"{metric} {gain:.2f}x")
            lines.append(
                f"- duet on the {clock} clock against sequential on the wall clock, precision per "
                f"second: {', '.join(gains)}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "duet-aa")
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summary:
        done = {s: len(list(args.out.glob(f"{s}-*.jsonl*"))) for s in SCHEDULES}
        for i in range(args.repeats):
            for schedule in SCHEDULES if i % 2 == 0 else SCHEDULES[::-1]:
                run(schedule, args.rounds, args.out / f"{schedule}-{done[schedule] + i + 1}.jsonl")
    text = "\n".join(summary(args.out))
    print(text)
    (args.out / "summary.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
