"""The answer first: one sentence per comparison, opening the run's closing screen and the report.

A sentence gives the verdict most of the comparison's rows share, then every row that differs, with its Δ or its
interval; for an inconclusive row it says about how many rounds would settle it at the noise this run saw (rounds
scale with the square of the width: n · (half-width / target)²).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.inference import VerdictWord
from ..analysis.stopping import target_for_margin
from ..analysis.study import Study, compare_scope, ops_changes


@dataclass(frozen=True)
class _Row:
    where: str  # "E2B prefill"
    word: VerdictWord | None  # None: no paired round
    delta_pct: float
    half_width_pct: float
    rounds: int


def bottom_lines(study: Study, machine: str, workload: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
    """One sentence per comparison of this machine and workload (none for a pair with no rows)."""
    lines = []
    for pair in pairs:
        rows = _rows(study, machine, workload, pair)
        if rows:
            lines.append(f"{_name(study, *pair)}: {_sentence(rows, study.margin_pct)}.")
    return lines


def _rows(study: Study, machine: str, workload: str, pair: tuple[str, str]) -> list[_Row]:
    rows = compare_scope(study, machine, workload, pair)
    return [_Row(f"{name} {r.metric}", r.verdict.word if r.verdict else None, r.delta_pct, r.half_width_pct,
                 r.n_pairs) for r, name in zip(rows, _short_sizes([r.size for r in rows]), strict=True)]


def _short_sizes(sizes: Sequence[str]) -> list[str]:
    """"E2B" for "E2B (2/35 layers)", unless another row is E2B at another depth (a depth study): then the whole."""
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
    scope = f"on all {len(rows)} rows" if not others else f"on {len(rows) - len(others)} of {len(rows)} rows"
    head = f"{_phrase(common, margin_pct)} {scope}"
    return head if not others else f"{head}; " + "; ".join(_exception(row, margin_pct) for row in others)


def _phrase(word: VerdictWord | None, margin_pct: float) -> str:
    if word is None:
        return "n/a"
    return f"no change within ±{margin_pct:g}%" if word is VerdictWord.NO_CHANGE else word.value


def _exception(row: _Row, margin_pct: float) -> str:
    if row.word in (VerdictWord.FASTER, VerdictWord.SLOWER):
        return f"{row.where} {row.word.value} {row.delta_pct:+.1f}%"
    if row.word is VerdictWord.INCONCLUSIVE and math.isfinite(row.half_width_pct):
        target = target_for_margin(margin_pct)
        needed = math.ceil(row.rounds * (row.half_width_pct / target) ** 2)
        return (f"{row.where} inconclusive (±{row.half_width_pct:.1f}% after {row.rounds} rounds; about {needed} "
                "would settle it at this noise)")
    return f"{row.where} {_phrase(row.word, margin_pct)}"
