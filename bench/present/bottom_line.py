"""The answer first: one sentence per comparison, opening the run's closing screen and the report.

A sentence gives the verdict most of the comparison's rows share, then every row that differs, with
its Δ or its interval; for an inconclusive row it says about how many rounds would settle it at the
estimate and noise this run saw (analysis.stopping, "In reach"), and what they would take at the
run's pace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis import stats
from ..analysis.inference import VerdictWord
from ..analysis.stopping import Goal
from ..analysis.study import Study, compare_scope, on, ops_changes
from .format import format_duration


@dataclass(frozen=True)
class _Row:
    where: str  # "E2B prefill"
    word: VerdictWord | None  # None: no paired round
    delta_pct: float
    half_width_pct: float
    rounds: int
    settle_rounds: int | None = None  # inconclusive: the rounds that would decide it
    settle_s: float | None = None  # and the time they would take at this run's pace


def bottom_lines(
    study: Study, machine: str, workload: str, pairs: Sequence[tuple[str, str]]
) -> list[str]:
    """One sentence per comparison of this machine and workload (none for a pair with no rows)."""
    lines = []
    for pair in pairs:
        rows = _rows(study, machine, workload, pair, pairs)
        if rows:
            lines.append(f"{_name(study, *pair)}: {_sentence(rows, study.margin_pct)}.")
    return lines


def _rows(
    study: Study,
    machine: str,
    workload: str,
    pair: tuple[str, str],
    family: Sequence[tuple[str, str]],
) -> list[_Row]:
    rows = compare_scope(study, machine, workload, pair, family=family)
    pace = stats.round_seconds(on(study.timed, machine, workload))
    found = []
    for r, name in zip(rows, _short_sizes([r.size for r in rows]), strict=True):
        settle = r.rounds_to_decide(Goal(study.margin_pct))
        seconds = pace.get((r.model_key, r.workload))
        more = None if settle is None or seconds is None else (settle - r.n_pairs) * seconds
        found.append(
            _Row(
                f"{name} {r.metric}",
                r.verdict.word if r.verdict else None,
                r.delta_pct,
                r.half_width_pct,
                r.n_pairs,
                settle,
                more,
            )
        )
    return found


def _short_sizes(sizes: Sequence[str]) -> list[str]:
    """ "E2B" for "E2B (2/35 layers)", unless another row is E2B at another depth (a depth study):
    then the whole."""
    short = {size: size.split(" (")[0] for size in dict.fromkeys(sizes)}
    names = list(short.values())
    return [size if names.count(short[size]) > 1 else short[size] for size in sizes]


def _name(study: Study, baseline: str, new: str) -> str:
    changes = ops_changes(study, baseline, new)
    if baseline == new or not changes:
        return f"{new} vs {baseline} (A/A)"
    return f"{new} vs {baseline} ({', '.join(f'{op} {b}' for op, (_, b) in changes.items())})"


def _sentence(rows: list[_Row], margin_pct: float) -> str:
    words = [row.word for row in rows]
    common = max(dict.fromkeys(words), key=words.count)
    others = [row for row in rows if row.word != common]
    scope = (
        f"on all {len(rows)} rows"
        if not others
        else f"on {len(rows) - len(others)} of {len(rows)} rows"
    )
    head = f"{_phrase(common, margin_pct)} {scope}"
    if common is VerdictWord.INCONCLUSIVE:
        head += _settle_all([row for row in rows if row.word is common])
    return (
        head
        if not others
        else f"{head}; " + "; ".join(_exception(row, margin_pct) for row in others)
    )


def _settle_all(rows: list[_Row]) -> str:
    """ " (about 12-176 rounds would settle them, up to 42 min more at this run's pace)"."""
    needed = [row.settle_rounds for row in rows if row.settle_rounds is not None]
    if not needed:
        return ""
    span = f"{min(needed)}-{max(needed)}" if min(needed) != max(needed) else f"{needed[0]}"
    more = [row.settle_s for row in rows if row.settle_s is not None]
    took = f", up to {format_duration(max(more))} more at this run's pace" if more else ""
    return f" (about {span} rounds would settle them{took})"


def _phrase(word: VerdictWord | None, margin_pct: float) -> str:
    if word is None:
        return "n/a"
    return f"no change within ±{margin_pct:g}%" if word is VerdictWord.NO_CHANGE else word.value


def _exception(row: _Row, margin_pct: float) -> str:
    if row.word in (VerdictWord.FASTER, VerdictWord.SLOWER):
        return f"{row.where} {row.word.value} {row.delta_pct:+.1f}%"
    if row.word is VerdictWord.INCONCLUSIVE:
        width = f"±{row.half_width_pct:.1f}%" if math.isfinite(row.half_width_pct) else "unbounded"
        if row.settle_rounds is None:
            return f"{row.where} inconclusive ({width} after {row.rounds} rounds)"
        took = f" ({format_duration(row.settle_s)} more)" if row.settle_s is not None else ""
        return (
            f"{row.where} inconclusive ({width} after {row.rounds} rounds; "
            f"about {row.settle_rounds} rounds{took} would settle it at this noise)"
        )
    return f"{row.where} {_phrase(row.word, margin_pct)}"
