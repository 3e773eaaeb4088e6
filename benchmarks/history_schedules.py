"""Does `fusebench history show` find a 3% step in runs of either schedule? (issue 66, item 9)

A history of 12 commits is made from one real `ci` run (its current build's first 8 rounds,
as a run of `ci` at the gate's budget gets): every commit's run is that run under a commit of its
own, every variant 3% slower from commit 7 on (each trial's seconds times 1.03, its tok/s over
1.03), and commits 4 and 10 one-run spikes (8% slower). It is made once from a run in sequential
rounds and once from a run in duets, of the same machine, build and hour
(results/duet-aa-*: `run ci --against HEAD --trials 20`, schedules alternating), added to a
scratch store and read back with `fusebench history show`. Beside each: the per-round spread of
the runs' tok/s, which sets what a tok/s series can resolve.

    .venv/bin/python benchmarks/history_schedules.py [--out DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `run ci --against HEAD --trials 20`, schedules alternating in one sitting (benchmarks/duet_aa.py)
SOURCES = [
    ROOT / "results" / folder / f"{schedule}-{n}.jsonl.gz"
    for folder in ("duet-aa-zen4-rework", "duet-aa-avx2", "duet-aa-zen4")
    for schedule in ("sequential", "duet")
    for n in (1, 2)
]
COMMITS, SLOW_AT, SPIKES, ROUNDS = 12, 7, (4, 10), 8
SLOWER, SPIKE = 1.03, 1.08


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.open(path, "rt") if line.strip()]


def slowed(record: dict, factor: float) -> dict:
    """A trial `factor` times slower: its seconds times it, its tok/s over it."""
    out = dict(record)
    for key in ("prefill_s", "gen_s", "ttft_s", "prefill_cpu_s", "gen_cpu_s"):
        if out.get(key) is not None:
            out[key] = out[key] * factor
    for key in ("prefill_tps", "gen_tps", "ttft_tps"):
        if out.get(key) is not None:
            out[key] = out[key] / factor
    if out.get("step_s"):
        out["step_s"] = [s * factor for s in out["step_s"]]
    return out


def commit_run(records: list[dict], k: int) -> list[dict]:
    """The run as commit k's: one build, the first ROUNDS rounds, slowed as the demo says."""
    commit = f"{k:02d}" * 20
    factor = (SLOWER if k >= SLOW_AT else 1.0) * (SPIKE if k in SPIKES else 1.0)
    out = []
    for r in records:
        r = {**r, "run_id": f"{r['run_id']}-c{k:02d}"}
        if r["kind"] == "run":
            r["env"] = {**r["env"], "git_commit": commit, "git_dirty": False}
            r["builds"] = {"current": {**r["builds"]["current"], "commit": commit}}
        elif r.get("build") == "reference":
            continue
        elif r["kind"] == "trial":
            if not r["warmup"] and r["round"] >= ROUNDS:
                continue
            r = slowed(r, factor) if not r["warmup"] else r
        elif r["kind"] == "stop":
            r["rounds"] = min(r.get("rounds") or ROUNDS, ROUNDS)
        out.append(r)
    return out


def spreads(records: list[dict]) -> dict[str, float]:
    """Each variant × metric's per-round SD of log tok/s over the kept rounds (%)."""
    logs = defaultdict(list)
    for r in records:
        timed = r["kind"] == "trial" and not r["warmup"] and r["round"] < ROUNDS
        if timed and r.get("build") != "reference":
            for metric in ("prefill", "gen"):
                if r.get(f"{metric}_tps"):
                    logs[f"{r['variant']} {metric}"].append(math.log(r[f"{metric}_tps"]))
    return {k: 100 * statistics.stdev(v) for k, v in logs.items() if len(v) > 1}


def fusebench(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fusebench", *args], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"fusebench {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = []
    for source in SOURCES:
        records = read(source)
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            files = []
            for k in range(1, COMMITS + 1):
                path = folder / f"commit-{k:02d}.jsonl"
                path.write_text("".join(json.dumps(r) + "\n" for r in commit_run(records, k)))
                files.append(str(path))
            store = str(folder / "history.sqlite")
            fusebench("history", "add", *files, "--store", store)
            shown = fusebench("history", "show", "--store", store)
        sds = spreads(records)
        lines += [
            f"## {source.relative_to(ROOT)}",
            "",
            "per-round SD of log tok/s, first 8 rounds: "
            + ", ".join(f"{k} {v:.2f}%" for k, v in sorted(sds.items())),
            "",
            "```",
            shown.rstrip(),
            "```",
            "",
        ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "show.md").write_text(text)


if __name__ == "__main__":
    main()
