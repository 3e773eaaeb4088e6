"""Which degrees of freedom a cell's interval needs when its rounds come from several worker pairs,
replayed on the gate's own A/A rounds (issue 75, item 3: the pair as the unit, as Kalibera & Jones
decompose it).

`run --against` starts a fresh pair of workers (one a build) every worker_rounds rounds (6), and
each pair carries an offset of its own that all its rounds share: in the Xeon VM's identical
builds (gate-ab-29..33) the pairs' mean log ratios scatter with an SD of 2.2-2.4%, where 6 rounds
that scatter as a pair's do (2.0-2.4%) would give 0.8-1.0% (the summary's pools). The interval's
per-round scale is then raised to sqrt(MSB), MSB the between-pair mean square (analysis.inference,
"Between processes" in docs/statistics.md). MSB has B − 1 degrees of freedom (B pairs), not the
rounds' n − 1: Kalibera & Jones (ISMM 2013) take the degrees of freedom from the top level of
replication. This counts how often the 95% fixed-n interval (trials: budget, the gate's design)
covers the truth under:

- (a) the rule before issue 75: scale sqrt(max(SD², MSB)), t with n − 1 df;
- (b) the same scale, t with B − 1 df whenever MSB > SD² (the pairs set the scale), else n − 1;
- (c) the B pair means as the sample: their SD / sqrt(B), t with B − 1 df, always;
- product: fusebench's own paired_estimate(processes=..., fixed_rounds=True) on the same rounds
  (outlier and stall rules included), whatever rule the tree it stands in has;
- CS: the confidence sequence the product gives rounds not fixed in advance (trials: auto) at the
  same scale and n rounds, at the last round alone ("CS, last round") and at every round from
  MIN_AUTO_ROUNDS on, as CellStop looks ("every look": a miss if any look excludes the truth);
  beside it two remedies, looks only from the third pair's first round on, with the same sequence
  or with the sequence over the pair means (n = B, their SD) whenever MSB > SD².

Replay. Every results/gate-ab-*/s0-*.jsonl.gz (identical builds) and, centred the same way,
results/build-offset-xeon/*.jsonl.gz (two commits whose 2% offset is the builds' placement). Each
row (variant x metric, on the run's clock) gives its pairs' per-round log ratios current/reference;
only pairs with all worker_rounds rounds are kept. Centring, per file and row: each pair's rounds
are shifted by a constant so that its mean becomes c·(m_j − m̄), m_j its mean, m̄ the mean of the
file's P pair means and c = sqrt(P / (P − 1)) (Davison & Hinkley's inflated residuals: the P
centred means would otherwise scatter (P − 1)/P as much as the pairs do). The rounds inside a pair
keep their real scatter, and the pool's pair means average exactly 0, the truth of every synthetic
run. Pools are a machine and configuration (the header's env.cpu, schedule, clock, BLAS threads);
a synthetic run draws B pairs with replacement from its pool for one row and keeps their rounds
(B·6 rounds). `--centre pool` instead subtracts only the pool's mean (A/A files), leaving each
file's own offset in the pairs' scatter: the harsher case.

Synthetic. t(3) rounds scaled to SD σ = 1.3% plus a normal pair offset of SD τ = 0, 0.5, 1, 2 σ.

The fixed-n rules are counted at 95% and at 1 − 0.05/8, the level Holm gives the first of the
gate's eight rows. Last, the real gate runs as they are (every gate-ab s0 and s10 file, uncentred):
the gate's word on each (`fusebench check`'s build rows, analysis.stats.compare_builds) with the
tree's rule and with rule (a) patched into analysis.inference.

Writes summary.md (the tables) and coverage.csv (every source x row x B x rule) under --out; about
30 s on the 2-core VM.

    .venv/bin/python benchmarks/pair_unit_coverage.py [--runs 4000] [--product 400]
        [--synthetic 20000] [--seed 0] [--centre file|pool] [--out results/pair-unit]
        [--pair-rounds 6] [--pairs 4,6,8]
"""

from __future__ import annotations

import argparse
import csv
import math
import platform
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

import numpy as np
from scipy import special

from fusebench.analysis import inference, sequential, stats
from fusebench.analysis.inference import paired_estimate
from fusebench.analysis.stats import timed_trials
from fusebench.core.experiment import MIN_AUTO_ROUNDS
from fusebench.core.results import read_results
from fusebench.core.spec import DEFAULT_WORKER_ROUNDS

ROOT = Path(__file__).resolve().parents[1]
# rounds a pair and pairs a run: worker_rounds' fixed default, or what --pair-rounds and --pairs
# set (worker_rounds: auto chose 2 a pair, 7 pairs, for ci on the Zen 4)
K = DEFAULT_WORKER_ROUNDS
PAIRS = (4, 6, 8)
LEVEL = 0.95
ALPHA = 1.0 - LEVEL
GATE_ROWS = 8  # the gate's table: 3 variants and all pooled, x prefill and gen
GATE_LEVEL = 1.0 - ALPHA / GATE_ROWS  # Bonferroni's share, the level Holm gives its first row
LIMIT = math.log1p(-0.05)  # the gate's -5% (ci.yaml's margin_pct, check's --max-regression)
METRICS = {"prefill": ("prefill_tps", "prefill_cpu_tps"), "gen": ("gen_tps", "gen_cpu_tps")}
RULES = ("a", "b", "c", "product", "cs_end", "cs_every", "cs_third", "cs_pairs_third")
GATE_RULES = ("a@gate", "b@gate", "c@gate", "product@gate")
RULE_NAMES = {
    "a": "(a) n − 1 df",
    "b": "(b) B − 1 df when MSB > SD²",
    "c": "(c) pair means, B − 1 df",
    "product": "product (fixed_rounds)",
    "cs_end": "CS, last round",
    "cs_every": "CS, every look from round 6",
    "cs_third": "CS, every look from pair 3",
    "cs_pairs_third": "CS on pair means when MSB > SD², every look from pair 3",
}
RULE_NAMES.update({f"{rule}@gate": RULE_NAMES[rule] for rule in ("a", "b", "c", "product")})
SIGMA = 0.013  # the synthetic rounds' SD: the Xeon's within-pair scatter in gate-ab-33
TAUS = (0.0, 0.5, 1.0, 2.0)


@dataclass
class Pool:
    """One machine and configuration's complete pairs, by row: (pairs, K) centred log ratios."""

    label: str
    campaigns: set[str]
    files: int
    rows: dict[tuple[str, str], list[np.ndarray]]


def files() -> list[Path]:
    found = sorted(ROOT.glob("results/gate-ab-*/s0-*.jsonl.gz"))
    return found + sorted(ROOT.glob("results/build-offset-xeon/*.jsonl.gz"))


def source_of(run: dict) -> str:
    """A pool's name: the machine (the header's env.cpu) and the configuration its rounds ran in."""
    env, choice = run.get("env", {}), run.get("schedule_choice") or {}
    return (
        f"{env.get('cpu', '?')}; {choice.get('schedule', '?')}, "
        f"{choice.get('clock', 'wall')} clock, {env.get('threads', '?')} BLAS thread(s)"
    )


def short(source: str) -> str:
    """A pool's name for the tables: "Intel Xeon f6m167 sequential/wall/1t"."""
    cpu, _, config = source.partition("; ")
    cpu = re.sub(r" \(family (\d+), model (\d+)[^)]*\)", r" f\1m\2", cpu)
    cpu = cpu.replace("(R)", "").replace(" Processor", "")
    found = re.match(r"(\w+), (\w+) clock, (\S+) BLAS", config)
    return f"{cpu} {'/'.join(found.groups())}t" if found else source


def file_rows(path: Path) -> tuple[str, dict[tuple[str, str], list[np.ndarray]]]:
    """A file's pool name and, by (variant, metric), each worker pair's log ratios current /
    reference in round order, on the run's clock."""
    results = read_results([path])
    (run,) = results.runs.values()
    trials = timed_trials(results.frame("trial"))
    clock = (run.get("schedule_choice") or {}).get("clock", "wall")
    rows: dict[tuple[str, str], list[np.ndarray]] = {}
    for metric, (wall, cpu) in METRICS.items():
        column = cpu if clock == "cpu" else wall
        sides = trials.pivot_table(
            index=["variant", "process", "round"], columns="build", values=column, aggfunc="first"
        ).dropna()
        ratios = np.log(sides["current"] / sides["reference"])
        for variant, by_variant in ratios.groupby(level="variant"):
            pairs = [
                group.sort_index(level="round") for _, group in by_variant.groupby(level="process")
            ]
            pairs.sort(key=lambda pair: pair.index.get_level_values("round").min())
            rows[(str(variant), metric)] = [pair.to_numpy() for pair in pairs]
    return source_of(run), rows


def file_pairs(path: Path) -> tuple[str, dict[tuple[str, str], np.ndarray]]:
    """A file's pool name and, by row, its complete pairs' log ratios (pairs, K), uncentred."""
    source, rows = file_rows(path)
    # a pair of more rounds stands for one of K: its first K, as a run of K a pair times them
    complete = {key: [p[:K] for p in pairs if p.size >= K] for key, pairs in rows.items()}
    return source, {key: np.array(pairs) for key, pairs in complete.items() if len(pairs) >= 2}


def centred(pairs: np.ndarray) -> np.ndarray:
    """Each pair shifted so its mean is c·(m_j − m̄), c = sqrt(P / (P − 1)) (see the docstring)."""
    means = pairs.mean(axis=1, keepdims=True)
    p = pairs.shape[0]
    return pairs - means + math.sqrt(p / (p - 1)) * (means - means.mean())


def pools(how: str) -> dict[str, Pool]:
    found: dict[str, Pool] = {}
    for path in files():
        label, rows = file_pairs(path)
        pool = found.setdefault(label, Pool(label, set(), 0, defaultdict(list)))
        pool.files += 1
        pool.campaigns.add(path.parent.name)
        aa = path.parent.name.startswith("gate-ab-")
        for key, pairs in rows.items():
            pool.rows[key].append(centred(pairs) if how == "file" or not aa else pairs)
    for pool in found.values():
        for key, parts in pool.rows.items():
            every = np.concatenate(parts)
            if how == "pool":
                every = every - every.mean()
            pool.rows[key] = every
    return found


# --- the rules, vectorized over runs --------------------------------------------------------------


def t_quantile(df: np.ndarray | float, level: float = LEVEL) -> np.ndarray:
    return special.stdtrit(df, 0.5 + level / 2.0)


def cs_multiplier(n: int) -> float:
    """The confidence sequence's half-width at n rounds of SD 1 (log units; inf while unbounded)."""
    return sequential.half_width_log(n, 1.0, ALPHA)


def fixed_halves(x: np.ndarray, level: float = LEVEL) -> dict[str, np.ndarray]:
    """The fixed-n rules' half-widths (log units) for runs x: (runs, B, K) log ratios."""
    _, b, k = x.shape
    n = b * k
    mean = x.mean(axis=(1, 2))
    sd2 = ((x - mean[:, None, None]) ** 2).sum(axis=(1, 2)) / (n - 1)
    msb = k * ((x.mean(axis=2) - mean[:, None]) ** 2).sum(axis=1) / (b - 1)
    scale = np.sqrt(np.maximum(sd2, msb))
    return {
        "a": t_quantile(n - 1, level) * scale / math.sqrt(n),
        "b": t_quantile(np.where(msb > sd2, b - 1, n - 1), level) * scale / math.sqrt(n),
        "c": t_quantile(b - 1, level) * np.sqrt(msb / n),
        "cs_end": cs_multiplier(n) * scale,
    }


def rules(x: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each rule's (covers 0, half-width in %) for runs x: (runs, B, K) log ratios, truth 0; the
    fixed-n rules also at GATE_LEVEL ("a@gate", ...)."""
    k = x.shape[2]
    mean = x.mean(axis=(1, 2))
    halves = fixed_halves(x)
    gate = fixed_halves(x, GATE_LEVEL)
    halves.update({f"{rule}@gate": gate[rule] for rule in ("a", "b", "c")})
    out = {rule: (np.abs(mean) <= half, 100 * np.sinh(half)) for rule, half in halves.items()}
    out["cs_every"] = (every_look(x, MIN_AUTO_ROUNDS), out["cs_end"][1])
    out["cs_third"] = (every_look(x, 2 * k + 1), out["cs_end"][1])
    held, half = every_look(x, 2 * k + 1, pair_means=True)
    out["cs_pairs_third"] = (held, 100 * np.sinh(half))
    return out


def every_look(x: np.ndarray, first: int, pair_means: bool = False) -> tuple[np.ndarray, ...]:
    """Whether the confidence sequence holds 0 at every round from `first` to the last, each
    look's scale raised by the pairs seen so far (the last one partial); with `pair_means`, where
    the pairs set the scale, the sequence over the pair means instead (n = pairs, their SD). Also
    the last look's half-width (log units) with `pair_means`, else only the mask."""
    runs, b, k = x.shape
    flat = x.reshape(runs, b * k)
    held = np.ones(runs, dtype=bool)
    half = np.zeros(runs)
    for n in range(max(2, first), b * k + 1):
        r = flat[:, :n]
        mean = r.mean(axis=1)
        sd2 = ((r - mean[:, None]) ** 2).sum(axis=1) / (n - 1)
        half = cs_multiplier(n) * np.sqrt(sd2)
        labels = np.arange(n) // k
        groups = labels[-1] + 1
        if groups > 1:
            sizes = np.bincount(labels)
            sums = np.stack([r[:, labels == g].sum(axis=1) for g in range(groups)], axis=1)
            msb = ((sums / sizes - mean[:, None]) ** 2 * sizes).sum(axis=1) / (groups - 1)
            half = cs_multiplier(n) * np.sqrt(np.maximum(sd2, msb))
            if pair_means:
                # pair means' SD: sqrt(MSB / mean pair size); inf while the sequence is unbounded
                with np.errstate(invalid="ignore"):
                    by_pairs = cs_multiplier(groups) * np.sqrt(msb * groups / n)
                half = np.where(msb > sd2, by_pairs, half)
        held &= np.abs(mean) <= half
    return (held, half) if pair_means else held


def product(x: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """fusebench's paired_estimate on each run (fixed rounds): covers 0, half-width in %, at 95%
    ("product") and at GATE_LEVEL ("product@gate")."""
    runs, b, k = x.shape
    labels = np.repeat(np.arange(b), k)
    covers, halves = np.empty((2, runs), dtype=bool), np.empty((2, runs))
    for i, run in enumerate(x.reshape(runs, b * k)):
        est = paired_estimate(np.ones(b * k), np.exp(run), processes=labels, fixed_rounds=True)
        for j, (low, high) in enumerate(((est.low, est.high), est.interval(GATE_LEVEL))):
            covers[j, i] = low <= 1.0 <= high
            halves[j, i] = (high - low) / 2.0 * 100.0
    return {"product": (covers[0], halves[0]), "product@gate": (covers[1], halves[1])}


# --- the runs -------------------------------------------------------------------------------------


def replay(pool: Pool, b: int, runs: int, checked: int, rng: np.random.Generator) -> list[dict]:
    out = []
    for (variant, metric), pairs in sorted(pool.rows.items()):
        x = pairs[rng.integers(0, pairs.shape[0], (runs, b))]
        found = rules(x) | product(x[:checked])
        for rule, (covers, halves) in found.items():
            out.append(
                {
                    "source": pool.label,
                    "row": f"{variant} {metric}",
                    "pairs_in_pool": pairs.shape[0],
                    "B": b,
                    "rule": rule,
                    "runs": covers.size,
                    "coverage": float(covers.mean()),
                    "half_width_pct": float(halves.mean()),
                }
            )
    return out


def synthetic(tau: float, b: int, runs: int, checked: int, rng: np.random.Generator) -> list[dict]:
    rounds = SIGMA * rng.standard_t(3, (runs, b, K)) / math.sqrt(3.0)
    x = rounds + tau * SIGMA * rng.standard_normal((runs, b, 1))
    found = rules(x) | product(x[:checked])
    return [
        {
            "source": f"synthetic t(3), τ = {tau:g}σ",
            "row": "",
            "pairs_in_pool": "",
            "B": b,
            "rule": rule,
            "runs": covers.size,
            "coverage": float(covers.mean()),
            "half_width_pct": float(halves.mean()),
        }
        for rule, (covers, halves) in found.items()
    ]


def spread(pool: Pool, metric: str) -> tuple[float, float]:
    """The pool's median SD of the rounds within a pair, and the SD of its pairs' means (centred,
    so σ²/K and τ² together), in %, median over the metric's rows."""
    within, between = [], []
    for (_, m), pairs in pool.rows.items():
        if m == metric:
            within.append(float(np.median(pairs.std(axis=1, ddof=1))))
            between.append(float(pairs.mean(axis=1).std(ddof=1)))
    return 100 * float(np.median(within)), 100 * float(np.median(between))


# --- the summary ----------------------------------------------------------------------------------


def cell(rows: list[dict], source: str, rule: str, b: int) -> tuple[float, float]:
    """Coverage and mean half-width (%) of one source, rule and B: the mean over its rows."""
    mine = [r for r in rows if r["source"] == source and r["rule"] == rule and r["B"] == b]
    return (
        float(np.mean([r["coverage"] for r in mine])),
        float(np.mean([r["half_width_pct"] for r in mine])),
    )


def table(rows: list[dict], sources: Iterable[str], rules_: Iterable[str] = RULES) -> list[str]:
    """Coverage (mean over rows) and mean half-width, rule x B, one line a source and rule."""
    head = "| source | rule | " + " | ".join(f"B = {b} ({b * K} rounds)" for b in PAIRS) + " |"
    lines = [head, "|---|---|" + "---|" * len(PAIRS)]
    for source in sources:
        for rule in rules_:
            cells = [cell(rows, source, rule, b) for b in PAIRS]
            text = " | ".join(f"{cover:.1%} ±{half:.2f}%" for cover, half in cells)
            lines.append(f"| {short(source)} | {RULE_NAMES[rule]} | {text} |")
    return lines


def row_interval(pairs: list[np.ndarray], rule: str, level: float) -> tuple[float, float]:
    """One real row's mean log ratio and half-width under rule (a) or (b), every round kept (a
    partial pair too)."""
    r = np.concatenate(pairs)
    sizes = np.array([p.size for p in pairs], dtype=np.float64)
    n, b, mean = r.size, len(pairs), float(r.mean())
    sd2 = float(r.var(ddof=1))
    msb = float(np.sum(sizes * (np.array([p.mean() for p in pairs]) - mean) ** 2)) / (b - 1)
    df = b - 1 if rule == "b" and msb > sd2 else n - 1
    return mean, float(t_quantile(df, level)) * math.sqrt(max(sd2, msb) / n)


@contextmanager
def rule_a() -> Iterator[None]:
    """The product with rule (a): the pairs' scale, never their degrees of freedom."""
    scale = inference._process_scale
    with mock.patch.object(
        inference, "_process_scale", lambda *args: replace(scale(*args), pairs=None)
    ):
        yield


def gate_word(path: Path, rule: str) -> str:
    """The gate's word on a run (`fusebench check`'s build rows: compare_builds, Holm across the
    table), its rows judged against LIMIT under rule (a) or (b), the tree's own."""
    trials = read_results([path]).frame("trial")
    with rule_a() if rule == "a" else nullcontext():
        rows = stats.compare_builds(trials, margin_pct=5.0)
    edge = math.exp(LIMIT)
    if any(row.adj_high < edge for row in rows):
        return "regressed"
    return "passed" if all(row.adj_low >= edge for row in rows) else "cannot tell"


def real_runs() -> list[str]:
    """The real gate runs themselves, uncentred: per pool, how often the pairs set the scale, how
    often (a) and (b) hold 0 at 95%, (b)'s width against (a)'s, and the gate's word on each run
    under each rule."""
    tally: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    every = sorted(ROOT.glob("results/gate-ab-*/s*-0?.jsonl.gz"))
    for path in every:
        source, rows = file_rows(path)
        count = tally[source]
        rows = {key: pairs for key, pairs in rows.items() if len(pairs) >= 2}
        slowed = not path.name.startswith("s0-")
        for rule in ("a", "b"):
            count[f"{'s10' if slowed else 's0'} {rule} {gate_word(path, rule)}"] += 1
        count["s10 runs" if slowed else "s0 runs"] += 1
        if slowed:
            continue
        for pairs in rows.values():
            (mean, a), (_, b) = (row_interval(pairs, rule, LEVEL) for rule in ("a", "b"))
            count["rows"] += 1
            count["pair unit"] += b > a
            count["a holds"] += abs(mean) <= a
            count["b holds"] += abs(mean) <= b
            count["ratio"] += b / a
    lines = [
        "| source | A/A rows | pairs set the scale | (a) holds 0 | (b) holds 0 | (b) / (a) "
        "half-width | A/A runs: passed, (a) → (b) | cannot tell | 10% slower runs: regressed, "
        "(a) → (b) | cannot tell |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for source, c in tally.items():
        n = c["rows"]
        lines.append(
            f"| {short(source)} | {n:.0f} | {c['pair unit'] / n:.0%} | {c['a holds'] / n:.1%} | "
            f"{c['b holds'] / n:.1%} | {c['ratio'] / n:.2f}x | "
            f"{c['s0 a passed']:.0f} → {c['s0 b passed']:.0f} of {c['s0 runs']:.0f} | "
            f"{c['s0 a cannot tell']:.0f} → {c['s0 b cannot tell']:.0f} | "
            f"{c['s10 a regressed']:.0f} → {c['s10 b regressed']:.0f} of {c['s10 runs']:.0f} | "
            f"{c['s10 a cannot tell']:.0f} → {c['s10 b cannot tell']:.0f} |"
        )
    return lines


def main() -> None:
    global K, PAIRS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4000, help="synthetic runs a row and B")
    parser.add_argument("--product", type=int, default=400, help="of them, also by the product")
    parser.add_argument("--synthetic", type=int, default=20000, help="runs a τ and B")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--centre", choices=("file", "pool"), default="file")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "pair-unit")
    parser.add_argument("--pair-rounds", type=int, default=K, help="rounds a pair (first K kept)")
    parser.add_argument("--pairs", default=",".join(map(str, PAIRS)), help="pairs a run, e.g. 5,7")
    args = parser.parse_args()
    K, PAIRS = args.pair_rounds, tuple(int(b) for b in args.pairs.split(","))
    started = time.monotonic()
    rng = np.random.default_rng(args.seed)
    found = pools(args.centre)
    rows: list[dict] = []
    for pool in found.values():
        for b in PAIRS:
            rows += replay(pool, b, args.runs, args.product, rng)
    for tau in TAUS:
        for b in PAIRS:
            rows += synthetic(tau, b, args.synthetic, args.product * 5, rng)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = ("" if args.centre == "file" else "-pool-centred") + (
        "" if K == DEFAULT_WORKER_ROUNDS else f"-k{K}"
    )
    with (args.out / f"coverage{suffix}.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.5g}" if isinstance(v, float) else v for k, v in row.items()})
    real = real_runs()
    text = "\n".join(summary(found, rows, real, args, time.monotonic() - started)) + "\n"
    (args.out / f"summary{suffix}.md").write_text(text)
    print(text)


def brief(found: dict[str, Pool], rows: list[dict]) -> list[str]:
    """The figures the docs cite, computed from the tables below."""
    big = [
        label for label, pool in found.items() if min(p.shape[0] for p in pool.rows.values()) >= 30
    ]
    synthetic = [f"synthetic t(3), τ = {tau:g}σ" for tau in TAUS if tau > 0]

    def span(sources: list[str], rule: str) -> str:
        values = [cell(rows, source, rule, b)[0] for source in sources for b in PAIRS]
        return f"{min(values):.1%}-{max(values):.1%}"

    def widths(sources: list[str], rule: str, against: str) -> str:
        ratios = [
            cell(rows, source, rule, b)[1] / cell(rows, source, against, b)[1]
            for source in sources
            for b in PAIRS
        ]
        return f"{min(ratios):.2f}-{max(ratios):.2f}x"

    xeon = [label for label in big if "Xeon" in label]
    return [
        f"- Replayed, the pools of 30 pairs a row or more, B = {PAIRS[0]}-{PAIRS[-1]}: (a) held "
        f"the truth in {span(big, 'a')} of runs (the Xeon VM: {span(xeon, 'a')}), (b) in "
        f"{span(big, 'b')} ({span(xeon, 'b')}), (c) in {span(big, 'c')} ({span(xeon, 'c')}); "
        f"(b)'s half-width was {widths(big, 'b', 'a')} (a)'s, (c)'s {widths(big, 'c', 'b')} "
        "(b)'s.",
        f"- Synthetic, a pair offset τ = 0.5-2σ: (a) {span(synthetic, 'a')}, (b) "
        f"{span(synthetic, 'b')}, (c) {span(synthetic, 'c')}; with none (τ = 0) (a) "
        f"{span(['synthetic t(3), τ = 0σ'], 'a')}, (b) {span(['synthetic t(3), τ = 0σ'], 'b')} "
        f"at {widths(['synthetic t(3), τ = 0σ'], 'b', 'a')} (a)'s half-width, (c) "
        f"{span(['synthetic t(3), τ = 0σ'], 'c')}.",
        f"- The product (fixed_rounds) replayed: {span(big, 'product')}; synthetic τ > 0: "
        f"{span(synthetic, 'product')}.",
        f"- At {GATE_LEVEL:.2%} (the gate's first row), replayed: (a) {span(big, 'a@gate')} "
        f"(the Xeon VM: {span(xeon, 'a@gate')}), (b) {span(big, 'b@gate')} "
        f"({span(xeon, 'b@gate')}) at {widths(big, 'b@gate', 'a@gate')} (a)'s half-width; "
        f"synthetic τ > 0: (a) {span(synthetic, 'a@gate')}, (b) {span(synthetic, 'b@gate')}.",
        f"- The confidence sequence at the last round: {span(big, 'cs_end')} replayed, "
        f"{span(synthetic, 'cs_end')} synthetic; looked at every round from round "
        f"{MIN_AUTO_ROUNDS} (one pair) as trials: auto does: {span(big, 'cs_every')} replayed, "
        f"{span(synthetic, 'cs_every')} synthetic; from pair 3 on: {span(big, 'cs_third')} and "
        f"{span(synthetic, 'cs_third')}; from pair 3 on the pair means: "
        f"{span(big, 'cs_pairs_third')} and {span(synthetic, 'cs_pairs_third')}.",
    ]


def summary(
    found: dict[str, Pool], rows: list[dict], real: list[str], args: argparse.Namespace, took: float
) -> list[str]:
    lines = [
        "# The pair as the unit of the interval: coverage of the fixed-n interval, replayed",
        "",
        f"`.venv/bin/python benchmarks/pair_unit_coverage.py --runs {args.runs} --product "
        f"{args.product} --synthetic {args.synthetic} --seed {args.seed} --centre {args.centre} "
        f"--pair-rounds {K} --pairs {args.pairs}`"
        f" ({took:.0f} s on {platform.machine()}). The method is the script's docstring. Each "
        "cell: the share of synthetic runs whose 95% interval holds the truth (0), and the mean "
        "half-width. Replayed: the mean over the pool's six rows (3 variants x prefill, gen), "
        f"{args.runs} runs each ({args.product} by the product); {K} rounds a pair (each "
        "real pair's first). Every figure is in coverage.csv.",
        "",
        "In brief:",
        "",
        *brief(found, rows),
        "",
        "## The pools",
        "",
        "The machine is each file's run header (env.cpu); its configuration the header's "
        'schedule_choice and env.threads. Older headers say only "AMD EPYC": gate-ab-7\'s is the '
        "Zen 1 VM (family 23, AVX2) and gate-ab-12..15's the Zen 3 VM (family 25 model 1), as "
        "their summaries say.",
        "",
        "| pool | env.cpu | campaigns | files | pairs a row | rounds in a pair, median SD "
        "prefill / gen | SD of the pairs' means prefill / gen |",
        "|---|---|---|---|---|---|---|",
    ]
    for pool in found.values():
        sizes = sorted({p.shape[0] for p in pool.rows.values()})
        count = f"{sizes[0]}" if sizes[0] == sizes[-1] else f"{sizes[0]}-{sizes[-1]}"
        (wp, bp), (wg, bg) = spread(pool, "prefill"), spread(pool, "gen")
        campaigns = ", ".join(sorted(pool.campaigns, key=lambda c: (len(c), c)))
        lines.append(
            f"| {short(pool.label)} | {pool.label.partition('; ')[0]} | {campaigns} | "
            f"{pool.files} | {count} | {wp:.2f}% / {wg:.2f}% | "
            f"{bp:.2f}% / {bg:.2f}% |"
        )
    centring = (
        "each file's pairs centred on their own mean (the file's offset removed)"
        if args.centre == "file"
        else "the A/A pools centred on the pool's mean only (each file's offset kept)"
    )
    lines += ["", f"## Replayed rounds ({centring})", "", *table(rows, list(found))]
    synthetic_sources = [f"synthetic t(3), τ = {tau:g}σ" for tau in TAUS]
    lines += [
        "",
        f"## Synthetic: t(3) rounds of SD {SIGMA:.1%}, a normal pair offset of SD τ "
        f"({args.synthetic} runs a cell, {args.product * 5} by the product)",
        "",
        *table(rows, synthetic_sources),
        "",
        f"## The fixed-n rules at {GATE_LEVEL:.2%}, the level of the gate's first row",
        "",
        f"Bonferroni's share of 5% over the gate's {GATE_ROWS} rows, where the t quantile's tail "
        "weighs most: the same runs as above.",
        "",
        *table(rows, [*found, *synthetic_sources], GATE_RULES),
        "",
        "## The real gate runs themselves (not resampled, not centred)",
        "",
        "Every results/gate-ab-*/s0-* (identical builds) and s10-* (the current build 10% slower) "
        "file, every round kept. A/A rows: (a) and (b) at 95%, and whether the pairs set the "
        "scale (MSB > SD²). Runs: the gate's word on the run, `fusebench check`'s build rows "
        "(analysis.stats.compare_builds: 3 variants and all pooled, x prefill and gen, Holm "
        "across them) against −5%, with the tree's rule and with rule (a) patched in.",
        "",
        *real,
    ]
    return lines


if __name__ == "__main__":
    main()
