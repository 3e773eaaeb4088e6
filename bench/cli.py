"""The `fusebench` command line. Exit codes everywhere: 0 ok, 1 a check failed, 2 bad input or usage."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from models import ModelConfigError, UnknownOpError

from .env import BlasChoiceError
from .results import ResultsError
from .spec import SpecError

DEFAULT_EXPERIMENT = Path("experiments/default.yaml")

# Input errors become one line and exit code 2, never a traceback.
INPUT_ERRORS = (SpecError, ModelConfigError, UnknownOpError, BlasChoiceError, ResultsError)

DESCRIPTION = """\
Is the fused path faster than the unfused one, and does it compute the same thing?

fusebench runs Gemma 4 (E2B, E4B, 26B, 31B, or a local mlx-lm checkpoint) with switchable op variants
(compiled vs unfused GeGLU and logit softcap, SDPA vs manual attention, ...), times prefill and generation
tokens/s in interleaved rounds, and reports each Δ with a bootstrap 95% confidence interval.

typical session:
  fusebench env                          what will run: backend, device, BLAS
  fusebench verify --model tiny          every variant combination computes the same logits
  fusebench run                          the default experiment -> results/<name>-<time>.jsonl
  fusebench report results/X.jsonl       PR-style tables and plots -> reports/<name>/
  fusebench check results/X.jsonl --baseline results/baselines/cpu.jsonl
"""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


class CliParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_run(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "run",
        help="measure an experiment: prefill and gen tok/s per model × workload × variant",
        description="Measure an experiment. Each model runs in its own worker process; variants are interleaved "
        "round by round (ABBA) on the same prompt; every record is appended to the results file as it completes.",
        epilog="examples:\n  fusebench run\n  fusebench run experiments/ci.yaml --quiet\n"
        "  fusebench run experiments/pr15587.yaml --only E2B,E4B --trials 3\n"
        "  fusebench run --resume results/default-20261130-101500.jsonl\n"
        "  fusebench run experiments/default.yaml --shard 2/4      (this machine's quarter of the matrix)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "experiment",
        nargs="?",
        type=Path,
        default=DEFAULT_EXPERIMENT,
        help=f"experiment YAML (default: {DEFAULT_EXPERIMENT})",
    )
    p.add_argument("--out", type=Path, help="results file (default: results/<experiment>-<timestamp>.jsonl)")
    p.add_argument(
        "--resume",
        type=Path,
        metavar="FILE",
        help="finish an interrupted run: nothing already recorded in FILE is repeated",
    )
    p.add_argument("--trials", type=positive_int, metavar="N", help="timed rounds per cell (overrides the experiment)")
    p.add_argument("--only", metavar="SIZES", help="comma-separated size labels or presets to keep, e.g. E2B,26b")
    p.add_argument("--shard", default="1/1", metavar="I/N", help="run shard I of N of the matrix (default 1/1)")
    p.add_argument(
        "--blas",
        default="auto",
        metavar="auto|reference|PATH",
        help="BLAS for CPU workers: auto preloads OpenBLAS/MKL when installed (default auto)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the expanded matrix and estimates; run nothing")
    p.add_argument("--quiet", action="store_true", help="no progress bar (for CI logs)")
    p.set_defaults(handler=_run_command)


def _add_verify(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "verify",
        help="check that every op-variant combination computes the same logits",
        description="Run every combination of registered op variants on the same weights and prompt, against the "
        "all-reference assignment (unfused geglu and softcap, manual attention, composed rms_norm and rope). "
        "Prints max abs/rel logit error and greedy-token agreement; exits 1 if anything is outside tolerance.",
    )
    p.add_argument("--model", default="tiny", help="preset name or checkpoint directory (default: tiny)")
    p.add_argument("--layers", type=positive_int, help="truncate a preset to N layers")
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    p.add_argument("--quantize", help="affine4, affine8, mxfp4, mxfp8 or nvfp4")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt-tokens", type=positive_int, default=24)
    p.add_argument("--tokens", type=positive_int, default=16, help="greedy steps compared (default 16)")
    p.add_argument("--atol", type=float, help="max |logit error| allowed (default by dtype)")
    p.set_defaults(handler=_verify_command)


def _add_env(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "env",
        help="show backend, device, BLAS and versions that a run would record",
        description="Show what a run records about this machine, including which BLAS the workers load. "
        "With the stock mlx-cpu wheel's reference BLAS it warns and gives the remedy.",
    )
    p.add_argument("--probe", action="store_true", help="also measure peak fp32 matmul GFLOP/s and copy GB/s")
    p.add_argument("--blas", default="auto", metavar="auto|reference|PATH", help="BLAS as workers would use it")
    p.set_defaults(handler=_env_command)


def _run_command(args: argparse.Namespace, console: Console) -> int:
    from .runner import RunOptions, default_out_path, run_experiment, select_models
    from .spec import load_experiment, parse_shard

    exp = select_models(load_experiment(args.experiment), args.only)
    if args.trials is not None:
        exp = dataclasses.replace(exp, trials=args.trials)
    try:
        shard = parse_shard(args.shard)
    except ValueError as err:
        raise ResultsError(f"--shard {args.shard}: {err}") from None
    out = args.resume or args.out or default_out_path(exp)
    options = RunOptions(out=out, blas=args.blas, quiet=args.quiet, shard=shard, dry_run=args.dry_run)
    return run_experiment(exp, options, console, resume=args.resume)


def _verify_command(args: argparse.Namespace, console: Console) -> int:
    from .verify import VerifyOptions, run_verify

    fields = {f.name for f in dataclasses.fields(VerifyOptions)}
    return run_verify(VerifyOptions(**{k: v for k, v in vars(args).items() if k in fields}), console)


def _env_command(args: argparse.Namespace, console: Console) -> int:
    from .env import print_env
    from .runner import in_worker_environment, worker_environment

    worker_env, env = worker_environment(args.blas)
    probe = in_worker_environment(worker_env, "e.probe_peaks()") if args.probe else None
    print_env(console, env, probe)
    return 0


def _add_module_command(commands: argparse._SubParsersAction, name: str, module: str, help_text: str) -> None:
    import importlib

    mod = importlib.import_module(f".{module}", __package__)
    p = commands.add_parser(
        name,
        help=help_text,
        description=(mod.__doc__ or help_text).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mod.add_arguments(p)
    p.set_defaults(handler=mod.command)


# Commands whose arguments and handler live in their own module: (name, module, one-line help).
MODULE_COMMANDS: list[tuple[str, str, str]] = [
    ("report", "report", "turn results files into PR-style delta tables, plots and a report folder"),
    ("ops", "opbench", "time each op variant alone at the exact shapes each model size produces"),
    ("check", "check", "the regression gate: exit 1 when a cell's whole CI is slower than allowed, 2 on bad input"),
    ("baseline", "baseline", "save a results file as a named baseline (results/baselines/NAME.jsonl) for check"),
    ("calibrate", "calibrate", "measure this machine's A/A noise so check fails only beyond it"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="fusebench", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True, parser_class=CliParser)
    adders: list[Callable] = [_add_env, _add_verify, _add_run]
    for add in adders:
        add(commands)
    for name, module, help_text in MODULE_COMMANDS:
        _add_module_command(commands, name, module, help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Piped into a CI log, rich would wrap tables at 80 columns; logs are read wider than that.
    console = Console(width=None if sys.stdout.isatty() else 160)
    try:
        return args.handler(args, console)
    except INPUT_ERRORS as err:
        print(f"fusebench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fusebench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
