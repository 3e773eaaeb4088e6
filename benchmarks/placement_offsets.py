"""What identical builds read in an A/B, and where their workers ran (issue 75): for each
`run --against` results file, the pooled Δ current vs reference per metric (the gate's own rows:
analysis.stats.compare_builds, Holm over the file's rows), the rows that claim a difference
(faster or slower: Holm's interval excludes 0), the control arm's pooled Δ where the run had one,
each worker pair's own Δ, whether the builds' placements differed (analysis.placement), and what
`check` says at each --limit (its own run_check, no history). Old files without worker records
still give their Δs.

    .venv/bin/python benchmarks/placement_offsets.py results/placement/*.jsonl.gz \\
        [--limit 5 --limit 2] --out results/placement/offsets.md
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np

from fusebench.analysis import stats
from fusebench.analysis.placement import summarize_placement
from fusebench.commands.gate_session import CheckRequest, run_check
from fusebench.core.results import read_results

OUTCOMES = {0: "passed", 1: "regressed", 3: "cannot tell"}


def _pooled(rows: list[stats.ComparisonRow], metric: str) -> str:
    (row,) = [r for r in rows if r.variant == stats.ALL_VARIANTS and r.metric == metric]
    ci = row.interval
    return f"{row.delta_pct:+.2f}% [{(ci.low - 1) * 100:+.2f}, {(ci.high - 1) * 100:+.2f}]"


def _pair_deltas(trials, metric: str) -> list[float]:
    """Each worker pair's mean Δ current vs reference (%, all variants' rounds)."""
    timed = stats.timed_trials(trials)
    column = f"{metric}_tps"
    keyed = timed.pivot_table(
        index=["process", "round", "variant"], columns="build", values=column, aggfunc="median"
    ).dropna(subset=["current", "reference"])
    logs = np.log(keyed["current"] / keyed["reference"])
    return [100 * (math.exp(v) - 1) for v in logs.groupby(level="process").mean()]


def _check(path: Path, limit: float) -> str:
    """check's outcome at --max-regression `limit`, with an empty history."""
    with tempfile.TemporaryDirectory() as store:
        outcome = run_check(CheckRequest(path, limit, store))
    return OUTCOMES.get(outcome.exit_code, str(outcome.exit_code))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--limit", type=float, action="append", help="check at this limit (%%)")
    parser.add_argument("--out", type=Path, help="write the table here too")
    args = parser.parse_args()
    limits = args.limit or []
    lines = [
        "| file | rounds (pairs) | Δ prefill (pooled, Holm CI) | Δ gen | claims | control prefill "
        "| control gen | pairs: Δ prefill each | placement |"
        + "".join(f" check −{limit:g}% |" for limit in limits),
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(limits),
    ]
    for path in args.files:
        results = read_results([path])
        trials = results.frame("trial")
        builds = stats.compare_builds(trials)
        control = stats.compare_control(trials)
        summary = summarize_placement(results.worker_records())
        placed = (
            "not recorded"
            if summary is None
            else "alike"
            if summary.alike
            else "differs: " + ", ".join(d.field for d in summary.differences)
        )
        deltas = _pair_deltas(trials, "prefill")
        pairs = ", ".join(f"{d:+.1f}" for d in deltas)
        rounds = max(row.n_pairs for row in builds)
        claims = sum(row.p_holm < stats.ALPHA for row in builds)
        cells = [
            path.name,
            f"{rounds} ({len(deltas)})",
            _pooled(builds, "prefill"),
            _pooled(builds, "gen"),
            f"{claims} of {len(builds)}",
            _pooled(control, "prefill") if control else "-",
            _pooled(control, "gen") if control else "-",
            pairs,
            placed,
            *(_check(path, limit) for limit in limits),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
