"""The Amdahl arithmetic of an expected Δ: what adding (or saving) seconds in a step does to its
tok/s, with an interval over both the added time's and the step's spread and the in-model error.
The op shares (analysis.shares) and the fusible chains (analysis.fusions) both use it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.special import stdtrit

# How far an op's time inside the model may lie from its time alone, as a fraction of it. Calibrated
# on the one op big enough to measure inside a step here, the tenfold softcap of run 20261130-234739
# (E2B, 2 layers, 1 OpenBLAS thread): it added 22.9 ms per decode step measured end to end (30
# paired rounds) against 17.4 ms alone (+32%), and 17.0 ms per prefill against 17.6 ms (-3%). Why
# decode differs is not known; page faults, cache flushes and pipelining were ruled out. A later run
# (README) checks the calibration.
IN_MODEL_ERROR = 0.35


@dataclass(frozen=True)
class Amdahl:
    """The tok/s Δ that adding `extra` seconds to a step predicts, with its 95% interval (%)."""

    delta_pct: float
    low_pct: float
    high_pct: float


def amdahl(steps: Sequence[float], added: Sequence[float]) -> Amdahl:
    """A step of measured times `steps` (its trials) that `added` seconds more per round (paired
    rounds; negative: saved) would take: Δ = T / (T + d) − 1 at the steps' median T and the mean d.
    Its SE by the delta method over d's and T's (the step's trials are independent of the rounds),
    with the t quantile of the fewer degrees of freedom: conservative; its ends widened by the
    in-model error (an op does not cost inside the model exactly what it costs alone)."""
    step_s, extra_s = statistics.median(steps), statistics.fmean(added)
    se_extra, se_step = _standard_error(added), _standard_error(steps)
    scale = 100 / (step_s + extra_s) ** 2
    se = scale * math.hypot(step_s * se_extra, extra_s * se_step)
    dof = min(len(added), len(steps)) - 1
    half = float(stdtrit(dof, 0.975)) * se if dof > 0 else 0.0

    def tps_delta(extra: float) -> float:
        return 100 * (step_s / (step_s + extra) - 1)

    # More added time, a lower Δ: the low end takes the time at its most inside the model.
    model_error = IN_MODEL_ERROR * abs(extra_s)
    return Amdahl(
        tps_delta(extra_s),
        tps_delta(extra_s + model_error) - half,
        tps_delta(extra_s - model_error) + half,
    )


def _standard_error(values: Sequence[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
