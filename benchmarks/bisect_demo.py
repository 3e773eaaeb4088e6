"""`fusebench bisect` on a scratch history: does it name the commit that made the model ~10% slower,
and how long does it take on this machine?

A temporary git repository is made from a copy of this tree (bench/ and models/) and a small
experiment, then 7 more commits; every commit changes a note, and the one at --slow-at also slows
the worker by --slowdown percent (benchmarks/ab_gate_power.py's patch: a sleep after each prefill
and before each decode step is queued, in the scratch copy only). `fusebench bisect FIRST LAST` runs
in that repository; its JSON answer, its wall time and every A/B run's results file are kept under
--out.

    python3 benchmarks/bisect_demo.py --out results/bisect-demo
    python3 benchmarks/bisect_demo.py --wait --experiment experiments/ci.yaml --out DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

# the sibling script: run as a script, its folder is on sys.path
from ab_gate_power import fusebench_of, slowed_copy

ROOT = Path(__file__).resolve().parents[1]
# The gate's model and workload with one variant: a change to the worker slows every variant alike,
# so one is enough to find it, and each A/B round costs a third of ci.yaml's.
EXPERIMENT = """\
name: bisect-demo
models:
  - {preset: e2b, layers: 2, dtype: float32}
variants:
  baseline: {geglu: unfused, softcap: unfused, attention: manual}
comparisons: []
workloads: {prompt_tokens: 128, gen_tokens: 3, batch: 1}
trials: auto
precision: 3%
max_rounds: 16
budget_s: 60
warmup: 1
seed: 0
timeout_s: 300
correctness: {reference: baseline, tokens: 4}
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def scratch_history(
    repo: Path,
    commits: int,
    slow_at: int,
    slowdown_pct: float,
    wait: bool = False,
    experiment: str = EXPERIMENT,
) -> list[str]:
    """commits+1 commits (the first is this tree as it is), oldest first; commit `slow_at` slows the
    worker."""
    for part in ("bench", "models", "experiments"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    (repo / "demo.yaml").write_text(experiment)
    slowed = slowed_copy(repo.parent / "slowed", slowdown_pct, wait)
    slow = slowed / "bench" / "measure" / "worker.py"
    git(repo, "init", "-q")
    hashes = []
    for i in range(commits + 1):
        (repo / "NOTES.md").write_text(f"note {i}\n")
        if i == slow_at:
            shutil.copy(slow, repo / "bench" / "measure" / "worker.py")
        git(repo, "add", "-A")
        subject = f"change {i}" + (
            f" (slows the worker by {slowdown_pct:g}%)" if i == slow_at else ""
        )
        git(
            repo,
            "-c",
            "user.name=demo",
            "-c",
            "user.email=demo@example.com",
            "commit",
            "-q",
            "-m",
            subject,
        )
        hashes.append(git(repo, "rev-parse", "HEAD"))
    return hashes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--commits", type=int, default=7, help="commits after the good one (default 7: 8 in all)"
    )
    parser.add_argument(
        "--slow-at", type=int, default=5, help="which commit slows the worker (default 5)"
    )
    parser.add_argument("--slowdown", type=float, default=10.0, help="percent (default 10)")
    parser.add_argument(
        "--wait", action="store_true", help="the slow commit sleeps instead of spinning"
    )
    parser.add_argument(
        "--experiment",
        type=Path,
        help="bisect with this experiment file instead of the one-variant demo (e.g. "
        "experiments/ci.yaml, the shipped gate's)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bisect-demo")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    experiment = args.experiment.read_text() if args.experiment else EXPERIMENT
    with tempfile.TemporaryDirectory(prefix="fusebench-bisect-demo-") as folder:
        repo = Path(folder) / "repo"
        hashes = scratch_history(
            repo, args.commits, args.slow_at, args.slowdown, args.wait, experiment
        )
        start = time.monotonic()
        done = subprocess.run(
            [
                # the scratch repository's own fusebench: `bisect` reads the refs of its own tree
                *fusebench_of(repo),
                "bisect",
                hashes[0],
                hashes[-1],
                "demo.yaml",
                "--out",
                str(out),
                "--format",
                "json",
            ],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - start
    answer = (
        json.loads(done.stdout) if done.returncode in (0, 1, 3) else {"stderr": done.stderr[-2000:]}
    )
    summary = {
        "exit": done.returncode,
        "wall_s": round(seconds, 1),
        "slow_commit": hashes[args.slow_at],
        "named": answer.get("first_bad"),
        "right": answer.get("first_bad") == hashes[args.slow_at],
        "ab_runs": sum(s["runs"] for s in answer.get("steps", [])),
        "commits": hashes,
        "answer": answer,
    }
    (out / "demo.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("answer", "commits")}))
    for step in answer.get("steps", []):
        print(
            f"{step['asks']:10} {step['candidate'][:12]} vs {step['against'][:12]}: {step['row']} "
            f"{step['delta_pct']:+.1f}% [{step['low_pct']:+.1f}%, {step['high_pct']:+.1f}%] "
            f"{step['verdict']} after {step['runs']} run(s)"
        )


if __name__ == "__main__":
    main()
