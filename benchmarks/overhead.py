"""Harness overhead: fusebench's reported tok/s against a bare loop making the same model calls.

In one process, on one model, rounds alternate (ABBA) between the worker's `time_trial` and a
hand-written mlx-lm-style loop with no harness at all (no peak-memory reset, no synchronize, no
records, no pipelining helpers). Each side's median tok/s gives the ratio fusebench / bare; the
target is >= 0.95 for prefill, gen and TTFT (mlx-lm's time to first token, read where its loop reads
it: after queuing the first decode step).

Each thread setting runs in a fresh process with the BLAS the workers preload: by default the
workers' own thread count (all cores but one) and the BLAS's default (every core), mlx's and
mlx-lm's own setting.

    python benchmarks/overhead.py [--preset e2b] [--layers 2] [--prompt 128] [--gen 16] [--rounds
    10]
                                  [--threads workers,default]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import mlx.core as mx

from fusebench.measure.machine.env import (
    THREAD_VARIABLES,
    blas_preload_env,
    default_threads,
    loaded_blas,
    thread_env,
)
from fusebench.measure.run.schedules.order import round_order
from fusebench.measure.worker import make_prompt, time_trial
from fusebench.models import load_model
from fusebench.models.gemma4 import Model

TARGET = 0.95
METRICS = ("prefill", "gen", "ttft")


def bare_trial(
    model: Model, prompt: mx.array, gen_tokens: int, step: int
) -> tuple[float, float, float]:
    """prefill_s, gen_s and TTFT as mlx-lm's generate_step would give them, with nothing else
    around."""
    cache = model.make_cache()
    start = time.perf_counter()
    tokens = prompt
    while tokens.shape[1] > 1:
        n = min(step, tokens.shape[1] - 1)
        model(tokens[:, :n], cache=cache)
        mx.eval([c.state for c in cache])
        tokens = tokens[:, n:]
    token = mx.argmax(model(tokens, cache=cache)[:, -1, :], axis=-1)
    mx.eval(token)
    prefilled = first_read = time.perf_counter()
    for i in range(gen_tokens - 1):
        nxt = mx.argmax(model(token[:, None], cache=cache)[:, -1, :], axis=-1)
        mx.async_eval(nxt)
        mx.eval(token)
        if not i:
            first_read = time.perf_counter()
        token = nxt
    mx.eval(token)
    return prefilled - start, time.perf_counter() - prefilled, first_read - start


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """In the child: median tok/s per side and metric over the timed rounds."""
    model = load_model(args.preset, layers=args.layers)
    samples: dict[str, dict[str, list[float]]] = {
        s: {m: [] for m in METRICS} for s in ("fusebench", "bare")
    }
    for r in range(-1, args.rounds):  # round -1 warms both up
        prompt = make_prompt(model.args.vocab_size, 1, args.prompt, 0, max(r, 0))
        for side in round_order(["fusebench", "bare"], r):
            if side == "fusebench":
                timing = time_trial(model, prompt, args.gen, 2048).measured
                seconds = (timing.prefill_s, timing.gen_s, timing.ttft_s)
            else:
                seconds = bare_trial(model, prompt, args.gen, 2048)
            if r >= 0:
                for metric, s, tokens in zip(
                    METRICS, seconds, (args.prompt, args.gen - 1, args.prompt), strict=True
                ):
                    samples[side][metric].append(tokens / s)
    return {
        side: {m: statistics.median(v) for m, v in by_metric.items()}
        for side, by_metric in samples.items()
    }


def child_env(setting: str) -> dict[str, str]:
    """The workers' BLAS preload with `setting` threads: "workers" (all cores but one), "default"
    (the BLAS's own) or a number."""
    env, _ = blas_preload_env("auto", os.environ)
    if setting == "default":
        return {k: v for k, v in env.items() if k not in THREAD_VARIABLES}
    return thread_env(env, default_threads() if setting == "workers" else int(setting))


def run_setting(setting: str, args: argparse.Namespace) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        "--preset",
        args.preset,
        "--layers",
        str(args.layers),
        "--prompt",
        str(args.prompt),
        "--gen",
        str(args.gen),
        "--rounds",
        str(args.rounds),
    ]
    done = subprocess.run(
        command, env=child_env(setting), capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.exit(
            f"threads {setting}: the measuring process failed "
            f"(exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def describe(setting: str) -> str:
    if setting == "default":
        return f"BLAS default ({os.cpu_count()} cores)"
    return f"{default_threads() if setting == 'workers' else setting} thread(s)" + (
        " (workers' default)" if setting == "workers" else ""
    )


def print_setting(setting: str, result: dict) -> None:
    print(f"threads: {describe(setting)} · BLAS {result['blas']}")
    for metric in METRICS:
        ours, bare = result["fusebench"][metric], result["bare"][metric]
        ratio = ours / bare
        print(
            f"  {metric:8s} fusebench {ours:9.2f} tok/s   bare {bare:9.2f} tok/s   ratio "
            f"{ratio:.3f}{'' if ratio >= TARGET else f'   below the {TARGET} target'}"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="e2b")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--gen", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--threads",
        default="workers,default",
        help="comma-separated settings: workers, default (the BLAS's own) or a number",
    )
    # one setting, in its own process
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.child:
        print(json.dumps({**measure(args), "blas": loaded_blas()}))
        return
    print(
        f"{args.preset} ({args.layers} layers), prompt {args.prompt}, gen {args.gen}, "
        f"{args.rounds} rounds, medians; target fusebench / bare >= {TARGET}"
    )
    for setting in args.threads.split(","):
        print_setting(setting, run_setting(setting, args))


if __name__ == "__main__":
    main()
