"""Where a step's time goes, and the Δ the ops that differ predict (Amdahl).

Inputs: a run's `share` records (fusebench.measure.ops.shares: each distinct switchable-op call of
one prefill and one decode step, timed on its own per implementation, with the calls per step) and
its timed trials.

- **Share of an op** in a step: Σ over its calls of calls per step × seconds per call, the call's
  median over rounds after subtracting that round's mx.eval fixed cost (which an isolated call pays
  and a call inside the model's graph does not). **Rest**: the measured step (the median timed
  trial's, from its prefill or gen tok/s) minus the ops' sum; it holds the matmuls (the LM head
  above all), the embeddings and whatever is not a switchable op.
- **Expected Δ** of a comparison A→B: per round r the time the ops that differ add, d_r = Σ
  calls × (t_B,r − t_A,r) (the eval cost cancels), its mean d and standard error over the rounds
  (the rounds are interleaved, so each is a paired sample). Against A's measured step T (the median
  timed trial), the expected tok/s Δ is T / (T + d) − 1, with a 95% interval from the delta method
  over d's and T's standard errors and the t quantile of the fewer degrees of freedom, widened by
  the in-model error: the interval's ends are taken at d × (1 ± IN_MODEL_ERROR), since an op does
  not cost inside the model exactly what it costs alone (below).

What it assumes: op times add up and do not overlap, and an op costs inside the model what it costs
alone at the same shapes. It breaks where a variant changes what runs around it (a fused kernel that
also saves a copy, or mx.compile fusing across the op's boundary) or where caches and memory behave
differently in the full graph; a measured Δ outside the expected interval says one of those
happened.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.cell import CURRENT_BUILD, ShareRecord, ShareTime, TrialRecord
from ..core.fileformat import Column, Record
from ..core.typed import from_mapping
from .amdahl import amdahl
from .study import Study

# Which step a throughput metric is made of.
PHASE_OF_METRIC = {"prefill": "prefill", "gen": "decode"}


@dataclass(frozen=True)
class OpShare:
    """An op's seconds in one step of one variant, and that as a percentage of the measured step."""

    op: str
    implementation: str
    calls: int
    seconds: float
    pct: float


@dataclass(frozen=True)
class StepShares:
    """Where one step (a prefill, or one decode step) of one cell and variant spends its time."""

    cell: str
    variant: str
    metric: str  # "prefill" or "gen"
    step_s: float  # measured: the median timed trial's
    ops: tuple[OpShare, ...]
    rest_s: float

    @property
    def rest_pct(self) -> float:
        return 100 * self.rest_s / self.step_s


@dataclass(frozen=True)
class ExpectedDelta:
    """The tok/s Δ that the ops differing between `baseline` and `new` account for, with its 95%
    interval."""

    cell: str
    baseline: str
    new: str
    metric: str
    delta_pct: float
    low_pct: float
    high_pct: float
    ops: tuple[str, ...]  # the ops whose implementation differs
    rounds: int


class ShareData:
    """A run's share samples and the step times of its trials, indexed for the questions below."""

    def __init__(self, share_records: Sequence[Record], trials: Sequence[Record]) -> None:
        # (cell, phase, op) -> (call, round, implementation) -> sample
        self._per_call: dict[tuple[str, str, str], dict[tuple[str, int, str], ShareTime]] = (
            defaultdict(dict)
        )
        self.reused_from: dict[str, str] = {}  # cell -> when the earlier run timed its samples
        for share in (from_mapping(ShareRecord, record) for record in share_records):
            sample = share.share
            if share.reused_from:
                self.reused_from[share.cell.cell] = share.reused_from
            key = (sample.call, sample.round, sample.variant)
            self._per_call[(share.cell.cell, sample.phase, sample.op)][key] = sample
        self.assignments: dict[str, dict[str, str]] = {}
        steps: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for record in (from_mapping(TrialRecord, record) for record in trials):
            cell, trial, measured = record.cell, record.trial, record.trial.measured
            if trial.warmup or record.build != CURRENT_BUILD or trial.ops is None:
                continue
            self.assignments.setdefault(trial.variant, dict(trial.ops))
            # A step's time from its rate, as the runner defines the rates: the batch's tokens per
            # second.
            key = (cell.cell, trial.variant)
            steps[(*key, "prefill")].append(cell.batch * cell.prompt_tokens / measured.prefill_tps)
            if measured.gen_tps:
                steps[(*key, "gen")].append(cell.batch / measured.gen_tps)
        self._step_samples = dict(steps)
        self._steps = {key: statistics.median(values) for key, values in steps.items()}

    @property
    def cells(self) -> list[str]:
        return list(dict.fromkeys(cell for cell, _, _ in self._per_call))

    def _samples(
        self, cell: str, phase: str, op: str, implementation: str
    ) -> dict[tuple[str, int], ShareTime]:
        found = self._per_call.get((cell, phase, op), {})
        return {(call, rnd): s for (call, rnd, impl), s in found.items() if impl == implementation}

    def op_share(
        self, cell: str, phase: str, op: str, implementation: str
    ) -> tuple[float, int] | None:
        """(seconds per step, calls per step) of one implementation of an op, or None where it was
        not timed."""
        samples = self._samples(cell, phase, op, implementation)
        if not samples:
            return None
        by_call: dict[str, list[ShareTime]] = defaultdict(list)
        for (call, _), sample in samples.items():
            by_call[call].append(sample)
        seconds = sum(
            found[0].calls * statistics.median(max(0.0, s.seconds - s.overhead_s) for s in found)
            for found in by_call.values()
        )
        return seconds, sum(found[0].calls for found in by_call.values())

    def step_shares(self, cell: str, variant: str, metric: str) -> StepShares | None:
        step_s = self._steps.get((cell, variant, metric))
        assignment = self.assignments.get(variant)
        if step_s is None or assignment is None:
            return None
        phase = PHASE_OF_METRIC[metric]
        ops = []
        for op, implementation in assignment.items():
            found = self.op_share(cell, phase, op, implementation)
            if found is not None:
                ops.append(OpShare(op, implementation, found[1], found[0], 100 * found[0] / step_s))
        if not ops:
            return None
        return StepShares(
            cell, variant, metric, step_s, tuple(ops), step_s - sum(o.seconds for o in ops)
        )

    def expected_delta(
        self, cell: str, baseline: str, new: str, metric: str
    ) -> ExpectedDelta | None:
        """None where a variant's ops or the baseline's step are unknown, or a differing op was not
        timed."""
        base_ops, new_ops = self.assignments.get(baseline), self.assignments.get(new)
        steps = self._step_samples.get((cell, baseline, metric))
        if base_ops is None or new_ops is None or not steps:
            return None
        phase = PHASE_OF_METRIC[metric]
        differing = tuple(op for op in base_ops if base_ops[op] != new_ops.get(op, base_ops[op]))
        added = self._added_per_round(cell, phase, differing, base_ops, new_ops)
        if added is None:
            return None
        found = amdahl(steps, added)
        return ExpectedDelta(
            cell,
            baseline,
            new,
            metric,
            found.delta_pct,
            found.low_pct,
            found.high_pct,
            differing,
            len(added),
        )

    def _added_per_round(
        self,
        cell: str,
        phase: str,
        ops: Sequence[str],
        base_ops: Mapping[str, str],
        new_ops: Mapping[str, str],
    ) -> list[float] | None:
        """Per round, the seconds per step that switching `ops` adds (negative: saves)."""
        per_round: dict[int, float] = defaultdict(float)
        rounds: set[int] | None = None
        for op in ops:
            before = self._samples(cell, phase, op, base_ops[op])
            after = self._samples(cell, phase, op, new_ops[op])
            if not before or set(before) != set(after):
                return None
            for (call, rnd), sample in before.items():
                per_round[rnd] += sample.calls * (after[(call, rnd)].seconds - sample.seconds)
            rounds = (
                {rnd for _, rnd in before}
                if rounds is None
                else rounds & {rnd for _, rnd in before}
            )
        if rounds is None:  # no op differs: an A/A comparison, nothing to expect
            return [0.0]
        return [per_round[rnd] for rnd in sorted(rounds)]


def shares_on(study: Study, machine: str) -> ShareData:
    """The share samples and trials of the runs made on one machine (cells of two machines never
    mix)."""
    runs = {run_id for run_id, run in study.runs.items() if run.machine == machine}

    def of(kind: str) -> list[Record]:
        return [r for r in study.results.of_kind(kind) if r.get(Column.RUN_ID) in runs]

    shares = of("share")
    return ShareData(shares, of("trial") if shares else [])


def disagrees(expected: ExpectedDelta, low_pct: float, high_pct: float) -> bool:
    """Whether the measured interval [low_pct, high_pct] and the expected one do not overlap: the
    ops that differ do not account for the measured Δ (or the other way round)."""
    return high_pct < expected.low_pct or low_pct > expected.high_pct
