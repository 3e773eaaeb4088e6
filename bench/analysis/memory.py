"""Peak memory per phase: what a variant holds at its highest in a prefill and in the decode
steps, the median over its timed trials (the workers record one peak a phase; runs before
2026-12-06 recorded one a trial and show none here). A fused kernel that writes no intermediates
shows as a lower peak in the phase that runs it."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..core.fileformat import Column

PEAK_COLUMNS = {"prefill": Column.PREFILL_PEAK_BYTES, "gen": Column.GEN_PEAK_BYTES}
KEYS = [Column.MACHINE, Column.WORKLOAD, Column.MODEL_KEY, Column.SIZE, Column.VARIANT]


@dataclass(frozen=True)
class PhasePeak:
    machine: str
    workload: str
    model_key: str
    size: str
    variant: str
    metric: str  # "prefill" or "gen"
    bytes: float  # the median over the timed trials
    trials: int


def phase_peaks(timed: pd.DataFrame) -> list[PhasePeak]:
    """Every cell × variant × metric whose trials recorded a phase's peak."""
    found = []
    for metric, column in PEAK_COLUMNS.items():
        if timed.empty or column not in timed:
            continue
        known = timed[timed[column].notna()]
        for key, group in known.groupby(KEYS, sort=False):
            machine, workload, model_key, size, variant = key
            found.append(
                PhasePeak(
                    machine,
                    workload,
                    model_key,
                    size,
                    variant,
                    metric,
                    float(group[column].median()),
                    len(group),
                )
            )
    return found


def peak_change(peaks: list[PhasePeak], base: PhasePeak, new_variant: str) -> float | None:
    """The new variant's peak against `base`'s, in the same cell and metric, as a fraction (−0.1:
    10% lower); None where the new variant recorded none."""
    other = next(
        (
            p
            for p in peaks
            if (p.machine, p.workload, p.model_key, p.metric, p.variant)
            == (base.machine, base.workload, base.model_key, base.metric, new_variant)
        ),
        None,
    )
    return None if other is None or not base.bytes else other.bytes / base.bytes - 1
