"""time each op variant alone at the exact shapes each model size produces

An end-to-end Δ says that a fusion helped; this says where. Each op × shape is one case: its
variants are warmed up once (which pays mx.compile's JIT), then timed in rounds interleaved ABBA as
`fusebench run` does. The table gives per case and variant the median time, achieved GB/s and
GFLOP/s, the largest deviation from the op's reference variant, and the paired speed Δ against that
reference with its 95% CI. `fusebench report` renders the records.

examples:
  fusebench ops                                        the default experiment's sizes and workloads
  fusebench ops --only geglu,softcap --rounds 15
  fusebench ops experiments/pr18809.yaml --sizes e2b --out results/ops-e2b.jsonl
  fusebench ops --threads 1               BLAS on one thread (default: as a run's workers)
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

from rich.console import Console

from fusebench.models.registry import REGISTRY

from .args import add_plugin_argument, names, positive_int

DEFAULT_EXPERIMENT = "default"
DEFAULT_ROUNDS = 7


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "experiment",
        nargs="?",
        default=DEFAULT_EXPERIMENT,
        help="experiment YAML or shipped name whose preset models and workloads give the shapes "
        f"(default: {DEFAULT_EXPERIMENT})",
    )
    parser.add_argument(
        "--only",
        type=names,
        metavar="OPS",
        help=f"comma-separated ops to time ({', '.join(REGISTRY)}, or a plugin's)",
    )
    parser.add_argument(
        "--sizes",
        type=names,
        metavar="SIZES",
        help="comma-separated presets or size labels to keep, e.g. e2b,26B",
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=DEFAULT_ROUNDS,
        metavar="N",
        help=f"timed ABBA rounds per op and shape (default {DEFAULT_ROUNDS})",
    )
    add_plugin_argument(parser)
    parser.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="BLAS threads (default: the experiment's threads, "
        "else all cores but one, as a run's workers get)",
    )
    parser.add_argument(
        "--out", type=Path, help="results file (default: results/ops-<timestamp>.jsonl)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar (for CI logs)")


def main(args: argparse.Namespace, console: Console) -> int:
    from ..measure.machine.env import require_backend

    require_backend()  # before anything imports mlx: one line naming the extra, not a traceback
    import time

    from ..analysis.opstats import summarize_ops
    from ..core.flags import select_models
    from ..core.spec import load_experiment
    from ..measure.machine.env import blas_warning, collect_env, require_backend
    from ..measure.machine.probe import auto_threads
    from ..measure.ops.opbench import check_ops, ensure_worker_env, experiment_plan, run_ops
    from ..measure.plugins import load_plugins
    from ..present.document import to_console
    from ..present.sections.ops import op_tables

    load_plugins(args.plugin)
    ops = check_ops(args.only)
    exp = select_models(load_experiment(args.experiment), args.sizes, "--sizes")
    plan = experiment_plan(exp)
    cases = plan.cases(ops)
    # The thread count a run of this experiment would give its workers, so op and end-to-end figures
    # agree.
    ensure_worker_env(console, args.threads or exp.threads or auto_threads())
    # its `threads`, read from the environment just set, is what the header records
    env = collect_env()
    if warning := blas_warning(env):
        console.print(f"[yellow]warning[/]: {warning}")
    out = args.out or Path("results") / f"ops-{datetime.now().strftime('%Y%m%d-%H%M%S')}.jsonl"
    console.print(
        f"{len(cases)} op shapes × their variants, {args.rounds} rounds -> {out}  "
        f"({env.backend}, {env.device}, BLAS {env.blas}, {env.threads} thread(s))"
    )
    if args.rounds < 3:
        console.print(
            f"[yellow]warning[/]: {args.rounds} rounds give "
            "no meaningful confidence interval; use 3 or more"
        )
    for note in plan.notes:
        console.print(f"[yellow]note[/]: {note}")
    start = time.perf_counter()
    records = run_ops(plan, cases, out, console, rounds=args.rounds, quiet=args.quiet, env=env)
    notes = {c.label: c.note for c in cases if c.note}
    to_console(op_tables(summarize_ops(records), notes), console)
    console.print(f"{len(records)} samples in {time.perf_counter() - start:.0f} s -> {out}")
    return 0
