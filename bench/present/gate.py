"""The regression gate's output: a text or markdown verdict table, or JSON with github-action-benchmark's list.

--format json prints one object: {"passed", "exit_code", "notes", "verdicts", "github_action_benchmark"}, where the
last is github-action-benchmark's customBiggerIsBetter list ({"name", "unit", "value", "extra"}); feed a dashboard with
`fusebench check ... --format json | jq .github_action_benchmark > bench.json`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import stats
from ..analysis.gate import BUILD, Outcome, Stalls, Verdict, cell_names
from ..analysis.inference import STALLS_NEW, slower_beyond
from .document import Block, Bullets, Heading, Paragraph, Table
from .format import format_ci, format_delta, format_tps

FORMATS = ("text", "markdown", "json")
COLUMNS = ("Check", "Cell", "Variant", "Metric", "Baseline", "Current", "Δ [95% CI]", "Limit", "Verdict")


def summary_line(v: Verdict) -> str:
    """One line for a CI log, e.g. `E2B · pp128 tg4 b1 compiled prefill: -20.1% [-22.0%, -18.3%] beyond ...`."""
    what = " ".join(part for part in (v.cell, v.variant, v.metric) if part)
    if v.ci is None:
        return f"{v.check}: {what}: {v.status}" + (f" ({v.note})" if v.note else "")
    if v.stalls and v.stalls.arm == STALLS_NEW and not slower_beyond(v.ci, v.limit.pct):
        return f"{v.check}: {what}: the {_arm(v, v.stalls)} stalls and the {_arm(v, v.stalls, other=True)} does not: " \
               + stall_facts(v.stalls)
    return f"{v.check}: {what}: {format_delta(v.ci)} {format_ci(v.ci)}, beyond the limit {v.limit}"


def stall_facts(s: Stalls) -> str:
    """"6 of 40 rounds excluded against it; Δ over all rounds +11.4% [+5.0%, +18.1%]; without them +26.2% [...]"."""
    return (f"{s.against_arm} of {s.rounds} rounds excluded against it (sign test p = {s.sign_p:.2g}); Δ over all "
            f"rounds {format_delta(s.all_rounds)} {format_ci(s.all_rounds)}; without them {format_delta(s.trimmed)} "
            f"{format_ci(s.trimmed)}")


def _arm(v: Verdict, s: Stalls, other: bool = False) -> str:
    """The arm's name as a check row reads it: the build for the A/B gate, else the variant side."""
    names = ("current build", "reference build") if v.check == BUILD else ("new variant", "baseline variant")
    return names[(s.arm == STALLS_NEW) == other]


def _value(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return ""
    return f"×{value:.3f}" if unit == "×" else format_tps(value)


def verdict_row(v: Verdict, with_cell: bool) -> tuple[str, ...]:
    delta = f"{format_delta(v.ci)} {format_ci(v.ci)}" if v.ci else ""
    note = v.note
    if v.stalls and v.stalls.arm:
        note = "; ".join(part for part in (note, f"the {_arm(v, v.stalls)} stalls: {stall_facts(v.stalls)}") if part)
    status = f"{v.status} ({note})" if note else v.status
    cells = (v.check, v.cell, v.variant, v.metric, _value(v.baseline, v.unit), _value(v.current, v.unit), delta,
             str(v.limit) if v.limit else "", status)
    return cells if with_cell else cells[:1] + cells[2:]


def limits_line(outcome: Outcome) -> str:
    """Which bound set each kind of limit, e.g. `tok/s vs baseline prefill -12.3% (noise)`."""
    limited = [v for v in outcome.verdicts if v.limit]
    if len({str(v.limit) for v in limited}) == 1:
        return f"limit: {limited[0].limit} for every check"
    return "limits: " + "; ".join(dict.fromkeys(f"{v.check} {v.metric} {v.limit}" for v in limited)) if limited else ""


def blocks(outcome: Outcome, results: Path) -> list[Block]:
    failures = outcome.failures
    count = f"{len(failures)} of {len(outcome.verdicts)} verdicts failed"
    title = f"fusebench check: FAILED, {count}" if failures else f"fusebench check: passed, {count}"
    # One cell (the CI experiment has one) goes above the table rather than into every row.
    cells = {v.cell for v in outcome.verdicts if v.cell}
    facts = [f"results: {results}", *outcome.notes, limits_line(outcome)]
    if len(cells) == 1:
        facts.append(f"cell: {cells.pop()}")
    with_cell = bool(cells)
    columns = COLUMNS if with_cell else COLUMNS[:1] + COLUMNS[2:]
    rows = tuple(verdict_row(v, with_cell) for v in outcome.verdicts)
    numeric = frozenset(columns.index(c) for c in ("Baseline", "Current", "Δ [95% CI]"))
    out: list[Block] = [Heading(title, 2), Bullets(tuple(f for f in facts if f)), Table(columns, rows, numeric)]
    if failures:
        out += [Paragraph("Failed:"), Bullets(tuple(summary_line(v) for v in failures))]
    return out


def github_action_benchmark(trials: pd.DataFrame, comparisons: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """github-action-benchmark's customBiggerIsBetter entries: each cell's median tok/s and median speedup."""
    labels = cell_names([trials])
    entries = []
    tables = [(stats.summary_table(trials), "tok/s")]
    tables += [(stats.summary_table(stats.paired_speedups(trials, *pair)), "x") for pair in comparisons]
    for table, unit in tables:
        for row in table.itertuples():
            entries.append({
                "name": f"{labels[row.model_key, row.size, row.workload]} {row.variant} {row.metric}",
                "unit": unit,
                "value": round(float(row.median), 4),
                "extra": f"{row.n} timed rounds, CV {row.cv:.1%}; {row.machine}",
            })
    return entries


def to_json(outcome: Outcome) -> str:
    verdicts = [{
        "check": v.check, "cell": v.cell, "variant": v.variant, "metric": v.metric, "unit": v.unit,
        "baseline": _finite(v.baseline), "current": _finite(v.current),
        "delta_pct": _finite(v.ci.delta_pct) if v.ci else None,
        "ci_low_pct": _finite(v.ci.low_pct) if v.ci else None,
        "ci_high_pct": _finite(v.ci.high_pct) if v.ci else None,
        "limit_pct": v.limit.pct if v.limit else None, "limit_bound": v.limit.bound if v.limit else None,
        "verdict": v.status, "failed": v.failed, "note": v.note, **stall_json(v.stalls),
    } for v in outcome.verdicts]
    gab = github_action_benchmark(stats.timed_trials(outcome.trials), outcome.comparisons)
    document = {"passed": not outcome.failures, "exit_code": outcome.exit_code, "notes": outcome.notes,
                "verdicts": verdicts, "github_action_benchmark": gab}
    return json.dumps(document, indent=1, ensure_ascii=False)


def stall_json(s: Stalls | None) -> dict[str, Any]:
    """The stall rule's typed figures for one row: "stalls" is "new", "baseline" or null (also null for rows that are
    not paired), and both candidate Δs with their own 95% intervals; "delta_pct" above is the one the verdict used."""
    if s is None:
        return {"stalls": None, "over_all_rounds": None, "rounds": None, "excluded_against_new": None,
                "excluded_against_baseline": None, "stall_sign_p": None, "all_rounds": None, "trimmed": None}
    return {"stalls": s.arm, "over_all_rounds": s.over_all_rounds, "rounds": s.rounds,
            "excluded_against_new": s.against_new, "excluded_against_baseline": s.against_baseline,
            "stall_sign_p": _finite(s.sign_p), "all_rounds": _interval_json(s.all_rounds),
            "trimmed": _interval_json(s.trimmed)}


def _interval_json(ci: stats.RatioCI) -> dict[str, Any]:
    return {"rounds": ci.n, "delta_pct": _finite(ci.delta_pct), "ci_low_pct": _finite(ci.low_pct),
            "ci_high_pct": _finite(ci.high_pct)}


def _finite(value: float) -> float | None:
    return round(float(value), 4) if math.isfinite(value) else None
