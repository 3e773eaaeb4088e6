"""The statistics of `fusebench ops` records: per run × op × shape × variant, the median time, the
achieved rates, and the paired per-round speed ratio against the op's reference variant."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..core.fileformat import OpRecord
from .inference import Adjusted, PairedEstimate, Verdict, adjust, paired_estimate
from .inference import verdict as inference_verdict
from .stats import ALPHA, DEFAULT_MARGIN_PCT, summarize

# A case of one run: (run_id, op, shape_label).
CaseKey = tuple[str | None, str, str]


@dataclass(frozen=True)
class VariantSummary:
    run_id: str | None
    op: str
    shape_label: str
    variant: str
    reference: str
    median_s: float
    gbps: float
    gflops: float | None
    max_abs_err: float
    rounds: int = 0  # the rounds that timed it
    note: str = ""  # what the op's declaration says about this shape, if anything
    # Speed vs the reference, paired per round, Holm-adjusted across the op's table, and what it
    # shows; None for the reference itself, and for a variant that shares no round with it.
    speed: Adjusted | None = None
    verdict: Verdict | None = None


def summarize_ops(records: Iterable[OpRecord]) -> list[VariantSummary]:
    """Per run × op × shape × variant: medians, and the paired per-round speed ratio against the
    op's reference.

    Runs are kept apart: samples from different machines are never paired.
    """
    by_case: dict[CaseKey, dict[str, dict[int, OpRecord]]] = {}
    for r in records:
        variants = by_case.setdefault((r.run_id, r.op, r.shape_label), {})
        variants.setdefault(r.variant, {})[r.round] = r
    summaries = [
        _summarize_variant(samples)
        for variants in by_case.values()
        for samples in variants.values()
    ]
    return _judge(summaries, {_key(s): _speed(by_case, s) for s in summaries})


def _summarize_variant(samples: dict[int, OpRecord]) -> VariantSummary:
    first = next(iter(samples.values()))
    seconds = summarize([r.seconds for r in samples.values()]).median
    return VariantSummary(
        first.run_id,
        first.op,
        first.shape_label,
        first.variant,
        first.reference,
        seconds,
        first.bytes / seconds / 1e9,
        None if first.flops is None else first.flops / seconds / 1e9,
        first.max_abs_err,
        rounds=len(samples),
        note=next((r.note for r in samples.values() if r.note), ""),
    )


def _speed(
    by_case: dict[CaseKey, dict[str, dict[int, OpRecord]]], s: VariantSummary
) -> PairedEstimate | None:
    """Speed (1 / time, so bigger is better) of a variant against the op's reference, paired per
    round."""
    if s.variant == s.reference:
        return None
    variants = by_case[(s.run_id, s.op, s.shape_label)]
    reference, samples = variants.get(s.reference, {}), variants[s.variant]
    rounds = sorted(set(reference) & set(samples))
    if not rounds:
        return None
    return paired_estimate(
        [1 / reference[i].seconds for i in rounds], [1 / samples[i].seconds for i in rounds]
    )


def _judge(
    summaries: list[VariantSummary], speeds: dict[tuple, PairedEstimate | None]
) -> list[VariantSummary]:
    """Holm across each run's op table (every shape and variant of one op), then each row's
    verdict."""
    judged = {}
    for table in dict.fromkeys((s.run_id, s.op) for s in summaries):
        rows = [s for s in summaries if (s.run_id, s.op) == table and speeds[_key(s)] is not None]
        for s, adjusted in zip(
            rows, adjust([speeds[_key(s)] for s in rows], alpha=ALPHA), strict=True
        ):
            verdict = inference_verdict(adjusted, margin_pct=DEFAULT_MARGIN_PCT, alpha=ALPHA)
            judged[_key(s)] = replace(s, speed=adjusted, verdict=verdict)
    return [judged.get(_key(s), s) for s in summaries]


def _key(s: VariantSummary) -> tuple:
    return s.run_id, s.op, s.shape_label, s.variant
