"""What a run's worst rounds coincide with: the machine beside each trial (steal_s, others_cpu_s,
recorded by the worker since 2026-12-05) in the worst tenth of rounds against the rest.

A round's badness is its largest |log ratio − the row's median| over the rows it pairs (prefill and
gen of each comparison), in units of that row's robust spread. For the worst tenth and for the rest:
the mean stolen and other-process CPU seconds per second of trial, and the share of rounds in which
either arm had more than THRESHOLD of a core beside it. A signal that knows no arm (steal, others'
CPU) that the worst rounds show and the rest do not could mark pairs to re-run; one they share with
the rest explains nothing.

    .venv/bin/python benchmarks/stalls.py results/plan-zen4/default-plan-stalls.jsonl.gz
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.core.results import read_results  # noqa: E402

THRESHOLD = 0.05  # cores beside a trial that count as "busy"


def rounds_of(path: Path) -> list[dict]:
    """Each timed round (cell, round): its trials by variant."""
    by = defaultdict(dict)
    for t in read_results([path]).of_kind("trial"):
        if not t["warmup"] and t.get("others_cpu_s") is not None:
            by[(t["cell"], t["round"])][t["variant"]] = t
    return [dict(variants, cell=cell) for (cell, _), variants in by.items()]


def badness(rounds: list[dict], baseline: str) -> list[float]:
    """Each round's worst row deviation, in robust spreads of its row."""
    rows = defaultdict(list)  # (cell, variant, metric) -> [(round index, log ratio)]
    for i, r in enumerate(rounds):
        for variant, t in r.items():
            if variant in ("cell", baseline) or baseline not in r:
                continue
            for metric in ("prefill", "gen"):
                if t.get(f"{metric}_tps") and r[baseline].get(f"{metric}_tps"):
                    ratio = t[f"{metric}_tps"] / r[baseline][f"{metric}_tps"]
                    rows[(r["cell"], variant, metric)].append((i, float(np.log(ratio))))
    worst = [0.0] * len(rounds)
    for values in rows.values():
        x = np.array([v for _, v in values])
        centre = float(np.median(x))
        scale = max(1.4826 * float(np.median(np.abs(x - centre))), 1e-4)
        for i, v in values:
            worst[i] = max(worst[i], abs(v - centre) / scale)
    return worst


def beside(r: dict) -> tuple[float, float]:
    """The round's trials' stolen and other-CPU cores (seconds beside per second of trial)."""
    trials = [t for v, t in r.items() if v != "cell"]
    span = sum(t["prefill_s"] + (t["gen_s"] or 0.0) for t in trials)
    return (
        sum(t["steal_s"] for t in trials) / span,
        sum(t["others_cpu_s"] for t in trials) / span,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--baseline", default="baseline")
    args = parser.parse_args()
    for path in args.results:
        rounds = rounds_of(path)
        if not rounds:
            print(f"{path}: no trial records steal_s and others_cpu_s (before 2026-12-05)")
            continue
        bad = badness(rounds, args.baseline)
        cut = float(np.quantile(bad, 0.9))
        groups = {
            "worst tenth": [r for r, b in zip(rounds, bad, strict=True) if b >= cut],
            "the rest": [r for r, b in zip(rounds, bad, strict=True) if b < cut],
        }
        print(f"{path}: {len(rounds)} rounds; the worst tenth deviate >= {cut:.1f} robust SDs")
        print("| rounds | n | steal (cores) | others' CPU (cores) | rounds with a busy arm |")
        print("|---|---|---|---|---|")
        for name, group in groups.items():
            if not group:
                continue
            steal, others = zip(*(beside(r) for r in group), strict=True)
            busy = sum(
                any(
                    t["others_cpu_s"] / (t["prefill_s"] + (t["gen_s"] or 0.0)) > THRESHOLD
                    for v, t in r.items()
                    if v != "cell"
                )
                for r in group
            )
            print(
                f"| {name} | {len(group)} | {statistics.fmean(steal):.3f} | "
                f"{statistics.fmean(others):.3f} | {busy} of {len(group)} |"
            )


if __name__ == "__main__":
    main()
