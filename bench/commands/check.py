"""the regression gate: exit 1 when a cell's whole CI is slower than allowed, 2 on bad input

Two modes, used together when both apply:
- against a stored baseline (fusebench baseline save): every cell's tok/s, and every declared comparison's paired
  per-round speedup, against the baseline's; a baseline from another machine fingerprint is refused;
- the experiment's own `expect:` list (read back from the results' run header): paired slowdown limits between
  variants, and every variant correct.
A cell fails only when its whole CI lies beyond the allowed slowdown: a point estimate never fails the gate. The
limit is the larger of --max-regression and this machine's calibrated noise (fusebench calibrate).

examples:
  fusebench check results/ci.jsonl
  fusebench check results/ci.jsonl --baseline results/baselines/cpu-ci.jsonl --max-regression 10
  fusebench check results/ci.jsonl --format markdown > comment.md        a PR comment
  fusebench check results/ci.jsonl --format json | jq .github_action_benchmark
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text

from .args import percent

DEFAULT_MAX_REGRESSION_PCT = 5.0
FORMATS = ("text", "markdown", "json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=Path, metavar="RESULTS.jsonl", help="the results file to judge")
    parser.add_argument("--baseline", type=Path, metavar="FILE",
                        help="a baseline saved with fusebench baseline save (results/baselines/NAME.jsonl)")
    parser.add_argument("--max-regression", type=percent, default=DEFAULT_MAX_REGRESSION_PCT, metavar="PCT",
                        help=f"allowed slowdown against the baseline, e.g. 10 or 10%% (default "
                             f"{DEFAULT_MAX_REGRESSION_PCT:g}); a calibrated noise band can only raise it")
    parser.add_argument("--noise", type=Path, metavar="FILE",
                        help="noise file from fusebench calibrate (default: results/baselines/noise-<machine>.json "
                             "when it exists)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text (default), markdown for a PR comment, or json with github-action-benchmark data")
    parser.add_argument("--allow-other-machine", action="store_true",
                        help="compare against a baseline or noise file from another machine fingerprint")


def main(args: argparse.Namespace, console: Console) -> int:
    from ..analysis.gate import CheckRequest, run_check
    from ..present.document import to_console, to_markdown
    from ..present.gate import blocks, to_json

    outcome = run_check(CheckRequest(results=args.results, baseline=args.baseline, max_regression=args.max_regression,
                                     noise=args.noise, allow_other_machine=args.allow_other_machine))
    if args.format == "json":
        console.file.write(to_json(outcome) + "\n")
    elif args.format == "markdown":
        console.file.write(to_markdown(blocks(outcome, args.results), Path.cwd()))
    else:
        to_console(blocks(outcome, args.results), console)
        console.print(Text("FAILED" if outcome.failures else "passed",
                           style="bold red" if outcome.failures else "bold green"))
    return outcome.exit_code
