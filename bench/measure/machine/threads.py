"""`threads: auto`: the BLAS thread count that buys the most precision per second on this machine,
measured.

How
    Two sampler processes start as workers do (same interpreter and BLAS preload), one limited to 1
    thread and one to every core. They take turns, SAMPLES times each, timing one step-shaped piece
    of work: an fp32 matmul of a 128-token prompt through a 1536 x 16384 projection and a
    matrix-vector read of the same weights, the two halves of a trial. A setting's precision per
    second is 1 / (s² · t): t its mean sample time, s the SD of its log sample times, stalls and
    all, since stalls are what decide a run's intervals (until 2026-12-05 a robust scale, so one
    stalled sample did not count; on the Zen 4 it chose two threads, whose runs then scattered
    8.2% a round against 3.1% on one: issue 53). Every core wins only when its gain is surely
    above 1: the lower bound of a bootstrap over both settings' samples (the BOUND quantile) must
    exceed 1. More threads also means a worker that any other process can stall, which a short
    probe sees only in part.
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

from ...core.header import Env, Setting, ThreadChoice
from .env import (
    cache_dir,
    child_command,
    machine_key,
    read_cached,
    thread_env,
    write_cached,
)

SAMPLES = 30  # timed turns per setting
WARMUP = 2  # untimed turns per setting first
MARGIN = 1.25  # without samples: every core must buy this much more precision per second
BOUND = 0.10  # the quantile of the gain that must exceed 1 (a one-sided 90% lower bound)
SAMPLE_TOKENS, SAMPLE_IN, SAMPLE_OUT = 128, 1536, 16384


def cache_path(env: Env) -> Path:
    return cache_dir() / f"threads-v2-{machine_key(env)}.json"


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
    """Every core where its precision per second beats one thread's with confidence: the lower
    bound of the gain (the BOUND quantile of a bootstrap over both settings' samples) above 1.
    Without samples (a probe cached before they were kept), the gain itself at MARGIN."""
    one, every = settings[0], settings[-1]
    gain = every.precision_per_s / one.precision_per_s
    low = gain_lower_bound(one, every)
    wins = low > 1.0 if low is not None else gain >= MARGIN
    figures = (
        f"{gain:.2f}x the precision per second of 1 (at least {low:.2f}x at "
        f"{100 * (1 - BOUND):.0f}% confidence)"
        if low is not None
        else f"{gain:.2f}x the precision per second of 1 ({MARGIN:g}x needed)"
    )
    if wins:
        return ThreadChoice(every.threads, settings, f"{every.threads} threads gave {figures}")
    return ThreadChoice(
        one.threads,
        settings,
        f"{every.threads} threads gave {figures}: not surely more than one thread's, which no "
        "other process can stall across cores",
    )


def gain_lower_bound(one: Setting, every: Setting, draws: int = 2000) -> float | None:
    """The BOUND quantile of every core's precision per second over one thread's, resampling each
    setting's samples (seeded: the same samples give the same bound); None without samples."""
    if len(one.samples) < 3 or len(every.samples) < 3:
        return None
    rng = np.random.default_rng(0)

    def precision(samples: tuple[float, ...]) -> np.ndarray:
        logs = np.log(np.asarray(samples))
        drawn = logs[rng.integers(0, len(logs), size=(draws, len(logs)))]
        sd = np.maximum(drawn.std(axis=1, ddof=1), 1e-4)
        return 1.0 / (sd**2 * np.exp(drawn).mean(axis=1))

    return float(np.quantile(precision(every.samples) / precision(one.samples), BOUND))


def measure(worker_env: dict[str, str], counts: tuple[int, ...]) -> tuple[Setting, ...]:
    """Each thread count's samples, the sampler processes taking turns."""
    samplers = [
        subprocess.Popen(
            child_command(__name__),
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
        Setting(n, sum(t) / len(t), _log_sd(t), tuple(round(x, 6) for x in t))
        for n, t in zip(counts, times, strict=True)
    )


def _ask(sampler: subprocess.Popen) -> float:
    sampler.stdin.write("sample\n")
    sampler.stdin.flush()
    return float(sampler.stdout.readline().split()[0])


def _log_sd(times: list[float]) -> float:
    """The plain SD of the log sample times: the spread a run's intervals will use, stalls and all
    (a robust scale would let the stalls that decide a run's intervals go unseen)."""
    return float(np.std(np.log(times), ddof=1))


def serve(commands: TextIO, answers: TextIO) -> None:
    """The sampler: per line read ("sample" or "sample N"), one (or N) timed pieces of step-shaped
    work, answered as "WALL_S CPU_S" (the process's CPU seconds, for measure.run.pilot's clocks)."""
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
