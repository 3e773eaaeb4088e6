"""measure this machine's A/A noise so check fails only beyond it

Runs the experiment N times back to back (or takes runs already made, with --from), compares every
variant with itself in each way `fusebench check` compares, and stores the noise per scope and
metric in results/baselines/noise-<machine>.json, where check finds it. The runs themselves go into
the history (--store), as `fusebench history add` adds them: from 10 runs of the experiment on this
machine on, check fails a fusion whose speedup falls below their prediction bound. On a shared
machine whose load changes over the day, calibrate --from runs spread over that day, or the band
comes out too narrow.

examples:
  fusebench calibrate                      the shipped ci experiment, 10 runs, one after another
  fusebench calibrate my-gate.yaml --runs 10
  fusebench calibrate --from results/ci-runs/ci-*.jsonl
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from .args import at_least
from .history import add_store_argument, add_to_history

if TYPE_CHECKING:
    from ..core.experiment import Experiment

DEFAULT_EXPERIMENT = "ci"
# 45 run-to-run pairs, and the 10 stored speedups a fusion's history needs before check gates on it
# (MIN_RUNS).
DEFAULT_RUNS = 10
SCRATCH_DIR = Path("results/scratch")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "experiment",
        nargs="?",
        help="experiment YAML or shipped name (default: "
        f"{DEFAULT_EXPERIMENT}, the regression gate's)",
    )
    parser.add_argument(
        "--runs",
        type=at_least(2, "run-to-run noise needs two runs"),
        metavar="N",
        help="runs of the experiment, >= 2 (default "
        f"{DEFAULT_RUNS}); each pair is one run-to-run A/A",
    )
    parser.add_argument(
        "--from",
        dest="sources",
        nargs="+",
        type=Path,
        metavar="RESULTS",
        help="calibrate from these results files of one experiment (>= 2) instead of running it",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="noise file (default: results/baselines/noise-<machine>.json, where check looks)",
    )
    add_store_argument(parser)


def main(args: argparse.Namespace, console: Console) -> int:
    import json

    from ..analysis.noise import default_noise_path, noise_bands, noise_record
    from ..core.errors import UserError
    from ..core.history import HistoryStore
    from ..core.spec import load_experiment
    from ..core.typed import to_record
    from ..present.document import Paragraph, to_console
    from ..present.noise import bands_table
    from .sources import calibrate_from, experiment_of_runs

    store = HistoryStore(args.store)  # a bad --store is said before any run
    if args.sources:
        if args.experiment or args.runs:
            raise UserError(
                "--from takes the experiment and the runs from the results files; "
                "give EXPERIMENT and --runs, or --from, not both"
            )
        if len(args.sources) < 2:
            raise UserError("--from: run-to-run noise needs at least two results files")
        paths = list(dict.fromkeys(args.sources))
        exp = experiment_of_runs(paths)
    else:
        exp = load_experiment(args.experiment or DEFAULT_EXPERIMENT)
        paths = run_calibration(exp, args.runs or DEFAULT_RUNS, console)
    calibration = calibrate_from(paths, [(c.baseline, c.new) for c in exp.comparisons])
    machine = calibration.machine
    if calibration.aa.empty:
        raise UserError(f"{paths[0].parent}: the runs recorded no timed trials to compare")
    record = noise_record(exp, paths, calibration)
    out = args.out or default_noise_path(machine)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(to_record(record), indent=1) + "\n", encoding="utf-8")
    add_to_history(store, paths, console)
    to_console(
        [
            bands_table(noise_bands(calibration.aa)),
            Paragraph(
                f"wrote {out} (machine: {machine}); "
                + (
                    "fusebench check uses it on this machine"
                    if out == default_noise_path(machine)
                    else f"fusebench check uses it with --noise {out}"
                )
            ),
        ],
        console,
    )
    return 0


def run_calibration(exp: Experiment, runs: int, console: Console) -> list[Path]:
    """Run the experiment `runs` times, one after another (never concurrently: that would be noise
    itself)."""
    from ..core.errors import UserError
    from ..measure.machine.env import require_backend
    from ..measure.plugins import bind_experiment
    from ..measure.run.jobs import RunOptions
    from ..measure.run.runner import run_experiment

    require_backend()
    exp = bind_experiment(exp, [])
    folder = SCRATCH_DIR / f"calibrate-{exp.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    paths = []
    for i in range(1, runs + 1):
        out = folder / f"run-{i:02d}.jsonl"
        console.print(Text(f"calibration run {i}/{runs} -> {out}"))
        code = run_experiment(exp, RunOptions(out=out, quiet=True), console)
        if code != 0:
            raise UserError(f"{out}: calibration run {i} stopped with exit code {code}")
        paths.append(out)
    return paths
