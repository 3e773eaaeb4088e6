"""The `fusebench` command line: one module per subcommand. Exit codes everywhere: 0 ok, 1 a check
failed, 2 bad input or usage.

Each command module has `add_arguments(parser)`, which declares its arguments with argparse types
that turn text into typed values, and `main(args, console)`, which calls the layers below with plain
typed arguments (as asv's commands do), so no library code ever sees an argparse Namespace. The
layers below are imported inside `main`, so `fusebench --help` and every `COMMAND --help` answer
without loading pandas, matplotlib or mlx.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from rich.console import Console

from ..core.errors import INPUT_ERRORS, UserError
from . import (
    bisect,
    cache,
    calibrate,
    check,
    env,
    fusions,
    history,
    kernels,
    ops,
    project,
    publish,
    report,
    run,
    verify,
)

DESCRIPTION = """\
Is the fused path faster than the unfused one, and does it compute the same thing?

fusebench runs Gemma 4 (E2B, E4B, 26B, 31B) in its own decoder, and any local mlx-lm checkpoint
or preset (Llama, Qwen3, Gemma 3, Mistral, ...) in mlx-lm's own classes, with switchable op
variants (compiled vs unfused GeGLU, SwiGLU and logit softcap, SDPA vs manual attention, ...), times
prefill and generation tokens/s in interleaved rounds, and reports each Δ with a paired 95%
confidence interval and a verdict.

typical session:
  fusebench env                          what will run: backend, device, BLAS
  fusebench verify --model tiny          every variant combination computes the same logits
  fusebench kernels                      which kernels really run: fused SDPA or the fallback
  fusebench fusions e2b --layers 2       which fusion to write: the step's fusible chains, ranked
  fusebench run                          the default experiment -> results/<name>-<time>.jsonl
  fusebench report results/X.jsonl       PR-style tables and plots -> reports/<name>/
  fusebench check results/X.jsonl        the CI gate: exit 1 on a regression
"""

# In the order `fusebench --help` lists them.
COMMANDS: dict[str, ModuleType] = {
    "env": env,
    "verify": verify,
    "kernels": kernels,
    "run": run,
    "report": report,
    "project": project,
    "check": check,
    "calibrate": calibrate,
    "ops": ops,
    "fusions": fusions,
    "bisect": bisect,
    "history": history,
    "publish": publish,
    "cache": cache,
}

# Commands that were retired, and the one line that names what replaced each.
RETIRED = {
    "baseline": "the history keeps named runs: fusebench history add RESULTS --name NAME, then "
    "fusebench check RESULTS --baseline NAME",
}


class CliParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="fusebench",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        title="commands", metavar="COMMAND", required=True, parser_class=CliParser
    )
    for name, module in COMMANDS.items():
        doc = (module.__doc__ or "").strip()
        sub = commands.add_parser(
            name,
            help=doc.splitlines()[0],
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        sub.set_defaults(main=module.main)
    for name, replacement in RETIRED.items():
        # no help: a retired command is left out of the list, and answers with its replacement
        retired = commands.add_parser(name, add_help=False)
        retired.add_argument("anything", nargs=argparse.REMAINDER)
        retired.set_defaults(main=_retired(name, replacement))
    return parser


class RetiredCommandError(UserError):
    """A command that was retired; the message names what replaced it."""


def _retired(name: str, replacement: str):
    def main(args: argparse.Namespace, console: Console) -> int:
        raise RetiredCommandError(f"fusebench {name} is retired; {replacement}")

    return main


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ..measure.machine.env import own_compile_dir

    # mx.compile's kernels, here and in every worker, go to a folder this user owns
    own_compile_dir()
    # Piped into a CI log, rich would wrap tables at 80 columns; logs are read wider than that.
    console = Console(width=None if sys.stdout.isatty() else 160)
    try:
        return args.main(args, console)
    except INPUT_ERRORS as err:
        print(f"fusebench: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fusebench: interrupted", file=sys.stderr)
        return 130
