"""turn results files into PR-style delta tables, plots and a report folder

Writes report.md, report.html (self-contained), summary.csv, deltas.csv (the delta tables as data)
and the PNG plots to reports/<experiment>/, and prints the delta tables. Results files merge (shards
of a suite, or one suite on several machines); one table is drawn per
machine × comparison × workload, so machines and workloads are never pooled into one median.

examples:
  fusebench report results/default-20261130-072314.jsonl
  fusebench report results/default-*.jsonl --reference pr15587      the PR's published Δ beside ours
  fusebench report results/x.jsonl --compare baseline:sdpa --out /tmp/r
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rich.console import Console
from rich.text import Text

from .args import variant_pair


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULTS.jsonl",
        help="results files to merge (shards of a suite, or one suite on several machines)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output folder (default: reports/<experiment name>/)",
    )
    parser.add_argument(
        "--compare",
        action="append",
        type=variant_pair,
        default=[],
        metavar="BASELINE:NEW",
        help="variants to compare, repeatable (default: the experiment's "
        "comparisons, else the first variant against each other one)",
    )
    parser.add_argument(
        "--reference",
        metavar="FILE",
        help="published figures to show beside the measured "
        "Δ: a YAML file, or a shipped name (pr15587)",
    )


def main(args: argparse.Namespace, console: Console) -> int:
    from ..analysis.study import build_study, resolve_comparisons
    from ..present.document import Figure, to_console
    from ..present.report import write_report
    from .sources import load_reference, load_results

    reference = load_reference(args.reference) if args.reference else None
    study = build_study(load_results(args.results, warn=lambda message: warn(console, message)))
    comparisons = resolve_comparisons(args.compare, study)
    # Experiment names are already path-safe; the substitution only guards hand-written headers.
    out_dir = args.out or Path("reports") / re.sub(r"[^\w.+-]", "-", study.name)
    report = write_report(study, comparisons, out_dir, reference, sources=args.results)
    to_console([b for b in report.terminal_blocks if not isinstance(b, Figure)], console)
    for warning in report.warnings:
        warn(console, warning)
    tables = [path.name for path in report.files if path.suffix != ".png"]
    console.print(
        f"wrote {len(report.files)} files to {out_dir}/: {', '.join(tables)} and "
        f"{len(report.files) - len(tables)} plots"
    )
    return 0


def warn(console: Console, message: str) -> None:
    # Text, not markup: a path or a CI in the message may contain brackets.
    console.print(Text.assemble(("warning: ", "yellow"), message))
