"""show backend, device, BLAS and versions that a run would record

What a run records about this machine, read in a process started as the workers are, so the BLAS
shown is the one the workers really load. With the stock mlx-cpu wheel's reference BLAS it warns and
gives the remedy.

examples:
  fusebench env
  fusebench env --probe          also measure peak fp32 matmul GFLOP/s and memory GB/s (about 2 s),
                                 and measure again the threads and the schedule `auto` chooses
                                 (about 40 s)
"""

from __future__ import annotations

import argparse
from functools import partial

from rich.console import Console

from .args import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--probe", action="store_true", help="also measure peak fp32 matmul GFLOP/s and copy GB/s"
    )
    parser.add_argument(
        "--blas", default="auto", metavar="auto|reference|PATH", help="BLAS as workers would use it"
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="BLAS threads as workers would use them (default: measured on this machine, as "
        "`threads: auto` does; --probe measures again)",
    )


def main(args: argparse.Namespace, console: Console) -> int:
    from ..core.experiment import Schedule
    from ..measure.machine.env import backend_problem, blas_warning, collect_env
    from ..measure.machine.probe import probe_peaks_in, worker_environment
    from ..present.env import print_env

    if problem := backend_problem():  # what can be read without mlx, and the one thing to install
        print_env(console, collect_env(), warning=problem, title="error: no MLX backend")
        return 2
    from ..measure.run.pilot import choose_schedule  # its pilot's workers import mlx

    worker_env, env, threads = worker_environment(args.blas, args.threads, fresh=args.probe)
    probe = probe_peaks_in(worker_env) if args.probe else None
    print_env(console, env, probe, blas_warning(env))
    if threads.reason:
        console.print(
            f"BLAS threads: {threads.threads}, measured on this machine: {threads.reason}",
            highlight=False,
        )
    say = partial(console.print, highlight=False)  # a pilot says it is starting
    schedule = choose_schedule(
        Schedule.AUTO, env, worker_env, threads.threads, fresh=args.probe, say=say
    )
    console.print(schedule.line, highlight=False)
    return 0
