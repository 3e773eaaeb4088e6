"""The A/B gate's false alarms and power on this machine, from real `run --against` runs.

Each run measures a *current* build against the reference build (this tree) with
`experiments/ci.yaml`, exactly as .ci/run does, then asks `fusebench check`. The current build is a
throwaway copy of this tree; for a slowdown of s%, the copy's worker spins s/(100 - s) of each
prefill and of each decode step after it happened, so its tok/s drop by s% (a patch to the copy's
bench/measure/worker.py, never a hook in the product). s = 0 is an A/A run of two identical builds:
any failure is a false alarm. The gate has three outcomes (check exits 0 passed, 1 failed, 3 cannot
tell); as in .ci/run, a first check that fails or cannot tell is followed by `check --confirm`, a
new A/B run of those cells whose verdict counts. Each run also checks the gate's word against its
intervals:
"passed" must mean every build row's interval lies inside the limit. Slowdowns are interleaved
across repetitions so machine drift lands on each alike, and every results file is kept. --budget-s
runs the experiment with a smaller budget, to see what the gate says when it cannot decide.

    python3 benchmarks/ab_gate_power.py --plan 0:20,10:10 --out results/gate-ab-3
    python3 benchmarks/ab_gate_power.py --plan 0:2,10:2 --budget-s 40 --out
    results/gate-ab-3/budget-40s
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from fusebench.measure.machine.env import child_command

ROOT = Path(__file__).resolve().parents[1]
PREFILL = (
    "    mx.eval(first)\n    prefilled = time.perf_counter()\n",
    "    mx.eval(first)\n    spin(SLOWDOWN * (time.perf_counter() - start))\n"
    "    prefilled = time.perf_counter()\n",
)
# Decode is pipelined: the next step is queued before the current token is read, so a spin after
# the read would overlap the queued step and cost nothing. The copy queues the next step only after
# its spin, while nothing runs; the next graph is still built while the current step computes, as
# in the product.
DECODE = """def decode(model, token, cache, steps, kept=None):
    ready, last = [], time.perf_counter()
    for i in range(steps):
        logits = model(token[:, None], cache=cache)[:, -1, :]
        if kept is not None:
            kept.append(logits)
        next_token = greedy(logits)
        mx.eval(token)
        if i:
            spin(SLOWDOWN * (time.perf_counter() - last))
            last = time.perf_counter()
        ready.append(last if i else time.perf_counter())  # ready[0]: the prefill's token (the \
TTFT reading)
        mx.async_eval(next_token)
        token = next_token
    if steps:
        mx.eval(token)
        spin(SLOWDOWN * (time.perf_counter() - last))
        ready.append(time.perf_counter())
    return ready


"""


# The slowdown spins rather than sleeps: a slower kernel spends CPU time, so both clocks see it (a
# sleep would show on the wall clock alone, and a run on the CPU clock would rightly call the clocks
# disagreeing).
SPIN = """def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


"""
# A slowdown that waits instead (a kernel that blocks, a host-side sleep): the wall clock sees it,
# a process's CPU clock would not.
WAIT = """def spin(seconds):
    time.sleep(seconds)


"""


def slowed_copy(dest: Path, slowdown_pct: float, wait: bool = False) -> Path:
    """This tree (bench/, models/, experiments/ and the pyproject.toml that maps them), with the
    worker's prefill and decode slowed so tok/s drops slowdown_pct%."""
    for part in ("bench", "models", "experiments"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    worker = dest / "bench" / "measure" / "worker.py"
    text = worker.read_text()
    assert PREFILL[0] in text and "def decode(" in text and "# Prompt streams:" in text, (
        "the worker changed; update the patch"
    )
    text = text.replace(*PREFILL, 1)
    text = text[: text.index("def decode(")] + DECODE + text[text.index("def time_trial(") :]
    spin_fraction = slowdown_pct / (100 - slowdown_pct)  # time x 1/(1 - s): throughput x (1 - s)
    anchor = "# Prompt streams:"
    slowdown = f"SLOWDOWN = {spin_fraction!r}\n{WAIT if wait else SPIN}{anchor}"
    worker.write_text(text.replace(anchor, slowdown, 1))
    return dest


def fusebench_of(tree: Path) -> list[str]:
    """The command that runs `fusebench` of the tree at `tree`, as its workers are started."""
    return child_command("fusebench", root=tree)


def gate_verdicts(results: Path, cwd: Path, *extra: str) -> tuple[int, list[dict]]:
    check = subprocess.run(
        [*fusebench_of(cwd), "check", str(results), "--format", "json", *extra],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    verdicts = json.loads(check.stdout)["verdicts"] if check.returncode in OUTCOMES else []
    return check.returncode, [v for v in verdicts if v["check"] == "build"]


OUTCOMES = {0: "passed", 1: "failed", 3: "cannot tell"}


def honest(exit_code: int, verdicts: list[dict]) -> bool:
    """The gate's word agrees with its intervals: passed only when every build row lies inside the
    limit."""
    inside = all(v["verdict"] == "within limit" for v in verdicts)
    return (exit_code == 0) == inside


def one_run(slowdown: float, out: Path, experiment: Path) -> dict:
    """One A/B run of a slowed copy against this tree, then the gate as .ci/run asks it: check, and
    when that fails, check --confirm (a second A/B run of the failing cell, which must fail
    again)."""
    with tempfile.TemporaryDirectory(prefix="fusebench-gate-") as folder:
        current = slowed_copy(Path(folder), slowdown)
        start = time.monotonic()
        run = subprocess.run(
            [
                *fusebench_of(current),
                "run",
                str(experiment),
                "--against",
                str(ROOT),
                "--out",
                str(out),
                "--quiet",
            ],
            cwd=current,
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - start
        first_exit, verdicts = gate_verdicts(out, current)
        gate_exit, confirmed = first_exit, verdicts
        if first_exit in (1, 3):
            gate_exit, confirmed = gate_verdicts(out, current, "--confirm")
    deltas = {f"{v['variant']} {v['metric']}": round(v["delta_pct"], 2) for v in verdicts}
    halves = {f"{v['variant']} {v['metric']}": _half_width(v) for v in verdicts}
    bounds = {
        f"{v['variant']} {v['metric']}": (v["ci_low_pct"], v["ci_high_pct"]) for v in verdicts
    }
    return {
        "slowdown_pct": slowdown,
        "file": out.name,
        "run_exit": run.returncode,
        "seconds": round(seconds, 1),
        "rounds": max((v["rounds"] or 0 for v in verdicts), default=0),
        "first_exit": first_exit,
        "gate_exit": gate_exit,
        "deltas": deltas,
        "half_widths": halves,
        "intervals": bounds,
        "honest": honest(first_exit, verdicts) and honest(gate_exit, confirmed),
        "failed": [f"{v['variant']} {v['metric']}" for v in verdicts if v["failed"]],
    }


def _half_width(v: dict) -> float | None:
    if v["ci_high_pct"] is None or v["ci_low_pct"] is None:
        return None
    return round((v["ci_high_pct"] - v["ci_low_pct"]) / 2, 2)


def schedule(plan: str) -> list[tuple[float, int]]:
    """ "0:20,10:10" -> (slowdown, repetition) in round-robin order, so machine drift lands on every
    level alike."""
    counts = {float(level): int(n) for level, n in (item.split(":") for item in plan.split(","))}
    return [
        (level, i + 1) for i in range(max(counts.values())) for level, n in counts.items() if i < n
    ]


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for level in sorted({r["slowdown_pct"] for r in rows}):
        ran = [r for r in rows if r["slowdown_pct"] == level]
        mine = [r for r in ran if r["run_exit"] == 0]
        if not mine:
            lines.append(f"slowdown {level:g}%: {len(ran)} runs, none ran to the end")
            continue

        def counts(key: str, runs: list[dict] = mine) -> str:
            words = {**OUTCOMES, 2: "could not compare (exit 2)"}
            return ", ".join(
                f"{word} {sum(r[key] == code for r in runs)}" for code, word in words.items()
            )

        measured = {
            m: statistics.median(r["deltas"].get(f"all variants {m}", math.nan) for r in mine)
            for m in ("prefill", "gen")
        }
        lines.append(
            f"slowdown {level:g}%: {len(mine)} runs; gate (with --confirm): "
            f"{counts('gate_exit')}; first check alone: {counts('first_exit')}; word agrees with "
            f"intervals in {sum(r.get('honest', True) for r in mine)}/{len(mine)}; "
            f"measured Δ (median, all variants) prefill {measured['prefill']:+.1f}% gen "
            f"{measured['gen']:+.1f}%; "
            f"median run {statistics.median(r['seconds'] for r in mine):.0f} s, "
            f"{statistics.median(r.get('rounds', 0) for r in mine):.0f} rounds"
            + (f"; {len(ran) - len(mine)} runs failed" if len(mine) < len(ran) else "")
        )
        built_in_pct = 0.0 - level  # a slowdown of s% is a Δ of -s% (0.0 - 0.0 is not -0.0)
        if built_in := truth_held(mine, built_in_pct):
            lines.append(f"  built-in Δ ({built_in_pct:g}%) inside a row's interval: {built_in}")
        if held := rerun_held(mine):
            lines.append(
                "  another run's Δ inside this run's interval "
                f"(Holm-adjusted, each build its own process): {held}"
            )
    return lines


def truth_held(runs: list[dict], built_in_pct: float) -> str:
    """How often a row's printed interval holds the Δ the copy was built with: the coverage that
    another run's Δ (rerun_held) cannot show, as that Δ carries its own run's noise."""
    bounds = [b for r in runs for b in r.get("intervals", {}).values() if b[0] is not None]
    held = sum(low <= built_in_pct <= (math.inf if high is None else high) for low, high in bounds)
    return f"{held}/{len(bounds)} ({held / len(bounds):.1%})" if bounds else ""


def rerun_held(runs: list[dict]) -> str:
    """How often one run's printed interval holds another run's Δ, over every ordered pair of runs
    and row: a verdict that survives a rerun needs an interval that holds the spread between
    processes too."""
    held = total = 0
    for i, mine in enumerate(runs):
        for j, other in enumerate(runs):
            if i == j:
                continue
            for row, (low, high) in mine.get("intervals", {}).items():
                if row in other["deltas"] and low is not None:
                    total += 1
                    held += low <= other["deltas"][row] <= (math.inf if high is None else high)
    return f"{held}/{total} ({held / total:.1%})" if total else ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--plan",
        default="0:20,10:10,5:4,20:4",
        help="slowdown%%:runs, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--experiment", type=Path, default=ROOT / "experiments" / "ci.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gate-ab")
    parser.add_argument(
        "--summary", action="store_true", help="only summarize the runs already in OUT/runs.jsonl"
    )
    parser.add_argument(
        "--budget-s", type=float, help="run the experiment with this budget_s instead of its own"
    )
    args = parser.parse_args()
    # the runs' working folder is a throwaway copy: a relative path would land there
    args.out, args.experiment = args.out.resolve(), args.experiment.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.budget_s:
        text = args.experiment.read_text()
        budget = next(line for line in text.splitlines() if line.startswith("budget_s:"))
        args.experiment = args.out / args.experiment.name
        args.experiment.write_text(text.replace(budget, f"budget_s: {args.budget_s:g}"))
    log = args.out / "runs.jsonl"
    if not args.summary:
        for slowdown, i in schedule(args.plan):
            row = one_run(slowdown, args.out / f"s{slowdown:g}-{i:02d}.jsonl", args.experiment)
            print(json.dumps(row), flush=True)
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    for line in summary(rows):
        print(line)


if __name__ == "__main__":
    main()
