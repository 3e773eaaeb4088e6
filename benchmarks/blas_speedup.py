"""The fp32 prefill speedup from the BLAS choice: the same trials with the bundled reference BLAS
and with the optimized one that `--blas auto` preloads, each in a fresh process as fusebench's
workers are.

    python3 benchmarks/blas_speedup.py [--preset e2b] [--layers 2] [--prompt 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from fusebench.measure.machine.env import blas_preload_env

CHILD = """
import json, sys
from fusebench.measure.machine.env import loaded_blas
from fusebench.measure.worker import make_prompt, time_trial
from fusebench.models import load_model
preset, layers, prompt_tokens, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
int(sys.argv[4])
model = load_model(preset, layers=layers)
tps = []
for r in range(rounds + 1):
    prompt = make_prompt(model.args.vocab_size, 1, prompt_tokens, 0, r)
    timing = time_trial(model, prompt, 1, 2048).measured
    if r:
        tps.append(prompt_tokens / timing.prefill_s)
print(json.dumps({"blas": loaded_blas(), "prefill_tps": tps}))
"""


def measure(choice: str, args: argparse.Namespace) -> dict:
    env, _ = blas_preload_env(choice, os.environ)
    argv = [args.preset, str(args.layers), str(args.prompt), str(args.rounds)]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="e2b")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = {choice: measure(choice, args) for choice in ("reference", "auto")}
    for choice, result in results.items():
        print(
            f"{choice:9s} {statistics.median(result['prefill_tps']):8.1f} "
            f"prefill tok/s   {result['blas']}"
        )
    medians = {
        choice: statistics.median(result["prefill_tps"]) for choice, result in results.items()
    }
    speedup = medians["auto"] / medians["reference"]
    where = f"{args.preset}, {args.layers} layers, prompt {args.prompt}"
    print(f"fp32 prefill speedup from the BLAS: {speedup:.1f}x ({where})")


if __name__ == "__main__":
    main()
