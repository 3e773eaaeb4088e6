"""The statistics of `fusebench ops` records: per run × op × shape × variant, the median time, the achieved rates,
and the paired per-round speed ratio against the op's reference variant."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .stats import RatioCI, bootstrap_ratio_ci, paired_ratios, summarize, verdict


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
    speed: RatioCI | None  # speed ratio vs the reference, paired per round; None for the reference itself

    @property
    def verdict(self) -> str:
        if self.variant == self.reference:
            return "reference"
        return "n/a" if self.speed is None else verdict(self.speed)


def summarize_ops(records: Iterable[dict[str, Any]]) -> list[VariantSummary]:
    """Per run × op × shape × variant: medians, and the paired per-round speed ratio against the op's reference.

    Runs are kept apart: samples from different machines are never paired.
    """
    by_case: dict[tuple, dict[str, dict[int, dict[str, Any]]]] = {}
    for r in records:
        if r.get("kind") == "op":
            variants = by_case.setdefault((r.get("run_id"), r["op"], r["shape_label"]), {})
            variants.setdefault(r["variant"], {})[r["round"]] = r
    return [_summarize_variant(samples, variants) for variants in by_case.values() for samples in variants.values()]


def _summarize_variant(samples: dict[int, dict[str, Any]],
                       variants: dict[str, dict[int, dict[str, Any]]]) -> VariantSummary:
    first = next(iter(samples.values()))
    seconds = summarize([r["seconds"] for r in samples.values()]).median
    is_reference = first["variant"] == first["reference"]
    return VariantSummary(
        first.get("run_id"), first["op"], first["shape_label"], first["variant"], first["reference"], seconds,
        first["bytes"] / seconds / 1e9, None if first["flops"] is None else first["flops"] / seconds / 1e9,
        first["max_abs_err"], None if is_reference else _speed_ci(variants.get(first["reference"], {}), samples),
    )


def _speed_ci(reference: dict[int, dict[str, Any]], samples: dict[int, dict[str, Any]]) -> RatioCI | None:
    rounds = sorted(set(reference) & set(samples))
    if not rounds:
        return None
    # Speeds, not times: ratios are bigger-is-better, so > 1 means the variant is faster.
    speeds = [[1 / side[i]["seconds"] for i in rounds] for side in (reference, samples)]
    return bootstrap_ratio_ci(paired_ratios(*speeds))
