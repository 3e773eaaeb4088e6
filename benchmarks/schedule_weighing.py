"""`schedule: auto`'s weighing (analysis.schedule_gain, issue 76) replayed on committed A/A rounds
run in each schedule on one machine in one hour (results/duet-aa*: `run ci --against HEAD`, 20
fixed rounds a run, two runs a schedule, the schedules alternating).

Each replay draws rounds with replacement from each schedule's pool (a round keeps every row's log
ratio and its seconds, stalls and all) in the weighing's own order (ABBA turns), stopping as the
product stops (a bound past 1, or the dropped schedule's cap): what it keeps, how many rounds it
took, what the dropped schedule cost. The pool's gain from all its rounds is the yardstick.
`--mirror` swaps the pools: a machine where the duet loses by the factor it won by (what the
weighing costs where the duet does not pay).

Then the interval after a weighing: the kept schedule's rounds go on to `--rounds` in all, drawn
the same way, and each row's 95% fixed-n t interval is checked against the pool's mean (the truth
of every draw): with the weighing's kept rounds counted ("reused") and with them dropped, the
`--rounds` drawn afresh after the choice ("fresh"). The choice reads the rows' spread, so reused
rounds could under-cover; this measures by how much.

    python benchmarks/schedule_weighing.py results/duet-aa* --out results/schedule-weighing
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import own_tree  # noqa: F401  (the tree this script stands in)
from scipy import stats

from fusebench.analysis.inference import paired_estimate
from fusebench.analysis.schedule_gain import DUET, SEQUENTIAL, ScheduleRounds, Weighing

METRICS = ("prefill_tps", "gen_tps")


def pool(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """Every round of the files: each row's log ratio (rows: variant x metric, current/reference
    across builds; within one build each other variant over `baseline`), each file's mean
    removed, and the round's seconds (its first trial's start to its last trial's end)."""
    logs, seconds = [], []
    for path in files:
        first = len(logs)
        trials = defaultdict(dict)
        with gzip.open(path, "rt") as lines:
            for line in lines:
                record = json.loads(line)
                if record.get("kind") == "trial" and not record["warmup"]:
                    trials[record["round"]][(record["build"], record["variant"])] = record
        for by_arm in trials.values():
            logs.append(_round_logs(by_arm))
            seconds.append(
                max(t["ended_unix_s"] for t in by_arm.values())
                - min(t["started_unix_s"] for t in by_arm.values())
            )
        # each run's own mean removed: a run's offset is not its rounds' scatter
        mine = np.array(logs[first:])
        logs[first:] = list(mine - mine.mean(axis=0))
    return np.array(logs), np.array(seconds)


def _round_logs(by_arm: dict) -> list[float]:
    variants = sorted({variant for _, variant in by_arm})
    if any(build == "reference" for build, _ in by_arm):
        pairs = [(("reference", v), ("current", v)) for v in variants]
    else:
        pairs = [(("current", "baseline"), ("current", v)) for v in variants if v != "baseline"]
    return [np.log(by_arm[new][m] / by_arm[base][m]) for base, new in pairs for m in METRICS]


def draw(rng: np.random.Generator, pools: dict, name: str) -> tuple[tuple[float, ...], float]:
    logs, seconds = pools[name]
    i = rng.integers(len(seconds))
    return tuple(logs[i]), float(seconds[i])


def weigh_once(rng: np.random.Generator, pools: dict, cap_s: float, prior: str) -> Weighing:
    """One weighing as the product runs it (CellRun._weigh_schedules), on drawn rounds."""
    sides = {name: ScheduleRounds(name, (), ()) for name in (SEQUENTIAL, DUET)}
    weighing = Weighing(sides[SEQUENTIAL], sides[DUET], prior)
    while weighing.go_on(cap_s) and weighing.of(weighing.next_schedule()).rounds < 60:
        name = weighing.next_schedule()
        logs, seconds = draw(rng, pools, name)
        side = sides[name]
        sides[name] = ScheduleRounds(name, (*side.logs, logs), (*side.seconds, seconds))
        weighing = Weighing(sides[SEQUENTIAL], sides[DUET], prior)
    return weighing


def covered(logs: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Whether each row's 95% interval on `logs` (rounds x rows) holds its truth: the plain t,
    and the product's fixed-n interval (paired_estimate: its outlier and stall rules), per row."""
    n = len(logs)
    half = stats.t.ppf(0.975, n - 1) * logs.std(axis=0, ddof=1) / np.sqrt(n)
    plain = np.abs(logs.mean(axis=0) - truth) <= half
    product = []
    for row, true in zip(logs.T, truth, strict=True):
        low, high = paired_estimate(np.ones(n), np.exp(row), fixed_rounds=True).interval(0.95)
        product.append(low <= np.exp(true) <= high)
    return np.concatenate([plain, product])


def _by_interval(rows: np.ndarray) -> dict[str, np.ndarray]:
    """The replays' coverage flags split by interval: the plain t's, then the product's."""
    half = rows.shape[1] // 2
    return {"t": rows[:, :half], "product": rows[:, half:]}


def replay(name: str, pools: dict, args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(0)
    whole = Weighing(
        *(
            ScheduleRounds(s, tuple(map(tuple, pools[s][0])), tuple(pools[s][1]))
            for s in (SEQUENTIAL, DUET)
        )
    )
    kept, rounds, dropped, spent, sure = [], [], [], [], []
    cover = {"reused": [], "fresh": []}
    for _ in range(args.replays):
        weighing = weigh_once(rng, pools, args.cap_share * args.budget, args.prior)
        choice = weighing.chosen
        other = DUET if choice == SEQUENTIAL else SEQUENTIAL
        kept.append(choice)
        gain = weighing.gain
        sure.append(gain.surely if gain else None)
        rounds.append(weighing.sequential.rounds + weighing.duet.rounds)
        dropped.append(sum(weighing.of(other).seconds))
        spent.append(sum(weighing.sequential.seconds) + sum(weighing.duet.seconds))
        truth = pools[choice][0].mean(axis=0)
        mine = list(weighing.of(choice).logs)
        more = [draw(rng, pools, choice)[0] for _ in range(max(0, args.rounds - len(mine)))]
        cover["reused"].append(
            covered(np.array((mine + more)[: max(args.rounds, len(mine))]), truth)
        )
        fresh = [draw(rng, pools, choice)[0] for _ in range(args.rounds)]
        cover["fresh"].append(covered(np.array(fresh), truth))
    return {
        "pool": name,
        "rounds_each": {s: len(pools[s][1]) for s in (SEQUENTIAL, DUET)},
        "sd_pct": {s: round(100 * whole.of(s).sd, 2) for s in (SEQUENTIAL, DUET)},
        "round_s": {s: round(whole.of(s).round_s, 2) for s in (SEQUENTIAL, DUET)},
        "whole_gain": str(whole.gain),
        "kept_duet_pct": round(100 * kept.count(DUET) / len(kept), 1),
        "sure_duet_pct": round(100 * sure.count(DUET) / len(sure), 1),
        "sure_sequential_pct": round(100 * sure.count(SEQUENTIAL) / len(sure), 1),
        "weighing_rounds_median": float(np.median(rounds)),
        "weighing_s_median": round(float(np.median(spent)), 1),
        "dropped_s_median": round(float(np.median(dropped)), 1),
        "dropped_s_max": round(float(np.max(dropped)), 1),
        **{
            f"coverage_{kind}_{how}_pct": round(100 * float(np.mean(part)), 1)
            for how, rows in cover.items()
            for kind, part in _by_interval(np.array(rows)).items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--budget", type=float, default=600.0, help="the run's budget_s")
    parser.add_argument("--cap-share", type=float, default=0.10)
    parser.add_argument("--prior", default=SEQUENTIAL, choices=(SEQUENTIAL, DUET))
    parser.add_argument("--replays", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=20, help="the kept schedule's rounds in all")
    parser.add_argument(
        "--mirror",
        action="store_true",
        help="swap the pools: a machine where the duet loses by the factor it won by here",
    )
    parser.add_argument(
        "--prefix", default="", help="the files: PREFIX{sequential,duet}-*.jsonl.gz"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found = []
    for folder in args.folders:
        pools = {
            s: pool(sorted(folder.glob(f"{args.prefix}{s}-*.jsonl.gz"))) for s in (SEQUENTIAL, DUET)
        }
        if args.mirror:
            pools = {SEQUENTIAL: pools[DUET], DUET: pools[SEQUENTIAL]}
        result = replay(folder.name, pools, args)
        found.append(result)
        print(json.dumps(result))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        mirrored = "-mirrored" if args.mirror else ""
        tag = f"{args.prefix}{args.prior}-b{args.budget:g}{mirrored}"
        (args.out / f"replay-{tag}.json").write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
