"""The product's per-round spread beside the machine's floor, in one sitting.

The floor: a bare loop of a trial's work, the way a worker times it (E2B at 2 layers, a 128-token
prompt and 3 tokens, the baseline variant, fusebench.models.loading and
fusebench.measure.worker.time_trial), in one process started as workers are (same interpreter, BLAS
preload and threads as `auto` chose), two identical trials back to back on the same prompt, PAIRS
times: the SD of log(second / first) for prefill and for gen. No runner, no parent process, no
progress bar, no records.

The product: `fusebench run aa --trials PAIRS` (experiments/aa.yaml: the same model and workload,
two variants with identical ops), its rows' per-round SD of the log ratio, from its results.

The issue's target: the product within 1.5x of the floor. `--threads N` measures both at N BLAS
threads a worker instead of the count `threads: auto` chose (the product from a copy of aa.yaml that
sets `threads: N`).

    .venv/bin/python benchmarks/floor.py --out results/plan-zen4/floor.md
    .venv/bin/python benchmarks/floor.py --threads 2 --pairs 30
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.measure.machine.env import child_command  # noqa: E402

BARE = r"""
import json, math
import numpy as np
from fusebench.measure.worker import make_prompt, time_trial
from fusebench.models.loading import load_model
model = load_model("e2b", layers=2)
model.set_ops({{"geglu": "unfused", "softcap": "unfused", "attention": "manual"}})
logs = {{"prefill": [], "gen": []}}
for pair in range(-1, {pairs}):
    prompt = make_prompt(model.vocab_size, 1, 128, 0, max(pair, 0))
    a, b = (time_trial(model, prompt, 3, 2048).measured for _ in range(2))
    if pair >= 0:
        logs["prefill"].append(math.log(a.prefill_s / b.prefill_s))
        logs["gen"].append(math.log(a.gen_s / b.gen_s))
print(json.dumps({{m: float(np.std(v, ddof=1)) for m, v in logs.items()}}))
"""


def bare_floor(pairs: int, threads_asked: int | None) -> dict[str, float]:
    from fusebench.measure.machine.probe import worker_environment

    env, _, threads = worker_environment("auto", threads_asked)
    done = subprocess.run(
        [*child_command("-c"), BARE.format(pairs=pairs)],  # this tree, as a worker
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return {"threads": threads.threads, **json.loads(done.stdout.strip().splitlines()[-1])}


def product_spread(pairs: int, threads: int | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "aa.jsonl"
        experiment = ROOT / "experiments" / "aa.yaml"
        if threads is not None:
            text = experiment.read_text() + f"threads: {threads}\n"
            experiment = Path(folder) / "aa.yaml"
            experiment.write_text(text)
        subprocess.run(
            [
                *child_command("fusebench"),
                "run",
                str(experiment),
                "--trials",
                str(pairs),
                "--quiet",
                "--out",
                str(out),
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        by = defaultdict(dict)
        for line in out.read_text().splitlines():
            r = json.loads(line)
            if r["kind"] == "trial" and not r["warmup"]:
                by[r["round"]][r["variant"]] = r
    logs = {"prefill": [], "gen": []}
    for variants in by.values():
        if len(variants) == 2:
            a, b = variants["baseline"], variants["baseline-again"]
            for metric in logs:
                logs[metric].append(math.log(b[f"{metric}_tps"] / a[f"{metric}_tps"]))
    return {m: float(np.std(v, ddof=1)) for m, v in logs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--threads", type=int, help="BLAS threads a worker (default: auto's)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    floor = bare_floor(args.pairs, args.threads)
    product = product_spread(args.pairs, args.threads)
    lines = [
        f"E2B 2 layers, pp128 tg3, {args.pairs} pairs each, BLAS threads {floor['threads']}, "
        "in one sitting: the SD of a pair's log ratio",
        "",
        "| metric | floor (a bare loop) | product (`fusebench run aa`) | product / floor |",
        "|---|---|---|---|",
    ]
    for metric in ("prefill", "gen"):
        ratio = product[metric] / floor[metric]
        lines.append(
            f"| {metric} | {100 * floor[metric]:.2f}% | {100 * product[metric]:.2f}% | "
            f"{ratio:.2f}x |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
