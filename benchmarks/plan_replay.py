"""trials: plan replayed on real rounds: the time the main job says before its first round, the
time it takes and the rows it decides within its cap (budget_s), beside the rows a plan spending
the whole cap decides, and the A/A tables with a false claim, on every committed machine profile.

Each profile is a results file of the default experiment (four sizes, two comparisons, prefill and
gen: 16 rows) from one machine and configuration. Its rounds are replayed through the product's own
code: the planner (analysis.planner.plan_rounds, made again at each size's start with the time
left, as measure.run.planning does), the paired estimate with the fixed-n t interval
(analysis.inference.paired_estimate, fixed_rounds=True), Holm across the whole table (16 rows), and
the verdict at the experiment's ±5% margin.

One replay:
- the spreads the planner sees are those the plan cache holds: each row's SD over 8 rounds of a
  size drawn from the profile, pooled over --runs such earlier runs as the product pools them
  (measure.run.planning.pool_spreads: the root mean square, at most five runs);
- each size's round costs the profile's (the median of its rounds' durations), its setup the new
  fixed costs: a load (the seconds given by --loads, measured on this machine) and one warm-up
  round (two in duets), which carries the correctness check, and what follows its rounds: op
  shares at --after rounds' time (0, the default: a warm run writes the op shares an earlier run
  of the same commit timed) and stopping its workers (--stop seconds); PROBES_S for the
  environment probes and the rest;
- each row's log ratio round by round drawn as its mean + its SD x a residual: the tails come from
  the identical-build gate campaigns (results/gate-ab*/s0-*.jsonl at commit 6efa661, kept as
  results/plan-zen4/gate-tails.json.gz; runs of 40-60 rounds, each
  row's rounds centred and scaled by its own SD, pooled over machines; TAILS below says how heavy
  they are), the spread and the mean from the profile. A profile's own 6-30 rounds a size cannot
  carry its tails: standardised by their own SD, 6 rounds can lie no further than 2.04 SDs out,
  lighter than normal noise, and drawn alone they repeat each other and fool the outlier rule.
A/A: the same with every row's mean 0 (the arms identical, the noise the profile's, heavy tails
and all): a table with any "faster" or "slower" is a false claim.

    .venv/bin/python benchmarks/plan_replay.py                   (400 replays a profile)
    .venv/bin/python benchmarks/plan_replay.py --replays 50      (a quick look)
    .venv/bin/python benchmarks/plan_replay.py --profile "LABEL=RUN,31B:OTHER"
        (one run's rounds, its 31B's from another run: results/budget-11m-zen4)
    .venv/bin/python benchmarks/plan_replay.py --cap 330   (the cap issue 53 planned in)
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.inference import VerdictWord, adjust, paired_estimate, verdict  # noqa: E402
from fusebench.analysis.planner import CellCost, plan_rounds  # noqa: E402
from fusebench.analysis.stopping import Goal  # noqa: E402

SIZES = ("E2B", "E4B", "26B", "31B")
PAIRS = (("baseline", "compiled"), ("baseline", "sdpa"))
METRICS = ("prefill", "gen")
MARGIN_PCT = 5.0
CAP_S = 600.0  # the main job's budget_s: a cap, the plan taking what the table needs
ROWS = 16  # the table: 4 sizes x 2 metrics x 2 comparisons, one Holm family
MAX_ROUNDS = 60
MIN_ROUNDS = 3  # a size's rounds below which its spread is the profile's typical one
# The gate campaigns' residuals, extracted once (--tails-from) from the tree that held them.
TAILS = ROOT / "results" / "plan-zen4" / "gate-tails.json.gz"
TAILS_COMMIT = "6efa661"
PROBES_S = 3.0  # the environment probes, the header and the summary (a run's "probes" + "other")
# The profiles: results files of the default experiment, and the machine each ran on.
PROFILES = {
    "AVX-512 EPYC, sequential (the quiet one)": "results/default-20261201-0003.jsonl.gz",
    "AVX2 EPYC, sequential": "results/default-20261201-1004.jsonl.gz",
    "slow AVX2 VM, sequential": "../shared/data/slow-vm/default.jsonl",
    "AVX-512 EPYC, duets": "results/default-duet-20261202.jsonl.gz",
    "Zen 3 EPYC, duets": "results/default-budget-zen3/default-budget.jsonl.gz",
    "Zen 4 EPYC, 1 thread": "results/default-20261204-015235.jsonl.gz",
    "Zen 4 EPYC, 2 threads": "results/default-zen4-20261203-234148.jsonl.gz",
    "Intel Xeon (AVX-512), 1 thread": "results/newcomer-xeon/caches-warm-2.jsonl.gz",
}


@dataclass
class Size:
    """One size of a profile: its rounds (each row's baseline and new tok/s) and its pace."""

    rounds: list[dict[str, tuple[float, float]]]
    round_s: float
    duet: bool


def read_profile(path: Path) -> dict[str, Size]:
    """Each size's complete rounds (every row paired) from the file's first run."""
    records = read_records(path)
    header = next(r for r in records if r["kind"] == "run")
    duet = (header.get("schedule_choice") or {}).get("schedule") == "duet"
    trials = [
        r
        for r in records
        if r["kind"] == "trial"
        and not r["warmup"]
        and r.get("build", "current") in ("current", None)
        and r["run_id"] == header["run_id"]
    ]
    by = defaultdict(dict)  # (size, round) -> variant -> trial
    for t in trials:
        by[(t["size"].split(" (")[0], t["round"])][t["variant"]] = t
    sizes: dict[str, Size] = {}
    for name in SIZES:
        rounds, spans = [], []
        for (size, _), variants in sorted(by.items(), key=lambda item: item[0][1]):
            if size != name:
                continue
            row = {}
            for base, new in PAIRS:
                if base in variants and new in variants:
                    for metric in METRICS:
                        b, n = variants[base][f"{metric}_tps"], variants[new][f"{metric}_tps"]
                        if b and n:
                            row[f"{new} {metric}"] = (b, n)
            if len(row) == len(PAIRS) * len(METRICS):
                rounds.append(row)
                spans.append(sum(v["prefill_s"] + (v["gen_s"] or 0.0) for v in variants.values()))
        if duet:
            # a duet round holds every comparison's two trials at once; the by-round map above
            # numbers a duet's trials by comparison, so pair them per cycle instead
            rounds, spans = _duet_rounds(trials, name)
        if rounds:
            sizes[name] = Size(rounds, statistics.median(spans), duet)
    return sizes


def _duet_rounds(trials: list[dict], name: str) -> tuple[list[dict], list[float]]:
    """A duet run's rounds: round r holds comparison r % 2's pair; cycle r // 2 pairs both."""
    by = defaultdict(dict)
    for t in trials:
        if t["size"].split(" (")[0] == name:
            by[t["round"]][t["variant"]] = t
    rounds, spans = [], []
    cycles = defaultdict(dict)
    for r, variants in by.items():
        cycles[r // len(PAIRS)][r % len(PAIRS)] = variants
    for cycle in sorted(cycles):
        slots = cycles[cycle]
        row, span = {}, 0.0
        for slot, (base, new) in enumerate(PAIRS):
            variants = slots.get(slot, {})
            if base in variants and new in variants:
                for metric in METRICS:
                    b, n = variants[base][f"{metric}_tps"], variants[new][f"{metric}_tps"]
                    if b and n:
                        row[f"{new} {metric}"] = (b, n)
                span += max(v["prefill_s"] + (v["gen_s"] or 0.0) for v in variants.values())
        if len(row) == len(PAIRS) * len(METRICS):
            rounds.append(row)
            spans.append(span)
    return rounds, spans


def row_logs(rounds: list[dict[str, tuple[float, float]]]) -> dict[str, np.ndarray]:
    return {
        label: np.array([math.log(r[label][1] / r[label][0]) for r in rounds])
        for label in sorted(rounds[0])
    }


def row_sds(rounds: list[dict[str, tuple[float, float]]]) -> tuple[float, ...]:
    return tuple(float(np.std(x, ddof=1)) for x in row_logs(rounds).values())


@dataclass
class Noise:
    """A profile's rows (each size's means and SDs) and its pooled standardised residuals."""

    means: dict[str, np.ndarray]  # size -> each row's mean log ratio
    sds: dict[str, np.ndarray]
    residuals: np.ndarray

    @classmethod
    def of(cls, sizes: dict[str, Size], tails: np.ndarray) -> Noise:
        """A size of fewer than MIN_ROUNDS rounds (the Zen 3's 31B ran 1) has no spread of its
        own: its rows get the profile's median row SD and mean 0."""
        means, sds = {}, {}
        for name, size in sizes.items():
            if len(size.rounds) < MIN_ROUNDS:
                continue
            logs = row_logs(size.rounds)
            means[name] = np.array([x.mean() for x in logs.values()])
            sds[name] = np.array([x.std(ddof=1) for x in logs.values()])
        typical = float(np.median(np.concatenate(list(sds.values()))))
        for name, size in sizes.items():
            rows = len(size.rounds[0])
            means.setdefault(name, np.zeros(rows))
            sds.setdefault(name, np.full(rows, typical))
        return cls(means, sds, tails)

    def draw(self, rng: np.random.Generator, size: str, n: int, aa: bool) -> np.ndarray:
        """n rounds of the size's rows (n x rows log ratios)."""
        z = rng.choice(self.residuals, size=(n, len(self.sds[size])))
        return (0.0 if aa else self.means[size]) + self.sds[size] * z


def read_records(path: Path) -> list[dict]:
    """A results file's records, plain or gzip-compressed."""
    data = path.read_bytes()
    text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def gate_tails(campaigns: list[Path]) -> np.ndarray:
    """Standardised residuals of the identical-build gate runs: per run, variant and metric, the
    current/reference log ratios of its rounds, centred and scaled by their SD (runs of at least
    30 rounds)."""
    found = []
    for path in campaigns:
        by = defaultdict(dict)
        for r in read_records(path):
            if r.get("kind") == "trial" and not r["warmup"]:
                for metric in METRICS:
                    if r.get(f"{metric}_tps"):
                        by[(r["run_id"], r["variant"], metric, r["round"])][r["build"]] = r[
                            f"{metric}_tps"
                        ]
        rows = defaultdict(list)
        for (run, variant, metric, _), builds in by.items():
            if len(builds) == 2:
                rows[(run, variant, metric)].append(
                    math.log(builds["current"] / builds["reference"])
                )
        for x in map(np.asarray, rows.values()):
            if len(x) >= 30 and x.std(ddof=1) > 0:
                found.extend((x - x.mean()) / x.std(ddof=1))
    return np.asarray(found)


def stored_tails(tree: Path | None) -> np.ndarray:
    """The residuals, from TAILS (what the campaigns gave, kept when their raw files left the
    tree), or extracted again from a tree that holds the campaigns (a checkout of the commit
    TAILS names) and written to TAILS."""
    if tree is None:
        return np.asarray(json.loads(gzip.decompress(TAILS.read_bytes()))["residuals"])
    campaigns = sorted(tree.glob("results/gate-ab*/s0-*.jsonl*"))
    tails = gate_tails(campaigns)
    stored = {
        "from": [str(path.relative_to(tree)) for path in campaigns],
        "residuals": [round(float(z), 6) for z in tails],
    }
    TAILS.write_bytes(gzip.compress(json.dumps(stored).encode(), mtime=0))
    return tails


def worst_tenth_share(z: np.ndarray) -> float:
    """The share of the variance the worst 10% of rounds carry (44% for normal noise)."""
    squares = np.sort(z**2)[::-1]
    return float(squares[: len(squares) // 10].sum() / squares.sum())


def plan_run(
    sizes: dict[str, Size],
    sds: dict[str, tuple[float, ...]],
    loads: dict[str, float],
    after: tuple[float, float],
    cap_s: float,
    until_decided: bool,
) -> tuple[dict[str, int], float, float]:
    """Each size's rounds as a run plans them: made again at each size's start, with its setup
    paid and the time left; with the time the first plan said (before the first round) and the
    time the run took, both from its start. `until_decided`: the product's plan (rounds stop once
    the rows are expected decided, the budget a cap); else every second of `cap_s` is spent."""
    goal = Goal(MARGIN_PCT)
    plan = partial(
        plan_rounds, rows=ROWS, goal=goal, max_rounds=MAX_ROUNDS, until_decided=until_decided
    )
    left = cap_s - PROBES_S
    fixed: dict[str, int] = {}
    said = None
    names = [name for name in SIZES if name in sizes]
    for i, name in enumerate(names):

        def cost(other: str, paid: bool) -> CellCost:
            size = sizes[other]
            warmups = 2 if size.duet else 1
            setup = 0.0 if paid else loads[other] + warmups * size.round_s
            after_s = after[0] * size.round_s + after[1]
            return CellCost(other, other, setup, size.round_s, after_s, sds[other])

        # before loading this size: does the plan of what is left give it rounds?
        ahead = plan([cost(n, False) for n in names[i:]], left)
        if said is None:
            said = PROBES_S + ahead.seconds
        if not ahead.rounds(name):
            fixed[name] = 0
            continue
        left -= loads[name] + (2 if sizes[name].duet else 1) * sizes[name].round_s
        mine = plan([cost(name, True), *(cost(n, False) for n in names[i + 1 :])], left)
        fixed[name] = mine.rounds(name)
        left -= cost(name, True).cost_s(fixed[name])
    return fixed, said or PROBES_S, cap_s - left


def judge(drawn: dict[str, np.ndarray], labels: list[str]) -> tuple[int, list[bool]]:
    """Rows decided (of 16) and whether any row of the table (one Holm family: both comparisons,
    every size and metric, as the run's first screen) claims faster or slower."""
    estimates = []
    for _, new in PAIRS:
        for name in SIZES:
            logs = drawn.get(name)
            if logs is None or len(logs) < 2:
                continue
            for metric in METRICS:
                column = logs[:, labels.index(f"{new} {metric}")]
                estimates.append(
                    paired_estimate(np.ones_like(column), np.exp(column), fixed_rounds=True)
                )
    words = [verdict(a, margin_pct=MARGIN_PCT).word for a in adjust(estimates)]
    decided = sum(
        w in (VerdictWord.FASTER, VerdictWord.SLOWER, VerdictWord.NO_CHANGE) for w in words
    )
    return decided, [any(w in (VerdictWord.FASTER, VerdictWord.SLOWER) for w in words)]


def replay(
    sizes: dict[str, Size],
    tails: np.ndarray,
    loads: dict[str, float],
    after: tuple[float, float],
    replays: int,
    seed: int,
    runs: int = 1,
    cap_s: float = CAP_S,
) -> dict[str, float]:
    """`replays` runs of the product's plan (rounds until the rows are expected decided, within
    `cap_s`): the rows decided, the time said and taken; beside each, the same run spending the
    whole cap; and the A/A tables with a false claim."""
    rng = np.random.default_rng(seed)
    noise = Noise.of(sizes, tails)
    labels = sorted(next(iter(sizes.values())).rounds[0])
    decided, spending, said, taken, false_claims, tables = [], [], [], [], 0, 0
    rounds_given = defaultdict(list)
    for _ in range(replays):
        # the spreads earlier runs of 8 rounds a size would have cached, pooled
        earlier = {}
        for name in sizes:
            variances = [
                noise.draw(rng, name, 8, aa=False).var(axis=0, ddof=1) for _ in range(runs)
            ]
            earlier[name] = tuple(np.sqrt(np.mean(variances, axis=0)))
        plan, says, takes = plan_run(sizes, earlier, loads, after, cap_s, until_decided=True)
        said.append(says)
        taken.append(takes)
        for name, n in plan.items():
            rounds_given[name].append(n)
        for aa in (False, True):
            drawn = {name: noise.draw(rng, name, n, aa) for name, n in plan.items() if n}
            count, claims = judge(drawn, labels)
            if aa:
                false_claims += sum(claims)
                tables += len(claims)
            else:
                decided.append(count)
        whole, _, _ = plan_run(sizes, earlier, loads, after, cap_s, until_decided=False)
        drawn = {name: noise.draw(rng, name, n, False) for name, n in whole.items() if n}
        spending.append(judge(drawn, labels)[0])
    return {
        "decided": float(np.mean(decided)),
        "all": float(np.mean(np.array(decided) == ROWS)),
        "said": float(np.median(said)),
        "taken": float(np.median(taken)),
        "spending": float(np.mean(spending)),
        "false_claims": false_claims / tables,
        **{f"rounds {n}": float(np.median(v)) for n, v in rounds_given.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replays", type=int, default=400)
    parser.add_argument(
        "--loads",
        default="E2B=5.5,E4B=7.3,26B=18.8,31B=7.7",
        help="each size's load seconds (default: the Zen 4's, 2026-12-04)",
    )
    parser.add_argument(
        "--after",
        type=float,
        default=0.0,
        help="op shares after a size's rounds, in rounds (default 0: cached by an earlier run)",
    )
    parser.add_argument(
        "--stop",
        type=float,
        default=0.5,
        help="seconds to stop a size's workers (default: the Zen 4's, 1.3-1.6 s for three sizes)",
    )
    parser.add_argument(
        "--runs", type=int, default=5, help="earlier runs the cached spreads pool (default 5)"
    )
    parser.add_argument(
        "--cap", type=float, default=CAP_S, help=f"budget_s, the cap (default {CAP_S:g} s)"
    )
    parser.add_argument(
        "--profile",
        action="append",
        metavar="LABEL=FILE[,SIZE:FILE]",
        help="replay this results file of the default experiment instead of the committed "
        "profiles (repeatable): what a run would decide at the spreads and pace it measured; "
        "SIZE:FILE takes that size's rounds from another file (another configuration of that "
        "size)",
    )
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    parser.add_argument(
        "--tails-from",
        type=Path,
        metavar="TREE",
        help=f"extract the tails again from the gate campaigns of a checkout (of {TAILS_COMMIT}: "
        f"`git worktree add /tmp/t {TAILS_COMMIT}`) into {TAILS.relative_to(ROOT)}",
    )
    args = parser.parse_args()
    loads = {k: float(v) for k, v in (item.split("=") for item in args.loads.split(","))}
    tails = stored_tails(args.tails_from)
    profiles = dict(item.split("=", 1) for item in args.profile) if args.profile else PROFILES
    lines = [
        f"trials: plan replayed, {args.replays} replays a profile, budget_s {args.cap:g} s (a "
        f"cap), loads {args.loads} s, op shares {args.after:g} rounds, stopping {args.stop:g} s "
        f"a size, spreads pooled over {args.runs} earlier run(s); tails: {len(tails)} residuals "
        f"of the gate campaigns, the worst 10% of them {100 * worst_tenth_share(tails):.0f}% of "
        "the variance (normal noise: 44%)",
        "",
        "| profile | a size's round (median row SD, rounds in the file) | rounds planned (median) "
        "| time said before the first round (median) | time taken (median) | rows decided of "
        "16 (mean) | runs deciding 16 | rows decided spending the whole cap (mean) | A/A tables "
        "with a false claim (one of 16 rows a replay) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for seed, (label, spec) in enumerate(profiles.items()):
        file, *swaps = spec.split(",")
        paths = [(ROOT / f).resolve() for f in [file, *(s.split(":", 1)[1] for s in swaps)]]
        if not all(path.exists() for path in paths):
            lines.append(f"| {label} | ({spec} not here) | | | | | | | |")
            continue
        sizes = read_profile(paths[0])
        for swap, path in zip(swaps, paths[1:], strict=True):
            # a size from another file: its pace and spread in another configuration
            name = swap.split(":", 1)[0]
            sizes[name] = read_profile(path)[name]
        found = replay(
            sizes, tails, loads, (args.after, args.stop), args.replays, seed, args.runs, args.cap
        )
        noise = Noise.of(sizes, tails)
        paces = ", ".join(
            f"{n} {s.round_s:.1f} s ({100 * float(np.median(noise.sds[n])):.1f}%, "
            f"{len(s.rounds)} rounds)"
            for n, s in sizes.items()
        )
        given = ", ".join(f"{n} {found[f'rounds {n}']:.0f}" for n in sizes)
        lines.append(
            f"| {label} | {paces} | {given} | {found['said']:.0f} s | {found['taken']:.0f} s | "
            f"{found['decided']:.1f} | {100 * found['all']:.0f}% | {found['spending']:.1f} | "
            f"{100 * found['false_claims']:.1f}% |"
        )
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
