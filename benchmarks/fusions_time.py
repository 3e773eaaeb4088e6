"""How long `fusebench fusions` takes to answer, and what it answers (issue 65's time targets).

Each case runs `fusebench fusions ...` as a user would (its own process, this build), one after
the other and never beside another timing job; its wall time from start to exit, the command's own
output and its results (with the confirming runs' folders) are kept in `--out`, and a table of the
times against the targets (3 minutes for the plain command on a 2-layer E2B, 10 with `--confirm 3`)
goes to `--out`/times.md.

    .venv/bin/python benchmarks/fusions_time.py --out results/fusions-xeon [--only e2b,gemma3]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# name -> (the command's arguments, the target in seconds, or None where the issue sets none)
CASES = {
    "e2b": (["e2b", "--layers", "2"], 180),
    "e2b-confirm": (
        ["e2b", "--layers", "2", "--plugin", "examples/plugins/fast_softcap.py", "--confirm", "3"],
        600,
    ),
    "e4b": (["e4b", "--layers", "2"], None),
    "26b": (["26b", "--layers", "2"], None),
    "31b": (["31b", "--layers", "2"], None),
    "llama": (["llama3.2-1b", "--layers", "2"], None),
    "qwen3": (["qwen3-0.6b", "--layers", "2"], None),
    "gemma3": (["gemma3-1b", "--layers", "6", "--confirm", "3"], 600),
    # compiled as mlx-lm compiles its activations and the registry its compiled variants
    "e2b-shapeless": (["e2b", "--layers", "2", "--shapeless", "--confirm", "3"], 600),
    "gemma3-shapeless": (["gemma3-1b", "--layers", "6", "--shapeless", "--confirm", "3"], 600),
    "31b-shapeless": (["31b", "--layers", "2", "--shapeless"], None),
}


def run_case(name: str, args: list[str], out: Path) -> float:
    results = out / f"{name}.jsonl"
    command = [sys.executable, "-m", "fusebench", "fusions", *args, "--out", str(results)]
    start = time.perf_counter()
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    said = f"$ fusebench fusions {' '.join(args)}\n{done.stdout}{done.stderr}"
    (out / f"{name}.console.txt").write_text(said)
    if results.exists():  # compressed, as results/ keeps raw records
        with results.open("rb") as raw, gzip.open(f"{results}.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        results.unlink()
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}; see {out / f'{name}.console.txt'}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", help="comma-separated cases: " + ", ".join(CASES))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = args.only.split(",") if args.only else list(CASES)
    times = args.out / "times.md"
    # a case run again replaces its row; the others stay
    rows = {
        line.split(" | ")[0].strip("| "): line
        for line in (times.read_text().splitlines()[2:] if times.exists() else [])
    }
    for name in chosen:
        command, target = CASES[name]
        seconds = run_case(name, command, args.out)
        met = "met" if target is not None and seconds <= target else "missed"
        goal = "—" if target is None else f"{target / 60:.0f} min ({met})"
        shown = f"`fusebench fusions {' '.join(command)}`"
        rows[name] = f"| {name} | {shown} | {seconds:.0f} s | {goal} |"
        print(rows[name], flush=True)
    order = [name for name in CASES if name in rows]
    header = ["| case | command | wall time | target |", "|---|---|---:|---:|"]
    times.write_text("\n".join([*header, *(rows[name] for name in order)]) + "\n")


if __name__ == "__main__":
    main()
