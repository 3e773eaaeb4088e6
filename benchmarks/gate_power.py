"""How often does `fusebench check` cry wolf, and how small a slowdown does it catch, on this
machine?

    python3 benchmarks/gate_power.py [--runs 'results/ci-runs/ci-*.jsonl*' ...]
                                     [--max-regression 10]
                                     [--baseline results/baselines/cpu-ci.jsonl.gz] [--noise FILE]
                                     [--variant compiled] [--factors 0.95,0.9,0.85,0.8,0.7,0.6,0.5]

Reads real, unchanged `fusebench run experiments/ci.yaml` results files and checks each against the
baseline exactly as CI does (fusebench.commands.gate_session.run_check: the threshold, plus this
machine's noise calibration when it exists), skipping the run the baseline was saved from:
- false alarms: unchanged runs the gate failed;
- power: the same runs with one variant's prefill_tps and gen_tps multiplied by each factor (warmups
  included, so the copy looks like a run of a slower build) count as detected when a verdict on that
  variant (its tok/s or its speedup) fails, split by which of the two caught it. A failure elsewhere
  in a doctored run is counted as a false alarm, not a detection.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import sys
import tempfile
from pathlib import Path

from fusebench.analysis.gate import Check, GateOutcome
from fusebench.commands.check import DEFAULT_MAX_REGRESSION_PCT
from fusebench.commands.gate_session import CheckRequest, run_check
from fusebench.core.results import read_results
from fusebench.present.document import Table, markdown_table
from fusebench.present.gate import limits_line

DEFAULT_FACTORS = "0.95,0.90,0.85,0.80,0.70,0.60,0.50"


def doctor(source: Path, target: Path, variant: str, factor: float) -> Path:
    """A copy of a results file in which `variant` runs `factor` times as fast."""
    lines = []
    data = source.read_bytes()
    for line in (gzip.decompress(data) if source.suffix == ".gz" else data).decode().splitlines():
        record = json.loads(line)
        if record.get("kind") == "trial" and record.get("variant") == variant:
            for column in ("prefill_tps", "gen_tps"):
                if record.get(column) is not None:
                    record[column] *= factor
        lines.append(json.dumps(record))
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def check(results: Path, options: argparse.Namespace) -> GateOutcome:
    return run_check(
        CheckRequest(
            results=results,
            baseline=str(options.baseline),
            store=options.store,
            max_regression=options.max_regression,
            noise=options.noise,
        )
    )


def hits(outcome: GateOutcome, variant: str) -> tuple[set[Check], bool]:
    """(the checks that failed `variant`: Check.TPS, Check.SPEEDUP; whether a verdict on anything
    else failed)."""
    on_variant = {v.check for v in outcome.failures if v.variant.split("/")[0] == variant}
    elsewhere = any(v.variant.split("/")[0] != variant for v in outcome.failures)
    return on_variant, elsewhere


def baseline_source_run(baseline: Path) -> set[str]:
    return set(read_results([baseline]).runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["results/ci-runs/ci-*.jsonl*"],
        help="globs of unchanged ci.yaml results files",
    )
    parser.add_argument("--baseline", type=Path, default=Path("results/baselines/cpu-ci.jsonl.gz"))
    parser.add_argument(
        "--max-regression", type=float, default=DEFAULT_MAX_REGRESSION_PCT, metavar="PCT"
    )
    parser.add_argument(
        "--noise", type=Path, metavar="FILE", help="noise file (default: as check finds it)"
    )
    parser.add_argument(
        "--variant", default="compiled", help="the variant whose tok/s is scaled down"
    )
    parser.add_argument(
        "--factors", default=DEFAULT_FACTORS, help="comma-separated speed factors to inject"
    )
    args = parser.parse_args(argv)

    excluded = baseline_source_run(args.baseline)
    matched = sorted({p for pattern in args.runs for p in glob.glob(pattern)})
    runs = [Path(p) for p in matched if not set(read_results([p]).runs) & excluded]
    if not runs:
        print(f"no runs match {args.runs} besides the baseline's own", file=sys.stderr)
        return 2
    factors = [float(f) for f in args.factors.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        # the stored baseline's gate alone: no history's runs to hold the speedups against
        args.store = str(Path(scratch) / "empty-history.sqlite")
        unchanged = [check(run, args) for run in runs]
        print(limits_line(unchanged[0]))
        alarms = [
            run.name for run, outcome in zip(runs, unchanged, strict=True) if outcome.failures
        ]
        rows.append(
            ("1.00 (unchanged)", str(len(runs)), "—", "—", "—", f"{len(alarms)}/{len(runs)}")
        )
        for factor in factors:
            caught = {"any": 0, Check.TPS: 0, Check.SPEEDUP: 0}
            false_alarms = 0
            for run in runs:
                doctored = doctor(run, Path(scratch) / run.name, args.variant, factor)
                on_variant, elsewhere = hits(check(doctored, args), args.variant)
                for key in caught:
                    caught[key] += key in on_variant or (key == "any" and bool(on_variant))
                false_alarms += elsewhere
            slowdown = f"{factor:.2f} ({(1 - factor) * 100:.0f}% slower)"
            rows.append(
                (
                    slowdown,
                    str(len(runs)),
                    *(f"{n}/{len(runs)}" for n in caught.values()),
                    f"{false_alarms}/{len(runs)}",
                )
            )
    columns = (
        f"{args.variant} speed",
        "runs",
        "detected",
        "by tok/s",
        "by speedup",
        "false alarms elsewhere",
    )
    print(markdown_table(Table(columns, tuple(rows), numeric=frozenset(range(1, 6)))))
    if alarms:
        print("false alarms on unchanged runs: " + ", ".join(alarms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
