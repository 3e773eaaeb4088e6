"""find the commit (or package release) that made the model slower: a binary search of interleaved
A/B runs

First an A/B of BAD against GOOD must show a regression beyond --max-regression (check's rule: a
slowdown whose whole Holm-adjusted interval lies below -limit); the rows that regressed are then
tracked, and their Δ is the step. Each search step is an A/B of the midpoint against GOOD (run
--against machinery, a git worktree per commit), in the rounds that tell the step's two ends apart
at its spread: "bad" when a tracked row's interval lies wholly below the step's midway point, "good"
when every tracked row's lies wholly above it; a step that cannot tell is measured again (runs
pooled, at most --max-runs), and one that still cannot tell ends the search naming the two
candidates it could not decide between. The first bad candidate is finally measured against its
predecessor, at -limit. A first A/B that can tell neither a regression nor its absence is "cannot
tell", never "no regression".

Every A/B run is kept under --out; run the same command again to resume an interrupted search
(finished runs are read, not re-run). Exit 0: a first bad candidate named; 1: no regression to find
(every interval above -limit);
2: bad input; 3: cannot tell (a step stayed undecided: the line says what would settle it).

With --package NAME, the candidates are NAME's releases from GOOD to BAD on the package index, each
an environment built once and cached (run --against-env); for mlx on Linux, mlx-cpu is pinned to the
same version.

examples:
  fusebench bisect v1.2 main                       (the shipped ci experiment)
  fusebench bisect a1b2c3 main my-experiment.yaml --max-regression 3
  fusebench bisect --package mlx 0.29.0 0.32.4 ci
  fusebench bisect GOOD BAD --format json | jq .first_bad
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from .args import at_least, percent
from .check import DEFAULT_MAX_REGRESSION_PCT

if TYPE_CHECKING:
    from ..analysis.bisect import BisectOutcome, BisectStep
    from ..measure.builds.bisect import Candidate, StepRuns

DEFAULT_EXPERIMENT = "ci"
DEFAULT_MAX_RUNS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "good", metavar="GOOD", help="the last good git ref (or version, with --package)"
    )
    parser.add_argument(
        "bad", metavar="BAD", help="the bad git ref (or version), a descendant of GOOD"
    )
    parser.add_argument(
        "experiment",
        nargs="?",
        default=DEFAULT_EXPERIMENT,
        help=f"experiment YAML or shipped name (default: {DEFAULT_EXPERIMENT})",
    )
    parser.add_argument(
        "--package", metavar="NAME", help="search NAME's released versions instead of commits"
    )
    parser.add_argument(
        "--max-regression",
        type=percent,
        default=DEFAULT_MAX_REGRESSION_PCT,
        metavar="PCT",
        help=f"the slowdown that counts as a regression (default {DEFAULT_MAX_REGRESSION_PCT:g})",
    )
    parser.add_argument(
        "--max-runs",
        type=at_least(1),
        default=DEFAULT_MAX_RUNS,
        metavar="N",
        help=f"A/B runs a step may pool before it is called undecided (default {DEFAULT_MAX_RUNS})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where every A/B run's results go (default results/bisect-<time>/); give an earlier "
        "search's folder to resume it",
    )
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default) or json"
    )


def main(args: argparse.Namespace, console: Console) -> int:
    from ..analysis.bisect import bisect
    from ..core.spec import load_experiment
    from ..measure.builds.bisect import (
        CommitSides,
        PackageSides,
        StepRuns,
        commit_candidates,
        package_candidates,
    )
    from ..measure.machine.env import require_backend
    from ..measure.plugins import bind_experiment

    exp = bind_experiment(load_experiment(args.experiment))
    experiment = Path(exp.file)
    # Progress on stderr when stdout carries JSON.
    progress = Console(stderr=True) if args.format == "json" else console
    if args.package:
        good, candidates = package_candidates(args.package, args.good, args.bad)
        sides = PackageSides(args.package, experiment, progress)
    else:
        good, candidates = commit_candidates(args.good, args.bad)
        sides = CommitSides(experiment)
    require_backend()
    out = args.out or Path("results") / f"bisect-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    progress.print(
        f"bisect: {len(candidates)} candidate(s) after {good.title} ({good.short}) up to "
        f"{candidates[-1].title} ({candidates[-1].short}); every A/B run -> {out}/",
        highlight=False,
    )
    runs = StepRuns(exp, good, candidates, sides, out, progress, args.max_regression)
    outcome = bisect(len(candidates), runs, args.max_regression, args.max_runs, exp.rounds)
    if args.format == "json":
        console.file.write(json.dumps(as_json(outcome, runs, out), indent=2) + "\n")
    else:
        print_outcome(outcome, runs, args.max_regression, console)
    return exit_code(outcome)


def exit_code(outcome: BisectOutcome) -> int:
    """0 a first bad candidate named, 1 no regression to find, 3 cannot tell."""
    from ..analysis.bisect import GOOD
    from ..analysis.gate import EXIT_CANNOT_TELL

    if outcome.first_bad is not None:
        return 0
    return 1 if not outcome.tracked and outcome.steps[0].status == GOOD else EXIT_CANNOT_TELL


def _step_fields(step: BisectStep, runs: StepRuns) -> dict:
    r = step.reading
    return {
        "asks": step.role,
        "candidate": runs.side(step.index).key,
        "title": runs.side(step.index).title,
        "against": runs.side(step.against).key,
        "verdict": step.status,
        "runs": step.runs,
        "row": f"{r.variant} {r.metric}" if r else None,
        "delta_pct": r.delta_pct if r else None,
        "low_pct": r.low_pct if r else None,
        "high_pct": r.high_pct if r else None,
        "rounds": r.rounds if r else None,
        "files": [str(p) for p in runs.files.get((step.index, step.against), [])],
    }


def as_json(outcome: BisectOutcome, runs: StepRuns, out: Path) -> dict:
    first = runs.side(outcome.first_bad).key if outcome.first_bad is not None else None
    undecided = [runs.side(i).key for i in outcome.undecided] if outcome.undecided else None
    return {
        "first_bad": first,
        "confirmed": outcome.confirmed,
        "undecided": undecided,
        "regression": [f"{r.variant} {r.metric}" for r in outcome.tracked],
        "step": dataclasses.asdict(outcome.size) if outcome.size else None,
        "out": str(out),
        "steps": [_step_fields(step, runs) for step in outcome.steps],
    }


def _interval(step: BisectStep) -> str:
    r = step.reading
    return f"{r.delta_pct:+.1f}% [{r.low_pct:+.1f}%, {r.high_pct:+.1f}%]" if r else "-"


def print_outcome(
    outcome: BisectOutcome, runs: StepRuns, limit_pct: float, console: Console
) -> None:
    from ..present.document import Heading, Table, to_console

    rows = tuple(
        (
            str(i + 1),
            s.role,
            _name(runs.side(s.index)),
            _name(runs.side(s.against)),
            f"{s.reading.variant} {s.reading.metric}" if s.reading else "-",
            _interval(s),
            str(s.runs),
            s.status,
        )
        for i, s in enumerate(outcome.steps)
    )
    to_console(
        [
            Heading("bisect steps"),
            Table(
                (
                    "#",
                    "asks",
                    "candidate",
                    "against",
                    "row",
                    "Δ [95% CI, Holm]",
                    "A/B runs",
                    "verdict",
                ),
                rows,
                frozenset({5, 6}),
            ),
        ],
        console,
    )
    if size := outcome.size:
        console.print(
            f"the step: {size.delta_pct:+.1f}% at {100 * size.sd_log:.1f}% a round; each later "
            f"A/B asked which side of {size.midway_pct:+.1f}% a candidate lies, in "
            f"{size.rounds} rounds fixed before it (each decision wrong at most 5%, the Holm "
            "family's)",
            highlight=False,
        )
    console.print(verdict_line(outcome, runs, limit_pct), highlight=False)


def _settle(step: BisectStep) -> str:
    """What would settle an undecided step, from its widest reading."""
    r = step.reading
    if r is None or r.settle_rounds is None:
        return "re-run with a larger --max-runs or budget_s, or on a quieter machine"
    return (
        f"about {r.settle_rounds} rounds ({r.rounds} ran) would settle {r.variant} {r.metric} at "
        "this noise: raise --max-runs, the experiment's budget_s or max_rounds, or use a quieter "
        "machine"
    )


def _name(candidate: Candidate) -> str:
    return f"{candidate.short} {candidate.title}"[:60]


def verdict_line(outcome: BisectOutcome, runs: StepRuns, limit_pct: float) -> str:
    from ..analysis.bisect import GOOD

    first = outcome.steps[0]
    if not outcome.tracked and first.status == GOOD:
        return (
            f"no regression beyond -{limit_pct:g}% to find: {_name(runs.side(first.index))} "
            f"against {_name(runs.side(-1))}: {_interval(first)} after {first.runs} A/B run(s); "
            "every interval lies above it"
        )
    if not outcome.tracked:
        return (
            f"cannot tell whether {_name(runs.side(first.index))} regressed beyond "
            f"-{limit_pct:g}% against {_name(runs.side(-1))}: {_interval(first)} after "
            f"{first.runs} A/B run(s) reaches across the limit; {_settle(first)}"
        )
    if outcome.undecided:
        low, high = (runs.side(i) for i in outcome.undecided)
        return (
            f"cannot tell between {_name(low)} (good) and {_name(high)} (bad): "
            f"a step stayed undecided after its A/B runs; {_settle(outcome.steps[-1])}"
        )
    last = outcome.steps[-1]
    culprit = runs.side(outcome.first_bad)
    alone = (
        "confirmed against its predecessor"
        if outcome.confirmed
        else f"against its predecessor it reads {last.status}: "
        "the regression may be spread over several candidates"
    )
    return f"first bad: {culprit.key} {culprit.title}: {_interval(last)} ({alone})"
