"""measure an experiment: prefill and gen tok/s per model × workload × variant

Each model runs in its own worker process; variants are interleaved round by round (ABBA) on the
same prompt; every record is appended to the results file as it completes, so an interrupted run
loses nothing.

EXPERIMENT is a YAML file or the name of a shipped one (`--list` shows them), from any folder.

The main job (`trials: plan`) gives each size, before its first timed round, the fewest rounds
expected to decide its rows at this machine's measured costs and spreads, and says before the
first round how long the table takes here; `budget_s` (10 minutes) is a cap, and `--budget 5m` a
quicker, partial answer. With `trials: auto` each cell runs 6 rounds, then adds rounds
until every row is decided (faster, slower, or no change within `margin_pct`; with --against,
inside or beyond the limit), no decision is in reach, or the budget is spent: the intervals are
confidence sequences, valid at whatever round the run stopped.

examples:
  fusebench run                                   (the shipped `default` experiment)
  fusebench run --model qwen3-0.6b --layers 2 --op swiglu=unfused,compiled
                                                  (one model, one op: no file needed)
  fusebench run --model e2b --layers 2 --op geglu=unfused,compiled --op softcap=unfused,compiled
                                                  (two ops: every combination of their variants)
  fusebench run --list                            (the shipped experiments and what each asks)
  fusebench run ci --quiet
  fusebench run pr15587 --only E2B,E4B --trials 3
  fusebench run my-experiment.yaml
  fusebench run --resume results/default-20261130-101500.jsonl
  fusebench run default --shard 2/4               (this machine's quarter of the matrix)
  fusebench run ci --against HEAD~1               (this tree against its parent, interleaved)
  fusebench run ci --against-env "mlx==0.31.2"    (this tree on an earlier mlx, built once)
  fusebench run ci --against HEAD --schedule duet (both builds' trials at once, on two cores)

Schedule: where two cores are free, the two trials of a pair can run at the same moment (a duet),
each worker on its own core with one BLAS thread, so what the neighbours and the hypervisor do hits
both; `auto` (the default) runs sequential rounds, the safe schedule, until this experiment's own
runs in both (`--schedule duet` once) say a duet decides more rows or as many sooner, and the first
screen says which it chose and why.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from ..core.errors import UserError
from .args import (
    add_plugin_argument,
    duration,
    names,
    op_values,
    percent,
    positive_int,
    shard,
)

if TYPE_CHECKING:
    from ..core.experiment import Experiment

DEFAULT_EXPERIMENT = "default"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..core.spec import schema_text

    parser.epilog = "experiment file:\n" + textwrap.indent(schema_text(), "  ")
    parser.add_argument(
        "experiment",
        nargs="?",
        help=f"experiment YAML or shipped name (default: {DEFAULT_EXPERIMENT}, or the one the "
        "--model and --op flags make)",
    )
    flags = parser.add_argument_group(
        "an experiment from flags, instead of a file (llama-bench's manner)"
    )
    flags.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="PRESET|PATH|ORG/NAME[@REV]",
        help="a preset (qwen3-0.6b, e2b, ...), an mlx-lm checkpoint folder, or a Hugging Face "
        "repo id found in its cache (HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE honoured); repeatable",
    )
    flags.add_argument(
        "--op",
        action="append",
        type=op_values,
        default=[],
        metavar="OP=A,B",
        help="an op and its variants to compare, the first the baseline; several --op flags form "
        "a matrix (every combination a variant; to vary ops together, save the experiment and "
        "edit its variants)",
    )
    flags.add_argument("-p", "--prompt-tokens", type=positive_int, default=128, metavar="N")
    flags.add_argument("-n", "--gen-tokens", type=positive_int, default=3, metavar="N")
    flags.add_argument(
        "--layers", type=positive_int, metavar="N", help="truncate each model to N layers"
    )
    flags.add_argument("--dtype", metavar="D", help="float32 (default), float16 or bfloat16")
    flags.add_argument(
        "--save-experiment",
        type=Path,
        metavar="FILE",
        help="where to write the YAML the flags make (default: beside the results file); "
        "`fusebench run FILE` runs the same experiment again",
    )
    parser.add_argument("--list", action="store_true", help="list the shipped experiments and exit")
    parser.add_argument(
        "--out",
        type=Path,
        help="results file (default: results/<experiment>-<timestamp>.jsonl); a name ending in .gz "
        "is written gzip-compressed, as results/ keeps raw rounds",
    )
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="FILE",
        help="finish an interrupted run: nothing already recorded in FILE is repeated",
    )
    parser.add_argument(
        "--trials",
        type=positive_int,
        metavar="N",
        help="exactly N timed rounds per cell (overrides the "
        "experiment's trials, and turns a trials: auto rule off)",
    )
    parser.add_argument(
        "--budget",
        type=duration,
        metavar="DURATION",
        help="the run's budget_s instead of the experiment's (20m, 90s, 1h30m or seconds), for "
        "experiments whose rounds are planned or stop on the budget (trials: plan, where it is a "
        "cap; auto; budget); an undecided answer says which would decide its rows",
    )
    parser.add_argument(
        "--max-regression",
        type=percent,
        metavar="PCT",
        help="with --against: the limit the rows are decided against (the experiment's "
        "margin_pct; ci: 5), e.g. 2 or 2%%; before the first round the run says whether its rounds "
        "can decide it here; give check the same",
    )
    parser.add_argument(
        "--only",
        type=names,
        metavar="SIZES",
        help="comma-separated size labels or presets to keep, e.g. E2B,26b",
    )
    parser.add_argument(
        "--shard",
        type=shard,
        default=(1, 1),
        metavar="I/N",
        help="run shard I of N of the matrix (default 1/1)",
    )
    parser.add_argument(
        "--blas",
        default="auto",
        metavar="auto|reference|PATH",
        help="BLAS for CPU workers: auto preloads OpenBLAS/MKL when installed (default auto)",
    )
    add_plugin_argument(parser, "; adds to the experiment's plugins")
    parser.add_argument(
        "--against",
        metavar="REF",
        help="also run a reference build, interleaved trial by trial: a git ref of this repository "
        "(checked out into a temporary worktree) or another fusebench checkout's path; "
        "fusebench check then compares the builds",
    )
    parser.add_argument(
        "--no-control",
        dest="control",
        action="store_false",
        help="with --against: leave out the control arm (the reference's code once more, in a "
        "place of its own, whose rounds say what the setup reads between identical builds; it "
        "costs a third of each round, and check turns a control that reads a difference into "
        "'cannot tell')",
    )
    parser.add_argument(
        "--against-env",
        metavar="SPEC",
        help="also run this tree in another Python environment, interleaved: "
        "a Python interpreter, a virtual environment's folder, or requirement specifiers such as "
        "'mlx==0.31.2' (an environment built once and cached); fusebench check then compares the "
        "environments",
    )
    parser.add_argument(
        "--schedule",
        choices=("auto", "duet", "sequential"),
        help="how a pair's two trials run (overrides the experiment's schedule): duet, both at "
        "once on two cores so the machine's noise hits both; sequential, one after the other; "
        "auto, whichever this machine measured more precise per second (measured once, cached)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin workers to as many cores as they have "
        "BLAS threads (Linux), leaving the rest free",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the expanded matrix and estimates; run nothing",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar (for CI logs)")


def main(args: argparse.Namespace, console: Console) -> int:
    started = time.monotonic()  # budget_s counts from here
    from ..measure.machine.env import require_backend

    if args.list:
        return list_experiments(console)
    require_backend()  # before anything imports mlx: one line naming the extra, not a traceback
    from ..core.experiment import Schedule
    from ..core.flags import select_models, with_budget
    from ..core.results import read_results
    from ..core.spec import load_experiment
    from ..measure.builds.builds import ReferenceBuildError, environment_builds, reference_build
    from ..measure.plugins import bind_experiment
    from ..measure.run.jobs import RunOptions, default_out_path
    from ..measure.run.runner import run_experiment
    from ..measure.run.session import CURRENT
    from ..present.summary import print_summary

    if args.model or args.op:
        args.experiment, args.out = experiment_from_flags_file(args)
    exp = select_models(load_experiment(args.experiment or DEFAULT_EXPERIMENT), args.only)
    if args.trials is not None:
        exp = override_trials(exp, args.trials, console)
    if args.budget is not None:
        exp = with_budget(exp, args.budget)
    if args.schedule is not None:
        exp = dataclasses.replace(exp, schedule=Schedule(args.schedule))
    if args.max_regression is not None:
        exp = dataclasses.replace(exp, margin_pct=args.max_regression)
    exp = bind_experiment(exp, args.plugin)
    out = args.resume or args.out or default_out_path(exp)
    if args.dry_run:
        check_like_a_run(exp, args)
    with contextlib.ExitStack() as stack:
        # A dry run builds nothing: no reference tree either.
        against = args.against if not args.dry_run else None
        reference = (
            stack.enter_context(reference_build(against, Path(exp.file))) if against else None
        )
        current = CURRENT
        if args.against_env and args.against:
            raise ReferenceBuildError(
                "--against and --against-env both name a reference build; give one"
            )
        if args.against_env and not args.dry_run:
            current, reference = environment_builds(
                args.against_env, Path(exp.file), lambda text: console.print(text, highlight=False)
            )
        options = RunOptions(
            out=out,
            blas=args.blas,
            quiet=args.quiet,
            shard=args.shard,
            dry_run=args.dry_run,
            pin=args.pin,
            reference=reference,
            current=current,
            control=bool(args.against) and args.control,
            started=started,
        )
        code = run_experiment(exp, options, console, resume=args.resume)
    if code == 0 and not args.dry_run:
        print_summary(console, read_results([out]), [(c.baseline, c.new) for c in exp.comparisons])
        console.print(f"full report: fusebench report {out}")
    return code


class FlagError(UserError):
    """A bad --model or --op flag: one line naming the valid choices, exit 2."""


def experiment_from_flags_file(args: argparse.Namespace) -> tuple[Path, Path]:
    """The experiment the flags make, written where --save-experiment says (else beside the
    results file), and the results file: a one-line run is a reproducible file from the start."""
    from datetime import datetime

    from fusebench.models.ops import op_choices

    from ..core.flags import experiment_from_flags
    from ..core.spec import parse_experiment
    from ..measure.plugins import load_plugins

    if args.experiment:
        raise FlagError(
            f"give an experiment ({args.experiment}) or --model and --op flags, not both"
        )
    if not args.model or not args.op:
        raise FlagError(
            "an experiment from flags needs --model PRESET|PATH and --op OP=BASELINE,NEW "
            "(e.g. fusebench run --model qwen3-0.6b --layers 2 --op swiglu=unfused,compiled)"
        )
    load_plugins(tuple(str(Path(path).resolve()) for path in args.plugin))
    check_op_flags(args.op, op_choices())
    text = experiment_from_flags(
        [model_entry(model, args.layers, args.dtype) for model in args.model],
        args.op,
        args.prompt_tokens,
        args.gen_tokens,
    )
    name = parse_experiment(text).name
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or Path("results") / f"{name}-{stamp}.jsonl"
    path = args.save_experiment or out.with_suffix(".yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, out


def model_entry(model: str, layers: int | None, dtype: str | None) -> dict[str, object]:
    """--model's value as an experiment's model entry: a preset by name, else a checkpoint folder
    (absolute, so the saved experiment runs from any folder)."""
    from fusebench.models.config import preset_names

    from ..measure.hub import is_repo_id

    if model in preset_names():
        entry: dict[str, object] = {"preset": model}
    elif Path(model).is_dir():
        entry = {"path": str(Path(model).resolve())}
    elif is_repo_id(model):
        entry = {"repo": model}
    else:
        raise FlagError(
            f"--model {model}: neither a preset ({', '.join(preset_names())}), a checkpoint "
            "folder, nor a Hugging Face repo id (org/name)"
        )
    if layers is not None and "preset" not in entry:
        raise FlagError(f"--layers {layers}: only for presets; --model {model} runs whole")
    if layers is not None:
        entry["layers"] = layers
    if dtype is not None:
        entry["dtype"] = dtype
    return entry


def check_op_flags(
    ops: list[tuple[str, tuple[str, ...]]], known: dict[str, tuple[tuple[str, ...], str]]
) -> None:
    """Every --op names a registered op and variants of it (plugins loaded first)."""
    for op, values in ops:
        if op not in known:
            raise FlagError(f"--op {op}=...: unknown op {op!r}; choose from {', '.join(known)}")
        unknown = [value for value in values if value not in known[op][0]]
        if unknown:
            raise FlagError(
                f"--op {op}={','.join(values)}: unknown variant {unknown[0]!r} of {op}; "
                f"choose from {', '.join(known[op][0])}"
            )
    repeated = [op for op, _ in ops if [o for o, _ in ops].count(op) > 1]
    if repeated:
        raise FlagError(f"--op {repeated[0]} given twice; list all its variants in one --op")


def override_trials(exp: Experiment, trials: int, console: Console) -> Experiment:
    """--trials N: exactly N timed rounds, said before anything runs when it turns the experiment's
    target off."""
    from ..core.experiment import Trials
    from ..core.flags import with_trials

    if exp.trials is not Trials.FIXED:
        console.print(
            f"--trials {trials}: exactly {trials} timed rounds per cell; "
            f"the experiment's trials: {exp.trials} (rounds from the data or the budget) is off",
            highlight=False,
        )
    return with_trials(exp, trials)


def check_like_a_run(exp: Experiment, args: argparse.Namespace) -> None:
    """A dry run refuses what the real run would (one line, exit 2), so that it can vouch for the
    command line: the --blas choice, and a --resume file that must belong to this experiment.
    Neither starts a process."""
    from ..measure.machine.env import blas_preload_env
    from ..measure.run.resume import resume_state

    blas_preload_env(args.blas)
    if args.resume is not None:
        resume_state(args.resume, exp)


def list_experiments(console: Console) -> int:
    from ..core.flags import shipped_experiments
    from ..core.spec import load_experiment
    from ..present.document import Table, to_console

    rows = tuple(
        (name, " ".join((load_experiment(path).description or "").split()))
        for name, path in shipped_experiments().items()
    )
    to_console([Table(("name", "what it asks"), rows)], console)
    console.print("run one with: fusebench run NAME (or a path to your own YAML file)")
    return 0
