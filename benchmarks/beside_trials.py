"""Does a reader of /proc waking once a second stall a worker's trials? Pairs of identical trials
(E2B at 2 layers, pp128 tg3, the baseline variant, timed as a worker times them), with a process
running the product's load sampler as it was until 2026-12-05 (measure.machine.load, one reading of
/proc a second: ~1.2 ms of CPU) in random blocks of pairs and stopped (SIGSTOP) in the others. Per
condition: the SD of a pair's log ratio, the pairs beyond 5% and 10%, the largest. Run it with the
workers' environment (BLAS preload, thread count) in front:

    env LD_PRELOAD=... OPENBLAS_NUM_THREADS=2 .venv/bin/python benchmarks/beside_trials.py \\
        --blocks 24 --pairs 4 --seed 1 --out results/sampler-beside-zen4/t2-seed1.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import own_tree  # noqa: F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.measure.machine.env import child_command

SAMPLER = """
import time
from fusebench.measure.machine.load import _cpu_times
while True:  # the old LoadSampler's loop: a reading of /proc every second
    time.sleep(1.0)
    _cpu_times()
"""


def pairs_beside(preset: str, blocks: int, per: int, seed: int) -> dict[str, dict[str, list]]:
    from fusebench.measure.worker import make_prompt, time_trial
    from fusebench.models.loading import load_model

    sampler = subprocess.Popen([*child_command("-c"), SAMPLER])  # this tree, as a worker
    os.kill(sampler.pid, signal.SIGSTOP)
    model = load_model(preset, layers=2)
    model.set_ops({"geglu": "unfused", "softcap": "unfused", "attention": "manual"})
    conditions = ["on", "off"] * (blocks // 2)
    random.Random(seed).shuffle(conditions)
    logs = {c: {"prefill": [], "gen": [], "s": []} for c in ("on", "off")}
    for _ in range(2):  # warm-up
        time_trial(model, make_prompt(model.vocab_size, 1, 128, 0, 0), 3, 2048)
    index = 0
    try:
        for condition in conditions:
            os.kill(sampler.pid, signal.SIGCONT if condition == "on" else signal.SIGSTOP)
            time.sleep(0.2)
            for _ in range(per):
                index += 1
                prompt = make_prompt(model.vocab_size, 1, 128, 0, index)
                began = time.perf_counter()
                a, b = (time_trial(model, prompt, 3, 2048).measured for _ in range(2))
                logs[condition]["s"].append((time.perf_counter() - began) / 2)
                logs[condition]["prefill"].append(math.log(a.prefill_s / b.prefill_s))
                logs[condition]["gen"].append(math.log(a.gen_s / b.gen_s))
    finally:
        sampler.kill()
    return logs


def describe(logs: dict[str, dict[str, list]]) -> list[str]:
    lines = ["| sampler | pairs | s a trial | metric | SD | beyond 5% | beyond 10% | largest |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    for condition, by in logs.items():
        for metric in ("prefill", "gen"):
            v = np.array(by[metric])
            a = np.abs(v)
            lines.append(
                f"| {condition} | {len(v)} | {np.median(by['s']):.3f} | {metric} | "
                f"{100 * np.std(v, ddof=1):.2f}% | {(a > 0.05).sum()} | {(a > 0.10).sum()} | "
                f"{100 * a.max():.1f}% |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="e2b")
    parser.add_argument("--blocks", type=int, default=24)
    parser.add_argument("--pairs", type=int, default=4, help="pairs a block")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logs = pairs_beside(args.preset, args.blocks, args.pairs, args.seed)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "?")
    print(f"{args.preset} 2 layers, BLAS threads {threads}, {args.blocks} blocks of {args.pairs}")
    print("\n".join(describe(logs)))
    if args.out:
        args.out.write_text(json.dumps({"threads": threads, **vars(args), "out": None, **logs}))


if __name__ == "__main__":
    main()
