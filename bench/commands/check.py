"""the regression gate: exit 0 passed, 1 a cell's whole CI is slower than allowed, 2 bad input, 3
cannot tell

What it checks, each when its input is there:
- a run --against file (the CI gate): the current build against the reference build, every variant
  and metric and all variants pooled, paired round by round; --confirm re-measures failing cells
  once and fails only if they fail again;
- --baseline NAME: against a remembered run, the one the history holds under that name on this
  machine (fusebench history add RESULTS --name NAME), or a results file at that path (a file
  baseline save wrote is one): every declared comparison's paired per-round speedup, and every
  cell's tok/s; tok/s only informs unless the run is from this machine and a calibration of it
  exists; a run from another machine fingerprint is refused;
- the history's runs of the same experiment on this machine (fusebench history add, calibrate; 10
  runs or more): every declared comparison's speedup against theirs (limit: max(--max-regression,
  the runs' 97.5% prediction bound));
- the experiment's own `expect:` list (read back from the results' run header): paired slowdown
  limits between variants, and every variant correct;
- a plain run with none of these: its correctness records, and a note that speed was not gated (gate
  it with `fusebench run EXPERIMENT --against REF`, or `--baseline NAME`). A file without timed
  trials exits 2.
A cell fails only when its whole CI lies beyond the allowed slowdown: a point estimate never fails
the gate (the history check compares a run's point estimate with a prediction bound that already
holds a run's own noise). A cell whose CI reaches across the limit is "cannot tell" (exit 3, never
"passed"), with the rounds that would settle it at the noise and pace the run showed. "passed" means
every CI lies inside the limit. The limit is the larger of --max-regression and this machine's
calibrated noise.

examples:
  fusebench check results/ci.jsonl
  fusebench check results/ci.jsonl --baseline cpu-ci --max-regression 10
  fusebench check results/ci.jsonl --format markdown > comment.md        a PR comment
  fusebench check results/ci.jsonl --format json | jq .github_action_benchmark
  fusebench check results/ci-ab.jsonl --confirm   (run --against file: re-measure failing cells)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from .args import percent
from .history import add_store_argument

if TYPE_CHECKING:
    from ..analysis.gate import GateOutcome
    from .gate_session import CheckRequest

DEFAULT_MAX_REGRESSION_PCT = 5.0
FORMATS = ("text", "markdown", "json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results", type=Path, metavar="RESULTS.jsonl", help="the results file to judge"
    )
    parser.add_argument(
        "--baseline",
        metavar="NAME|FILE",
        help="a run the history holds under NAME on this machine (fusebench history add RESULTS "
        "--name NAME), or a results file",
    )
    parser.add_argument(
        "--max-regression",
        type=percent,
        default=DEFAULT_MAX_REGRESSION_PCT,
        metavar="PCT",
        help=f"allowed slowdown against the baseline, e.g. 10 or 10%% (default "
        f"{DEFAULT_MAX_REGRESSION_PCT:g}); a calibrated noise band can only raise it",
    )
    parser.add_argument(
        "--noise",
        type=Path,
        metavar="FILE",
        help="noise file from fusebench calibrate (default: "
        "results/baselines/noise-<machine>.json when it exists)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (default), markdown for a PR comment, or json with github-action-benchmark data",
    )
    parser.add_argument(
        "--confirm",
        action="store_true",
        help="on a run --against file: re-measure the models whose cells failed or could not tell, "
        "in a new A/B run against the same reference commit; the verdict is that run's",
    )
    parser.add_argument(
        "--allow-other-machine",
        action="store_true",
        help="compare against a remembered run or noise file from another machine fingerprint",
    )
    add_store_argument(parser)


def main(args: argparse.Namespace, console: Console) -> int:
    from ..present.document import to_console, to_markdown
    from ..present.gate import blocks, title, to_json
    from .gate_session import CheckRequest, run_check

    request = CheckRequest(
        results=args.results,
        baseline=args.baseline,
        store=args.store,
        max_regression=args.max_regression,
        noise=args.noise,
        allow_other_machine=args.allow_other_machine,
    )
    outcome = run_check(request)
    if args.confirm and any(f.model_key for f in (*outcome.failures, *outcome.undecided)):
        # Progress to stderr: stdout carries only the report (json or markdown may be piped into a
        # PR comment).
        outcome = confirmed(outcome, request, Console(stderr=True))
    if args.format == "json":
        console.file.write(to_json(outcome) + "\n")
    elif args.format == "markdown":
        console.file.write(to_markdown(blocks(outcome, args.results), Path.cwd()))
    else:
        to_console(blocks(outcome, args.results), console)
        style = {"FAILED": "bold red", "cannot tell": "bold yellow"}.get(
            title(outcome), "bold green"
        )
        console.print(Text(title(outcome), style=style))
    return outcome.exit_code


def confirmed(first: GateOutcome, request: CheckRequest, console: Console) -> GateOutcome:
    """A new A/B run of the models whose build comparison failed or could not tell, against the same
    reference commit: a noisy moment does not fail CI on its own, and an undecided row gets a
    second, independent run. The outcome is the confirmation run's alone (choosing to re-run on the
    first run's outcome does not bias an independent run), with the first run's rows as notes."""
    import dataclasses
    import tempfile

    from ..core.cell import CONTROL_BUILD, REFERENCE_BUILD
    from ..core.header import BuildFields
    from ..core.results import read_results
    from ..core.spec import load_experiment
    from ..measure.builds.builds import reference_build
    from ..measure.machine.env import require_backend
    from ..measure.plugins import bind_experiment
    from ..measure.run.jobs import RunOptions
    from ..measure.run.runner import run_experiment
    from .gate_session import run_check

    require_backend()
    run = next(iter(read_results([request.results]).headers.values()))
    # The same reference: the checkout it named if it is still there, else the commit it was at.
    named = run.builds.get(REFERENCE_BUILD) or BuildFields()
    ref = named.ref if named.ref and Path(named.ref).is_dir() else named.commit
    rows = [*first.failures, *first.undecided]
    failing = {f.model_key for f in rows if f.model_key}
    # x.jsonl -> x-confirm.jsonl, x.jsonl.gz -> x-confirm.jsonl.gz: compressed as the file judged
    given = request.results
    suffix = ".jsonl.gz" if given.name.endswith(".jsonl.gz") else given.suffix or ".jsonl"
    out = given.with_name(f"{given.name.removesuffix(suffix)}-confirm{suffix}")
    with tempfile.TemporaryDirectory() as folder:
        # The stored experiment, as a file the reference build's own parser can read.
        stored = run.experiment
        experiment = Path(folder) / Path(stored.file or "experiment.yaml").name
        experiment.write_text(stored.content)
        exp = load_experiment(experiment)
        exp = bind_experiment(
            dataclasses.replace(exp, models=tuple(m for m in exp.models if m.key in failing))
        )
        console.print(
            f"confirming {len(first.failures)} failing and {len(first.undecided)} "
            f"undecided verdict(s): {', '.join(sorted(failing))} against {ref} -> {out}"
        )
        with reference_build(str(ref), experiment) as reference:
            control = CONTROL_BUILD in run.builds  # the first run's control arm, again
            options = RunOptions(out=out, quiet=True, reference=reference, control=control)
            run_experiment(exp, options, console)
    second = run_check(dataclasses.replace(request, results=out))
    first_run = f"first run ({request.results}): " + "; ".join(
        f"{f.cell} {f.variant} {f.metric} {f.status.value}" for f in rows
    )
    notes = (first_run, f"confirmation run: {out}", *second.notes)
    return dataclasses.replace(second, notes=notes)
