"""`threads: auto`: the BLAS thread count that buys the most precision per second on this machine,
measured.

How
    Two sampler processes start as workers do (same interpreter and BLAS preload), one limited to 1
    thread and one to every core. They take turns, SAMPLES times each, timing one step-shaped piece
    of work: an fp32 matmul of a 128-token prompt through a 1536 x 16384 projection and a
    matrix-vector read of the same weights, the two halves of a trial. A setting's precision per
    second is 1 / (s² · t): t its mean sample time, s the spread of its log sample times (the
    pairwise scale of analysis.inference's outlier rule, so one stalled sample does not decide, as
    one wild round does not decide a row). Every core wins only when it buys at least MARGIN times
    the precision per second of one thread: more threads also means a worker that any other process
    on the machine can stall, which a short probe sees only in part.
    Turns, not one block after the other, so a slow minute of the machine hits both settings alike.

Cached per machine (the fingerprint and a hash of the CPU's model, flags and cores, `machine_key`),
as the peak probe is, so the probe runs once; `fusebench env --probe` measures again. The run header
records the choice and its figures (`ThreadChoice`), and the report says what was chosen and why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from ..analysis.inference import pairwise_scale
from ..core.header import Env, Setting, ThreadChoice
from .env import cache_dir, machine_key, read_cached, thread_env, write_cached

SAMPLES = 30  # timed turns per setting
WARMUP = 2  # untimed turns per setting first
MARGIN = 1.25  # every core must buy this much more precision per second than one thread
SAMPLE_TOKENS, SAMPLE_IN, SAMPLE_OUT = 128, 1536, 16384


def cache_path(env: Env) -> Path:
    return cache_dir() / f"threads-v1-{machine_key(env)}.json"


def choose_threads(
    worker_env: dict[str, str], env: Env, cores: int | None = None, fresh: bool = False
) -> ThreadChoice:
    """The measured choice for this machine, from the cache unless `fresh` (or none is cached)."""
    cores = cores or os.cpu_count() or 1
    if cores == 1:
        return ThreadChoice(1, reason="one core")
    path = cache_path(env)
    if not fresh and (cached := read_cached(path, ThreadChoice)):
        return cached
    choice = decide(measure(worker_env, (1, cores)))
    write_cached(path, choice)
    return choice


def decide(settings: tuple[Setting, ...]) -> ThreadChoice:
    one, every = settings[0], settings[-1]
    gain = every.precision_per_s / one.precision_per_s
    if gain >= MARGIN:
        return ThreadChoice(
            every.threads,
            settings,
            f"{every.threads} threads gave {gain:.2f}x the precision "
            f"per second of 1 (at least {MARGIN:g}x needed)",
        )
    return ThreadChoice(
        one.threads,
        settings,
        f"{every.threads} threads gave {gain:.2f}x the precision per second "
        f"of 1, less than the {MARGIN:g}x that would pay for a worker any "
        "other process can stall",
    )


def measure(worker_env: dict[str, str], counts: tuple[int, ...]) -> tuple[Setting, ...]:
    """Each thread count's samples, the sampler processes taking turns."""
    samplers = [
        subprocess.Popen(
            [sys.executable, "-m", __name__],
            env=thread_env(worker_env, n),
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for n in counts
    ]
    try:
        times: list[list[float]] = [[] for _ in counts]
        for turn in range(WARMUP + SAMPLES):
            for i, sampler in enumerate(samplers):
                seconds = _ask(sampler)
                if turn >= WARMUP:
                    times[i].append(seconds)
    finally:
        for sampler in samplers:
            sampler.stdin.close()
            sampler.wait(timeout=30)
    return tuple(
        Setting(n, sum(t) / len(t), _log_sd(t)) for n, t in zip(counts, times, strict=True)
    )


def _ask(sampler: subprocess.Popen) -> float:
    sampler.stdin.write("sample\n")
    sampler.stdin.flush()
    return float(sampler.stdout.readline().split()[0])


def _log_sd(times: list[float]) -> float:
    return pairwise_scale(np.log(times))


def serve(commands: TextIO, answers: TextIO) -> None:
    """The sampler: per line read ("sample" or "sample N"), one (or N) timed pieces of step-shaped
    work, answered as "WALL_S CPU_S" (the process's CPU seconds, for measure.duet's clocks)."""
    import mlx.core as mx

    key = mx.random.key(0)
    x = mx.random.normal((SAMPLE_TOKENS, SAMPLE_IN), key=key)
    w = mx.random.normal((SAMPLE_OUT, SAMPLE_IN), key=key)
    v = mx.random.normal((1, SAMPLE_IN), key=key)
    mx.eval(x, w, v)
    for line in commands:
        words = line.split()
        reps = int(words[1]) if len(words) > 1 else 1
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(reps):
            mx.eval(x @ w.T, v @ w.T)
        answers.write(f"{time.perf_counter() - start} {time.process_time() - cpu}\n")
        answers.flush()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
