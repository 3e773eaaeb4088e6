"""save a results file as a named baseline (results/baselines/NAME.jsonl) for check

Stores a results file's run header(s), stamped with the machine fingerprint, and its timed trials.
Throughput only means something on the machine that measured it, so `fusebench check` refuses a
baseline from another fingerprint.

examples:
  fusebench baseline save results/ci-20261130-101500.jsonl --name cpu-ci
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    save = actions.add_parser(
        "save",
        help="store a results file's timed trials as results/baselines/NAME.jsonl",
        description="Store a results file's run header(s) and timed trials as a baseline.",
    )
    save.add_argument("results", type=Path, metavar="RESULTS.jsonl")
    save.add_argument(
        "--name", required=True, help="baseline name: writes results/baselines/NAME.jsonl"
    )
    save.add_argument(
        "--force", action="store_true", help="replace an existing baseline of that name"
    )


def main(args: argparse.Namespace, console: Console) -> int:
    from ..core.baselines import save_baseline
    from ..core.results import read_results, results_fingerprint

    out = save_baseline(args.results, args.name, force=args.force)
    machine = results_fingerprint(read_results([out]), out)
    console.print(Text(f"wrote {out} (machine: {machine})"))
    return 0
