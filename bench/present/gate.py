"""The regression gate's output: a text or markdown table of its findings, or JSON with
github-action-benchmark's list.

The words and glyphs of a finding ("✗ regressed", "vs reference") are chosen here; JSON carries the
findings' codes and numbers. --format json prints one object: {"passed", "cannot_tell", "exit_code",
"notes", "verdicts", "github_action_benchmark"}; exit_code 0 passed, 1 failed, 3 cannot tell. A
verdict's "check" is one of analysis.gate.Check's values (tps, speedup, expect, correct, build,
history), its "verdict" one of Status's (regressed, stalls, within limit, cannot tell, ...), its
"interval_verdict" what the interval shows where it is within the limit (faster, slower, no change,
inconclusive, needs more rounds), and "unit" is "tok/s" or "ratio" (a speedup). The last key is
github-action-benchmark's customBiggerIsBetter list ({"name", "unit", "value", "extra"}); feed a
dashboard with `fusebench check ... --format json | jq .github_action_benchmark > bench.json`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TypedDict

from ..analysis import stats
from ..analysis.gate import RATIO_CHECKS, Check, Finding, GateOutcome, Limit, Median, Settle, Status
from ..analysis.inference import STALLS_NEW, slower_beyond
from ..analysis.speedups import MIN_RUNS
from ..analysis.stats import Stalls
from .document import Block, Bullets, Heading, Paragraph, Table
from .format import format_ci, format_delta, format_duration, format_tps, json_number, verdict_text

COLUMNS = (
    "Check",
    "Cell",
    "Variant",
    "Metric",
    "Baseline",
    "Current",
    "Δ [95% CI]",
    "Limit",
    "Verdict",
)
CHECK_LABELS = {
    Check.TPS: "tok/s",
    Check.SPEEDUP: "speedup",
    Check.EXPECT: "expect",
    Check.CORRECT: "correct",
    Check.BUILD: "vs reference",
    Check.HISTORY: "speedup vs history",
    Check.CONTROL: "control",
}
STATUS_TEXT = {
    Status.REGRESSED: "✗ regressed",
    Status.STALLS: "✗ stalls",
    Status.NO_DATA: "✗ no data",
    Status.INCORRECT: "✗ incorrect",
    Status.CORRECT: "✓ correct",
    Status.INFORMATION: "slower beyond the limit (information)",
    Status.NEW: "new",
    Status.MISSING: "missing",
    Status.TOO_FEW_VALUES: "too few rounds",
    Status.NEEDS_HISTORY: f"needs ≥ {MIN_RUNS} stored runs",
    Status.WITHIN_HISTORY: "within history",
    Status.CANNOT_TELL: "? cannot tell",
    Status.SETUP_ALIKE: "✓ identical builds: no difference seen",
    Status.SETUP_DIFFERS: "? identical builds read apart",
}


def status_text(f: Finding) -> str:
    if f.status is Status.CANNOT_TELL and f.settle:
        return f"{STATUS_TEXT[f.status]}: {settle_text(f.settle, f.ci.n if f.ci else 0)}"
    return verdict_text(f.verdict) if f.verdict else STATUS_TEXT[f.status]


def settle_text(settle: Settle, rounds_now: int) -> str:
    """ "about 48 rounds (6 min at this run's pace) would settle it"."""
    if settle.rounds is None:
        return "the estimate sits on the limit; no round count settles it"
    more = (
        f", {format_duration(settle.seconds)} more at this run's pace"
        if settle.seconds is not None
        else ""
    )
    return f"about {settle.rounds} rounds ({rounds_now} ran{more}) would settle it"


def limit_text(limit: Limit) -> str:
    """ "-5.0% (threshold)"."""
    return f"-{limit.pct:.1f}% ({limit.bound.value})"


def summary_line(f: Finding) -> str:
    """One line for a CI log, e.g. `E2B · pp128 tg4 b1 compiled prefill: -20.1% [-22.0%, -18.3%]
    beyond ...`."""
    what = " ".join(part for part in (f.cell, f.variant, f.metric) if part)
    check = CHECK_LABELS[f.check]
    if f.ci is None:
        return f"{check}: {what}: {status_text(f)}" + (f" ({f.note})" if f.note else "")
    if f.status is Status.SETUP_DIFFERS:
        return (
            f"{check}: {what}: the setup reads {format_delta(f.ci)} {format_ci(f.ci)} between "
            "identical builds (the reference's code in two places), so no verdict on the code "
            "stands"
        )
    if f.status is Status.CANNOT_TELL:
        settle = f"; {settle_text(f.settle, f.ci.n)}" if f.settle else ""
        return (
            f"{check}: {what}: {format_delta(f.ci)} {format_ci(f.ci)} reaches across the limit "
            f"{limit_text(f.limit)}{settle}"
        )
    if f.stalls and f.stalls.arm == STALLS_NEW and not slower_beyond(f.ci, f.limit.pct):
        return (
            f"{check}: {what}: the {_arm(f, f.stalls)} stalls "
            f"and the {_arm(f, f.stalls, other=True)} does not: " + stall_facts(f.stalls)
        )
    return (
        f"{check}: {what}: {format_delta(f.ci)} {format_ci(f.ci)}, "
        f"beyond the limit {limit_text(f.limit)}"
    )


def stall_facts(s: Stalls) -> str:
    """ "6 of 40 rounds excluded against it; Δ over all rounds +11.4% [+5.0%, +18.1%]; without them
    +26.2% [...]"."""
    return (
        f"{s.against_arm} of {s.rounds} rounds excluded against it (sign test p = "
        f"{s.sign_p:.2g}); Δ over all rounds {format_delta(s.all_rounds)} "
        f"{format_ci(s.all_rounds)}; without them {format_delta(s.trimmed)} {format_ci(s.trimmed)}"
    )


def _arm(f: Finding, s: Stalls, other: bool = False) -> str:
    """The arm's name as a check row reads it: the build for the A/B gate, else the variant side."""
    names = (
        ("current build", "reference build")
        if f.check == Check.BUILD
        else ("new variant", "baseline variant")
    )
    return names[(s.arm == STALLS_NEW) == other]


def _value(value: float, check: Check) -> str:
    if not math.isfinite(value):
        return ""
    return f"×{value:.3f}" if check in RATIO_CHECKS else format_tps(value)


def finding_row(f: Finding, with_cell: bool) -> tuple[str, ...]:
    delta = f"{format_delta(f.ci)} {format_ci(f.ci)}" if f.ci else ""
    note = f.note
    if f.stalls and f.stalls.arm:
        note = "; ".join(
            part
            for part in (note, f"the {_arm(f, f.stalls)} stalls: {stall_facts(f.stalls)}")
            if part
        )
    status = f"{status_text(f)} ({note})" if note else status_text(f)
    cells = (
        CHECK_LABELS[f.check],
        f.cell,
        f.variant,
        f.metric,
        _value(f.baseline, f.check),
        _value(f.current, f.check),
        delta,
        limit_text(f.limit) if f.limit else "",
        status,
    )
    return cells if with_cell else cells[:1] + cells[2:]


def limits_line(outcome: GateOutcome) -> str:
    """Which bound set each kind of limit, e.g. `tok/s vs baseline prefill -12.3% (noise)`."""
    limited = [f for f in outcome.findings if f.limit]
    if len({limit_text(f.limit) for f in limited}) == 1:
        return f"limit: {limit_text(limited[0].limit)} for every check"
    if not limited:
        return ""
    return "limits: " + "; ".join(
        dict.fromkeys(f"{CHECK_LABELS[f.check]} {f.metric} {limit_text(f.limit)}" for f in limited)
    )


def title(outcome: GateOutcome) -> str:
    """ "passed", "FAILED" or "cannot tell", as the check's last line and its heading say it."""
    if outcome.failures:
        return "FAILED"
    return "cannot tell" if outcome.undecided else "passed"


def blocks(outcome: GateOutcome, results: Path) -> list[Block]:
    failures, undecided = outcome.failures, outcome.undecided
    count = f"{len(failures)} of {len(outcome.findings)} verdicts failed"
    if undecided and not failures:
        count = f"{len(undecided)} of {len(outcome.findings)} verdicts undecided, none failed"
    heading = f"fusebench check: {title(outcome)}, {count}"
    # One cell (the CI experiment has one) goes above the table rather than into every row.
    cells = {f.cell for f in outcome.findings if f.cell}
    facts = [f"results: {results}", *outcome.notes, limits_line(outcome)]
    if len(cells) == 1:
        facts.append(f"cell: {cells.pop()}")
    with_cell = bool(cells)
    columns = COLUMNS if with_cell else COLUMNS[:1] + COLUMNS[2:]
    rows = tuple(finding_row(f, with_cell) for f in outcome.findings)
    numeric = frozenset(columns.index(c) for c in ("Baseline", "Current", "Δ [95% CI]"))
    out: list[Block] = [
        Heading(heading, 2),
        Bullets(tuple(f for f in facts if f)),
        Table(columns, rows, numeric),
    ]
    if failures:
        out += [Paragraph("Failed:"), Bullets(tuple(summary_line(f) for f in failures))]
    if undecided:
        out += [
            Paragraph(
                "Cannot tell (each interval reaches across the limit: neither within it nor "
                "beyond it, or the control arm read identical builds apart; a longer run, a "
                "larger budget_s or max_rounds, or a quieter machine settles it):"
            ),
            Bullets(tuple(summary_line(f) for f in undecided)),
        ]
    return out


# --- JSON -----------------------------------------------------------------------------------------


class BenchmarkEntry(TypedDict):
    """github-action-benchmark's customBiggerIsBetter entry."""

    name: str
    unit: str
    value: float
    extra: str


class IntervalJson(TypedDict):
    rounds: int
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None


class FindingJson(TypedDict):
    """One finding. The stall rule's figures: "stalls" is "new", "baseline" or null (also null, with
    the rest of them, for rows that are not paired), and both candidate Δs with their own 95%
    intervals; "delta_pct" is the one the verdict used."""

    check: str
    cell: str
    variant: str
    metric: str
    unit: str
    baseline: float | None
    current: float | None
    delta_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    limit_pct: float | None
    limit_bound: str | None
    verdict: str
    interval_verdict: str | None
    failed: bool
    note: str
    stalls: str | None
    over_all_rounds: bool | None
    rounds: int | None
    excluded_against_new: int | None
    excluded_against_baseline: int | None
    stall_sign_p: float | None
    all_rounds: IntervalJson | None
    trimmed: IntervalJson | None
    # cannot tell: the rounds that would settle it, and their seconds at the run's pace
    settle_rounds: int | None
    settle_seconds: float | None
    clock: str  # the clock Δ and the interval are on: "wall" or "cpu"


class CheckJson(TypedDict):
    passed: bool
    cannot_tell: bool
    exit_code: int
    notes: list[str]
    verdicts: list[FindingJson]
    github_action_benchmark: list[BenchmarkEntry]


def github_action_benchmark(medians: list[Median]) -> list[BenchmarkEntry]:
    """Each cell's median tok/s and median speedup."""
    return [
        BenchmarkEntry(
            name=f"{m.cell} {m.figures.variant} {m.figures.metric}",
            unit="x" if m.speedup else "tok/s",
            value=round(float(m.figures.summary.median), 4),
            extra=f"{m.figures.summary.n} timed rounds, "
            f"CV {m.figures.summary.cv:.1%}; {m.figures.machine}",
        )
        for m in medians
    ]


def to_json(outcome: GateOutcome) -> str:
    document = CheckJson(
        passed=outcome.exit_code == 0,
        cannot_tell=bool(outcome.undecided and not outcome.failures),
        exit_code=outcome.exit_code,
        notes=list(outcome.notes),
        verdicts=[finding_json(f) for f in outcome.findings],
        github_action_benchmark=github_action_benchmark(outcome.medians),
    )
    return json.dumps(document, indent=1, ensure_ascii=False)


def finding_json(f: Finding) -> FindingJson:
    s = f.stalls
    return FindingJson(
        check=f.check.value,
        cell=f.cell,
        variant=f.variant,
        metric=f.metric,
        unit="ratio" if f.check in RATIO_CHECKS else "tok/s",
        baseline=json_number(f.baseline),
        current=json_number(f.current),
        delta_pct=json_number(f.ci.delta_pct) if f.ci else None,
        ci_low_pct=json_number(f.ci.low_pct) if f.ci else None,
        ci_high_pct=json_number(f.ci.high_pct) if f.ci else None,
        limit_pct=f.limit.pct if f.limit else None,
        limit_bound=f.limit.bound.value if f.limit else None,
        verdict=f.status.value,
        interval_verdict=f.verdict.word.value if f.verdict else None,
        failed=f.failed,
        note=f.note,
        stalls=s.arm if s else None,
        over_all_rounds=s.over_all_rounds if s else None,
        rounds=s.rounds if s else None,
        excluded_against_new=s.against_new if s else None,
        excluded_against_baseline=s.against_baseline if s else None,
        stall_sign_p=json_number(s.sign_p) if s else None,
        all_rounds=_interval_json(s.all_rounds) if s else None,
        trimmed=_interval_json(s.trimmed) if s else None,
        settle_rounds=f.settle.rounds if f.settle else None,
        settle_seconds=json_number(f.settle.seconds)
        if f.settle and f.settle.seconds is not None
        else None,
        clock=f.clock.value,
    )


def _interval_json(ci: stats.RatioCI) -> IntervalJson:
    return IntervalJson(
        rounds=ci.n,
        delta_pct=json_number(ci.delta_pct),
        ci_low_pct=json_number(ci.low_pct),
        ci_high_pct=json_number(ci.high_pct),
    )
