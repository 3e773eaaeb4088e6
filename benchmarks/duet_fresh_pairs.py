"""Do fresh worker pairs buy coverage in a duet of one build's variants? (issue 64, item 2)

A duet of variants runs each comparison on two workers of one build, which swap variants every
round, so a worker's own speed enters both arms alike over each pair of rounds. What a pair of
processes could still carry is an offset in the Δ itself (a variant that runs differently in one
process: memory layout, a compiled kernel's cache): each pair's rounds would then centre on Δ + its
offset, and one pair's interval would not hold what a rerun, on another pair, sees. Fresh pairs
every worker_rounds rounds (analysis.inference: the between-process mean square) exist to catch
that across two builds' workers.

1. Measured: every committed duet of one build's variants that ran fresh pairs (two to four pairs a
   cell), each row's rounds grouped by their pair: the between-pair variance beyond what the
   rounds' own spread gives it. Pooled over the rows, Σ k_j (m_j − m)² / σ̂² is χ² with Σ(B − 1)
   degrees of freedom when pairs carry no offset; its ratio to them estimates 1 + k̄ τ²/σ², with a
   90% interval, giving τ/σ (the offset's SD over a round's) with its upper bound.
2. Simulated: rows of n rounds drawn with the gate campaigns' heavy-tailed residuals
   (results/plan-zen4/gate-tails.json.gz) and a per-pair offset of τ/σ, each row run as one pair
   and as a fresh pair every 6 rounds, through the product's own paired estimate (fixed-n t
   interval, the between-process scale where several pairs ran): how often the 95% interval holds
   the true Δ, at τ/σ = 0, the pooled estimate and its upper bound.

    .venv/bin/python benchmarks/duet_fresh_pairs.py [--draws 4000] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
import own_tree  # noqa: E402, F401  (this script's own tree: benchmarks/own_tree.py)

from fusebench.analysis.inference import paired_estimate  # noqa: E402

FILES = {
    "AVX-512 EPYC, the main job in duets (2026-12-02)": "results/default-duet-20261202.jsonl.gz",
    "Zen 3 EPYC, the main job in duets": "results/default-budget-zen3/default-budget.jsonl.gz",
    "AVX-512 EPYC, GeGLU on E4B in duets": "results/duet-effects/geglu-e4b-duet.jsonl.gz",
    "AVX-512 EPYC, the tenfold softcap in duets": "results/duet-effects/tenfold-duet.jsonl.gz",
}
TAILS = ROOT / "results" / "plan-zen4" / "gate-tails.json.gz"
METRICS = ("prefill", "gen")
PAIR_ROUNDS = 6  # worker_rounds: a fresh pair every 6 rounds


def read(path: Path) -> list[dict]:
    data = path.read_bytes()
    text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def rows_of(path: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Each row of the file (size, comparison, metric) with several pairs: its rounds' log ratios
    new/baseline and each round's pair (the process that ran it)."""
    records = read(path)
    header = next(r for r in records if r["kind"] == "run")
    comparisons = json.loads(json.dumps(header["experiment"]["content"]))
    pairs = _comparisons(comparisons)
    by = defaultdict(dict)  # (size, round) -> variant -> trial
    for t in records:
        if t["kind"] == "trial" and not t["warmup"]:
            by[(t["size"], t["round"])][t["variant"]] = t
    rows = defaultdict(list)
    for (size, _), variants in sorted(by.items()):
        for baseline, new in pairs:
            if baseline in variants and new in variants:
                b, n = variants[baseline], variants[new]
                for metric in METRICS:
                    if b.get(f"{metric}_tps") and n.get(f"{metric}_tps"):
                        ratio = math.log(n[f"{metric}_tps"] / b[f"{metric}_tps"])
                        rows[(size, new, metric)].append((ratio, b["process"]))
    found = []
    for (size, new, metric), rounds in rows.items():
        ratios = np.array([r for r, _ in rounds])
        labels = np.array([p for _, p in rounds])
        if np.unique(labels).size >= 2:
            found.append((f"{size.split(' (')[0]} {new} {metric}", ratios, labels))
    return found


def _comparisons(content: str) -> list[tuple[str, str]]:
    import yaml

    return [tuple(pair) for pair in yaml.safe_load(content)["comparisons"]]


def between_pairs(rows: list[tuple[str, np.ndarray, np.ndarray]]) -> tuple[float, int, float]:
    """Pooled over rows: Σ k_j (m_j − m)² / σ̂² (σ̂² the within-pair mean square), its degrees of
    freedom Σ (B − 1), and the mean pair size k̄."""
    total, freedom, sizes = 0.0, 0, []
    for _, ratios, labels in rows:
        groups = [ratios[labels == label] for label in np.unique(labels)]
        within = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups)
        within_df = sum(g.size - 1 for g in groups)
        if within_df < 2 or within <= 0:
            continue
        sigma2 = within / within_df
        mean = ratios.mean()
        total += sum(g.size * (g.mean() - mean) ** 2 for g in groups) / sigma2
        freedom += len(groups) - 1
        sizes += [g.size for g in groups]
    return total, freedom, float(np.mean(sizes))


def ratio_interval(total: float, freedom: int, k: float) -> tuple[float, float, float]:
    """τ/σ: the estimate and its 90% interval, from the pooled statistic (1 + k τ²/σ² = E[total]
    / freedom; χ² quantiles for the interval), each clipped at 0."""

    def tau(scale: float) -> float:
        return math.sqrt(max(0.0, (scale - 1.0) / k))

    point = total / freedom
    low = total / stats.chi2.ppf(0.95, freedom)
    high = total / stats.chi2.ppf(0.05, freedom)
    return tau(point), tau(low), tau(high)


def coverage(
    tau: float, rounds: int, fresh: bool, draws: int, tails: np.ndarray, seed: int
) -> float:
    """How often the 95% fixed-n interval of a row of `rounds` rounds (σ = 1, heavy tails, each
    pair offset by τ) holds the true Δ of 0, with one pair or a fresh pair every PAIR_ROUNDS."""
    rng = np.random.default_rng(seed)
    held = 0
    labels = np.arange(rounds) // PAIR_ROUNDS if fresh else np.zeros(rounds, dtype=int)
    for _ in range(draws):
        offsets = tau * rng.standard_normal(labels.max() + 1)
        log_ratio = 0.01 * (offsets[labels] + rng.choice(tails, size=rounds))
        estimate = paired_estimate(
            np.ones(rounds), np.exp(log_ratio), processes=labels, fixed_rounds=True
        )
        held += estimate.low <= 1.0 <= estimate.high
    return held / draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = [
        "# Fresh pairs in a duet of one build's variants",
        "",
        "## Measured: the pairs' offsets in the committed duet runs",
        "",
        "| run | rows with several pairs | pairs a row | Σ k(m_j − m)²/σ̂² | df | τ/σ "
        "(90% interval) |",
        "|---|---|---|---|---|---|",
    ]
    every = []
    for label, file in FILES.items():
        rows = rows_of(ROOT / file)
        if not rows:
            continue
        every += rows
        total, freedom, k = between_pairs(rows)
        point, low, high = ratio_interval(total, freedom, k)
        per_row = sorted({np.unique(labels).size for _, _, labels in rows})
        lines.append(
            f"| {label} (`{file}`) | {len(rows)} | {'-'.join(map(str, per_row))} "
            f"| {total:.1f} | {freedom} | {point:.2f} ({low:.2f}-{high:.2f}) |"
        )
    total, freedom, k = between_pairs(every)
    point, low, high = ratio_interval(total, freedom, k)
    p = float(stats.chi2.sf(total, freedom))
    lines += [
        f"| **all pooled** | {len(every)} | | {total:.1f} | {freedom} | "
        f"**{point:.2f} ({low:.2f}-{high:.2f})** |",
        "",
        f"No offset between pairs is the null: p = {p:.2f} (χ² with {freedom} df); the pairs "
        f"held {k:.1f} rounds on average.",
        "",
        "## Simulated: coverage of the 95% fixed-n interval, one pair against fresh pairs",
        "",
        f"{args.draws} rows a cell; heavy-tailed rounds (the gate campaigns' residuals); a pair's "
        f"offset τ/σ; fresh pairs every {PAIR_ROUNDS} rounds.",
        "",
        "| τ/σ | rounds | one pair | fresh pairs every 6 |",
        "|---|---|---|---|",
    ]
    tails = np.asarray(json.loads(gzip.decompress(TAILS.read_bytes()))["residuals"])
    for seed, tau in enumerate(sorted({0.0, round(point, 2), round(high, 2)})):
        for rounds in (8, 12, 24):
            one = coverage(tau, rounds, False, args.draws, tails, seed)
            fresh = coverage(tau, rounds, True, args.draws, tails, seed)
            lines.append(f"| {tau:.2f} | {rounds} | {100 * one:.1f}% | {100 * fresh:.1f}% |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
