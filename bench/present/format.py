"""Every number a human reads, formatted in one place (as pyperf does), so tables, plots and logs
agree."""

from __future__ import annotations

import math

from ..analysis.inference import RatioInterval, Verdict, VerdictWord
from ..analysis.opstats import VariantSummary


def signed_pct(pct: float) -> str:
    """ "+16.6%"; never "-0.0%" for a change that rounds to zero."""
    rounded = round(pct, 1)
    return f"{0.0 if rounded == 0 else rounded:+.1f}%"


def format_delta(ci: RatioInterval) -> str:
    """The change as a signed percentage with one decimal, e.g. "+16.6%"."""
    return signed_pct(ci.delta_pct)


def format_ci(ci: RatioInterval) -> str:
    """CI bounds as signed percentages, e.g. "[+12.1%, +20.3%]"; "[unbounded]" for a confidence
    sequence that is still unbounded after few rounds at its level."""
    if math.isinf(ci.high):
        return "[unbounded]"
    return f"[{signed_pct(ci.low_pct)}, {signed_pct(ci.high_pct)}]"


def verdict_text(verdict: Verdict) -> str:
    """ "faster", "slower", "no change", "inconclusive (±3.1%)" (the interval's half-width: what the
    row could have detected) or "needs ≥ 3 rounds"."""
    if verdict.word is VerdictWord.NEEDS_ROUNDS:
        return f"needs ≥ {verdict.min_rounds} rounds"
    if verdict.word is VerdictWord.INCONCLUSIVE:
        if math.isinf(verdict.half_width_pct):
            return "inconclusive (unbounded)"
        return f"inconclusive (±{verdict.half_width_pct:.1f}%)"
    return verdict.word.value


def op_verdict_text(s: VariantSummary) -> str:
    """An op variant's verdict against its op's reference variant: "reference" for that variant
    itself, "n/a" for one that shares no round with it."""
    if s.variant == s.reference:
        return "reference"
    return verdict_text(s.verdict) if s.verdict else "n/a"


def format_tps(x: float) -> str:
    """Throughput for tables: "18,777" from 1,000 up (no decimals), "153.8" below, "2.63" below 10
    (a full-depth decode on a CPU), so a few percent still show in the digits."""
    if not math.isfinite(x):
        return "n/a"
    # Decide on the rounded value so 999.96 prints "1,000" rather than "1000.0", and 9.996 "10.0".
    if abs(round(x, 1)) >= 1000:
        return f"{x:,.0f}"
    if abs(round(x, 2)) < 10:
        return f"{x:.2f}"
    return f"{x:.1f}"


def format_rate(value: float) -> str:
    """Three significant digits, and whole numbers from 100: 0.0177, 2.30, 52.1, 3,350."""
    short = f"{value:#.3g}"
    # Decide on the rounded value, so 99.96 prints "100", not "100." ('#' keeps the point).
    return f"{value:,.0f}" if abs(float(short)) >= 100 else short


def format_seconds(seconds: float) -> str:
    """ "1.23 s", "4.56 ms" or "7.8 µs"."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def format_count(n: int) -> str:
    """Parameters: "2.35B" or "870.1M"."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def format_bytes(size: int) -> str:
    """ "8.87 GiB", "412 MiB", "3 KiB", "12 B"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            value = size / scale
            return f"{value:.2f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{size} B"


def format_duration(seconds: float) -> str:
    """ "43 s", or "5 min" from two minutes on."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def json_number(value: float) -> float | None:
    """A figure for JSON output: rounded to 4 places, None where it is not finite (JSON has no inf
    or NaN)."""
    return round(float(value), 4) if math.isfinite(value) else None
