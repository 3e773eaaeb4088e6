"""which fusion to write: every chain of a model's step that mx.compile could fuse, found, timed
and ranked by the tok/s it would give

The model is traced as the runner calls it (one chunked prefill of the prompt, one decode step;
the experiment's baseline variant). Each maximal group of primitives that mx.compile fuses on this
machine (probed on the MLX installed) is a chain; identical chains are counted per step. Each is
rebuilt from the trace, checked (the whole step rebuilt must compute what the model computes),
timed eager against compiled on the step's own values in paired ABBA rounds, and weighed against
the measured step: the expected Δ of prefill and gen tok/s, with its interval. "already compiled"
marks chains the model's own code compiles. A second table times every variant of the chains' ops
(a plugin's too) at those ops' calls. `--confirm N` then measures the top ones end to end, in a
run. Records go to a results file (`fusion`, `step`, `replay`, `variant`, `confirm`, and `op`
records for the samples); `fusebench report` renders it.

examples:
  fusebench fusions e2b --layers 2            a preset (its first two layers)
  fusebench fusions qwen3-0.6b --layers 2     any mlx-lm architecture fusebench has a preset of
  fusebench fusions path/to/checkpoint        a local mlx-lm checkpoint folder
  fusebench fusions default                   every model of an experiment, its first workload
  fusebench fusions gemma3-1b --layers 6 --confirm 3    the top 3 measured end to end
  fusebench fusions e2b --layers 2 --plugin mine.py     your variants ranked beside the chains
  fusebench fusions e2b --layers 2 --shapeless          compiled as mlx-lm compiles activations
  fusebench fusions e2b --layers 2 --format json > fusions.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from rich.console import Console

from ..core.errors import UserError
from .args import add_plugin_argument, at_least, positive_int

DEFAULT_ROUNDS = 10
DEFAULT_TOP = 10


class NoFusionHere(UserError):
    """mx.compile cannot fuse on this machine: nothing to time."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        metavar="MODEL|EXPERIMENT",
        help="a preset, a checkpoint folder or a Hugging Face repo id (as `run --model` takes "
        "them), or an experiment YAML or shipped name: each of its models at its first workload",
    )
    parser.add_argument(
        "--layers", type=positive_int, metavar="N", help="truncate a preset to N layers"
    )
    parser.add_argument("--dtype", metavar="D", help="float32 (default), float16 or bfloat16")
    parser.add_argument("-p", "--prompt-tokens", type=positive_int, default=128, metavar="N")
    parser.add_argument("-n", "--gen-tokens", type=positive_int, default=3, metavar="N")
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=DEFAULT_ROUNDS,
        metavar="N",
        help=f"timed ABBA rounds per chain, and timed trials of the steps "
        f"(default {DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="BLAS threads (default: all cores but one, as a run's workers get)",
    )
    parser.add_argument(
        "--confirm",
        type=at_least(0),
        default=0,
        metavar="N",
        help="then measure the first N classes whose call makes a ranked chain compiled, end to "
        "end: a plugin declaring each as an op (eager | compiled) and a `fusebench run` of the "
        "model with each compiled against it as written (models in mlx-lm's classes)",
    )
    parser.add_argument(
        "--shapeless",
        action="store_true",
        help="compile each chain (and with --confirm each class's call) with "
        "mx.compile(shapeless=True), as mlx-lm compiles its activations and fusebench its "
        "compiled variants: kernels that serve every shape, which MLX may split where the default "
        "compile makes one (on a CPU the two can differ by 20%%)",
    )
    parser.add_argument(
        "--top",
        type=at_least(0),
        default=DEFAULT_TOP,
        metavar="N",
        help=f"rows of each model's table (default {DEFAULT_TOP}; 0: every chain; JSON holds all)",
    )
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="the answer's form"
    )
    parser.add_argument(
        "--out", type=Path, help="results file (default: results/fusions-<timestamp>.jsonl)"
    )
    add_plugin_argument(parser, "; its variants are timed at their op's calls beside the chains")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (for CI logs)")


def main(args: argparse.Namespace, console: Console) -> int:
    from ..measure.machine.env import require_backend

    require_backend()  # before anything imports mlx: one line naming the extra, not a traceback
    from ..measure.fusions.session import FusionJob, run_fusions, targets
    from ..measure.machine.env import collect_env
    from ..measure.machine.probe import auto_threads
    from ..measure.ops.opbench import ensure_worker_env
    from ..measure.plugins import load_plugins

    plugins = tuple(str(Path(path).resolve()) for path in args.plugin)
    load_plugins(plugins)
    found = targets(args.target, args.layers, args.dtype, args.prompt_tokens, args.gen_tokens)
    status = console if args.format == "table" else Console(stderr=True)
    ensure_worker_env(status, args.threads or auto_threads())
    env = collect_env()
    fuses = bool(env.compiles)
    status.print(
        f"{env.cpu} · {env.backend} · BLAS {env.blas_family}, {env.threads} thread(s) · "
        + ("mx.compile fuses here" if fuses else "mx.compile fuses nothing here")
    )
    if not fuses:
        raise NoFusionHere(
            "fusions: mx.compile makes no fused kernel here (on a CPU it builds them with a C++ "
            "compiler, and none was found on PATH: install g++ or clang); nothing to time"
        )
    out = args.out or Path("results") / f"fusions-{datetime.now().strftime('%Y%m%d-%H%M%S')}.jsonl"
    job = FusionJob(
        found,
        args.rounds,
        out,
        env,
        args.confirm,
        plugins,
        quiet=args.format == "json",
        shapeless=args.shapeless,
    )
    answers = run_fusions(job, status, quiet=args.quiet or args.format == "json")
    if args.format == "json":
        print(json.dumps([_json(answer) for answer in answers], indent=1))
        return 0
    from ..present.document import to_console
    from ..present.sections.fusions import fusion_blocks, variant_blocks

    for answer in answers:
        top = args.top if args.top > 0 else None
        to_console(fusion_blocks(answer.model, answer.estimates, answer.replays, top), console)
        to_console(variant_blocks(answer.variants), console)
        for reason in answer.passed_over:
            console.print(f"not confirmed: {reason}")
    console.print(f"records -> {out}")
    if not args.confirm:
        console.print(
            "to measure the top chains end to end (their classes compiled, in a run): --confirm 3"
        )
    return 0


def _json(answer: object) -> dict[str, object]:
    from ..measure.fusions.session import Answer

    assert isinstance(answer, Answer)
    return {
        "model": answer.model,
        "replays": [asdict(r) for r in answer.replays],
        "variants": [asdict(v) for v in answer.variants],
        "passed_over": answer.passed_over,
        "candidates": [
            {
                **asdict(e.record),
                "speed": None
                if e.speed is None or e.speed.speed is None
                else {
                    "delta_pct": e.speed.speed.delta_pct,
                    "low_pct": e.speed.speed.low_pct,
                    "high_pct": e.speed.speed.high_pct,
                    "verdict": None if e.speed.verdict is None else str(e.speed.verdict.word),
                },
                "expected": {metric: asdict(found) for metric, found in e.expected.items()},
                "measured": {metric: asdict(found) for metric, found in e.measured.items()},
            }
            for e in answer.estimates
        ],
    }
