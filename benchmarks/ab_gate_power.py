"""The A/B gate's false alarms and power on this machine, from real `run --against` runs.

Each run measures a *current* build against the reference build (this tree) with `experiments/ci.yaml`, exactly as
.ci/run does, then asks `fusebench check`. The current build is a throwaway copy of this tree; for a slowdown of
s%, the copy's worker sleeps s% of each prefill and of each decode step after it happened (a patch to the copy's
bench/measure/worker.py, never a hook in the product). s = 0 is an A/A run of two identical builds: any failure is a
false alarm. Slowdowns are interleaved across repetitions so machine drift lands on each alike, and every results
file is kept.

    python3 benchmarks/ab_gate_power.py --repeat 5 --slowdowns 0,5,10,20 --out results/gate-ab
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFILL = ("    mx.eval(first)\n    prefilled = time.perf_counter()\n",
           "    mx.eval(first)\n    time.sleep(SLOWDOWN * (time.perf_counter() - start))\n"
           "    prefilled = time.perf_counter()\n")
DECODE = ("        if i:  # the first token waited for here is the prefill's, already counted\n"
          "            ready.append(time.perf_counter())\n",
          "        if i:  # the first token waited for here is the prefill's, already counted\n"
          "            time.sleep(SLOWDOWN * (time.perf_counter() - (ready[-1] if ready else last)))\n"
          "            ready.append(time.perf_counter())\n")


def slowed_copy(dest: Path, slowdown_pct: float) -> Path:
    """This tree's bench/ and models/, with the worker slowed by slowdown_pct."""
    for part in ("bench", "models"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    worker = dest / "bench" / "measure" / "worker.py"
    text = worker.read_text()
    for old, new in (PREFILL, DECODE):
        assert old in text, f"the worker changed; update the patch: {old!r}"
        text = text.replace(old, new, 1)
    text = text.replace("    ready = []\n", "    ready = []\n    last = time.perf_counter()\n", 1)
    worker.write_text(text.replace("ATOL_BY_DTYPE = ", f"SLOWDOWN = {slowdown_pct / 100!r}\nATOL_BY_DTYPE = ", 1))
    return dest


def one_run(slowdown: float, out: Path, experiment: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="fusebench-gate-") as folder:
        current = slowed_copy(Path(folder), slowdown)
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "bench", "run", str(experiment), "--against", str(ROOT),
                              "--out", str(out), "--quiet"], cwd=current, capture_output=True, text=True)
        seconds = time.monotonic() - start
    check = subprocess.run([sys.executable, "-m", "bench", "check", str(out), "--format", "json"], cwd=ROOT,
                           capture_output=True, text=True)
    verdicts = json.loads(check.stdout)["verdicts"] if check.returncode in (0, 1) else []
    failed = [f"{v['variant']} {v['metric']} {v['delta_pct']:+.1f}%" for v in verdicts if v["failed"]]
    return {"slowdown_pct": slowdown, "file": str(out), "run_exit": run.returncode, "check_exit": check.returncode,
            "seconds": round(seconds, 1), "failed": failed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--slowdowns", default="0,5,10,20", help="percentages, comma-separated")
    parser.add_argument("--experiment", type=Path, default=ROOT / "experiments" / "ci.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gate-ab")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    log = args.out / "runs.jsonl"
    for i in range(args.repeat):
        for slowdown in slowdowns:
            row = one_run(slowdown, args.out / f"s{slowdown:g}-{i + 1:02d}.jsonl", args.experiment)
            print(json.dumps(row), flush=True)
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    for slowdown in slowdowns:
        mine = [r for r in rows if r["slowdown_pct"] == slowdown and r["run_exit"] == 0]
        caught = sum(r["check_exit"] == 1 for r in mine)
        what = "false alarms" if slowdown == 0 else "caught"
        print(f"slowdown {slowdown:g}%: {caught}/{len(mine)} {what}; "
              f"median {sorted(r['seconds'] for r in mine)[len(mine) // 2] if mine else 0:.0f} s a run")


if __name__ == "__main__":
    main()
