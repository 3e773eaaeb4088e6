"""Harness overhead: fusebench's reported tok/s against a bare loop making the same model calls.

In one process, on one model, rounds alternate (ABBA) between the worker's `time_trial` and a hand-written
loop with no harness at all (no peak-memory reset, no synchronize, no records, no pipelining helpers). Each
side's median tok/s gives the ratio fusebench / bare; the target is >= 0.98 for prefill and for gen.

    python3 benchmarks/overhead.py [--preset e2b] [--layers 2] [--prompt 128] [--gen 16] [--rounds 10]

Run it with the BLAS the workers use, e.g. LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx

from bench.measure.env import loaded_blas
from bench.measure.schedule import round_order
from bench.measure.worker import make_prompt, time_trial
from models import load_model


def bare_trial(model, prompt: mx.array, gen_tokens: int, step: int) -> tuple[float, float]:
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
    prefilled = time.perf_counter()
    for _ in range(gen_tokens - 1):
        nxt = mx.argmax(model(token[:, None], cache=cache)[:, -1, :], axis=-1)
        mx.async_eval(nxt)
        mx.eval(token)
        token = nxt
    mx.eval(token)
    return prefilled - start, time.perf_counter() - prefilled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="e2b")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--gen", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    model = load_model(args.preset, layers=args.layers)
    samples: dict[str, dict[str, list[float]]] = {s: {"prefill": [], "gen": []} for s in ("fusebench", "bare")}
    for r in range(-1, args.rounds):  # round -1 warms both up
        prompt = make_prompt(model.args.vocab_size, 1, args.prompt, 0, max(r, 0))
        for side in round_order(["fusebench", "bare"], r):
            if side == "fusebench":
                timing = time_trial(model, prompt, args.gen, 2048)
                prefill_s, gen_s = timing.prefill_s, timing.gen_s
            else:
                prefill_s, gen_s = bare_trial(model, prompt, args.gen, 2048)
            if r >= 0:
                samples[side]["prefill"].append(args.prompt / prefill_s)
                samples[side]["gen"].append((args.gen - 1) / gen_s)

    print(
        f"{args.preset} ({args.layers} layers), prompt {args.prompt}, gen {args.gen}, {args.rounds} rounds, "
        f"BLAS {loaded_blas()}"
    )
    for metric in ("prefill", "gen"):
        ours, bare = (statistics.median(samples[s][metric]) for s in ("fusebench", "bare"))
        print(f"{metric:8s} fusebench {ours:9.2f} tok/s   bare {bare:9.2f} tok/s   ratio {ours / bare:.3f}")


if __name__ == "__main__":
    main()
