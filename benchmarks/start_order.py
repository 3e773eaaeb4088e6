"""Does the worker started second run slower? (issue 66: the gate-ab-30 offset)

`run --against` starts a cell's two workers together, one per build, and replaces them with a
fresh pair every worker_rounds rounds. In gate-ab-30 (the Xeon VM, 11 hours up) two identical builds
read +1.4% to +5.6%: the reference's worker, always started second, ran 8.6-11.6% slower for its
whole life in some pairs. This reads A/A runs of identical builds and groups each pair of worker
processes by which build's worker started first, then prints each pair's offset (the current
build's rounds over the reference's, in % of the geometric mean) and, over pairs, the mean offset
of the worker started second against the first, with a t interval over pairs.

A file's start order is given after it: `schedule` (the current build's worker first: every run
before the alternation), `reversed` (the reference's first: a throwaway copy's patch), or
`alternating` (since the alternation: a cell's odd fresh pairs start reversed). No timing: it reads
files.

    python benchmarks/start_order.py results/gate-ab-30/s0-01.jsonl.gz=schedule \
        results/start-order/reversed.jsonl.gz=reversed [--out FILE.md]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from scipy import stats

ORDERS = ("schedule", "reversed", "alternating")
METRICS = ("prefill_tps", "gen_tps")


def read(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as file:
        return [json.loads(line) for line in file if line.strip()]


def pairs_of(records: list[dict], order: str) -> list[dict]:
    """Each worker pair's offsets (current over reference, %) and whether it started reversed (a
    file from before `process` was recorded: one pair a cell)."""
    trials = [r for r in records if r.get("kind") == "trial" and not r.get("warmup")]
    rounds: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for t in trials:
        rounds[(t["cell"], t.get("process"), t["variant"], t["round"])][t["build"]] = t
    by_pair: dict[tuple, list[dict]] = defaultdict(list)
    for (cell, process, _, index), builds in rounds.items():
        if {"current", "reference"} <= builds.keys():
            by_pair[(cell, process)].append({"round": index, **builds})
    out = []
    for cell in sorted({cell for cell, _ in by_pair}):
        mine = sorted((k for k in by_pair if k[0] == cell), key=lambda k: first_round(by_pair[k]))
        for index, key in enumerate(mine):
            reversed_ = order == "reversed" or (order == "alternating" and index % 2 == 1)
            matched = by_pair[key]
            offsets = {m: 100 * statistics.mean(log_ratio(r, m) for r in matched) for m in METRICS}
            out.append({"cell": cell, "pair": index, "reversed": reversed_, "n": len(matched),
                        **offsets})  # fmt: skip
    return out


def log_ratio(matched_round: dict, metric: str) -> float:
    return math.log(matched_round["current"][metric] / matched_round["reference"][metric])


def first_round(matched: list[dict]) -> int:
    return min(r["round"] for r in matched)


def second_over_first(pair: dict, metric: str) -> float:
    """The offset of the worker started second against the first (%)."""
    return -pair[metric] if not pair["reversed"] else pair[metric]


def interval(values: list[float]) -> str:
    if len(values) < 2:
        return "n/a"
    mean, sd = statistics.mean(values), statistics.stdev(values)
    half = stats.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))
    return f"{mean:+.2f}% [{mean - half:+.2f}%, {mean + half:+.2f}%]"


def report(files: list[tuple[Path, str]]) -> list[str]:
    lines = ["| file | started first | pairs (≥6 rounds) | current vs reference, prefill / gen |",
             "|---|---|---|---|"]  # fmt: skip
    every: list[dict] = []
    for path, order in files:
        pairs = [p for p in pairs_of(read(path), order) if p["n"] >= 6]
        every += pairs
        offsets = ", ".join(f"{p['prefill_tps']:+.1f}/{p['gen_tps']:+.1f}" for p in pairs)
        lines.append(f"| {path} | {order} | {len(pairs)} | {offsets} |")
    lines += ["", "Over every pair, the worker started second against the first (mean, 95% t "
              "interval over pairs):", ""]  # fmt: skip
    for metric in METRICS:
        values = [second_over_first(p, metric) for p in every]
        slow = sum(v < -5 for v in values)
        fast = sum(v > 5 for v in values)
        lines.append(
            f"- {metric}: {interval(values)} over {len(values)} pairs; the second started >5% "
            f"slower in {slow}, >5% faster in {fast}"
        )
    for label, chosen in (("current first", False), ("reference first", True)):
        group = [p for p in every if p["reversed"] == chosen]
        lines.append(
            f"- pairs with the {label}: {len(group)}; current vs reference prefill "
            f"{interval([p['prefill_tps'] for p in group])}, gen "
            f"{interval([p['gen_tps'] for p in group])}"
        )
    return lines


def parse(text: str) -> tuple[Path, str]:
    path, _, order = text.rpartition("=")
    if order not in ORDERS or not path:
        raise argparse.ArgumentTypeError(f"{text}: give FILE=ORDER, ORDER one of {ORDERS}")
    return Path(path), order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=parse, help="FILE=ORDER (schedule, reversed, "
                        "alternating)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    text = "\n".join(report(args.files)) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
