"""A cell's warm-up rounds: the kernels compiled and the correctness check carried before the
timed rounds, and the pace of a round once they are (which the rounds' count is fixed from:
measure.run.fixing)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ...core.cell import Trial
from ...core.experiment import Experiment
from ..job import CellShape


@dataclass(frozen=True)
class Clocks:
    """Trials' own prefill and generation seconds, summed."""

    prefill_s: float = 0.0
    gen_s: float = 0.0

    @classmethod
    def of(cls, trial: Trial) -> Clocks:
        return cls(trial.measured.prefill_s, trial.measured.gen_s or 0.0)

    def __add__(self, other: Clocks) -> Clocks:
        return Clocks(self.prefill_s + other.prefill_s, self.gen_s + other.gen_s)


class CellWarmups:
    """The warm-up rounds of a cell, run through `round` (the cell's round driver). A warm-up runs
    a round's prefill and the decode steps the correctness check reads (one at least, so the
    decode path is warm as well): a round's further steps warm nothing (`shape`)."""

    def __init__(
        self,
        exp: Experiment,
        timed_shape: CellShape,
        *,
        warmup_rounds: int,
        unchecked: Callable[[], set[str]],
        round: Callable[..., Clocks],
    ) -> None:
        self.exp, self.timed_shape, self.warmup_rounds = exp, timed_shape, warmup_rounds
        # the builds whose correctness this cell has not recorded yet (all, but on --resume)
        self.unchecked, self.round = unchecked, round
        checked = max(2, exp.correctness.tokens)
        self.shape = replace(timed_shape, gen_tokens=min(timed_shape.gen_tokens, checked))

    def run(self, fresh: bool = False, settle: bool = False) -> tuple[float, float | None, Clocks]:
        """The experiment's warmup rounds, each as many rounds as the schedule says (a duet of
        variants: two, so each worker has run every variant before the timed rounds). The first
        (the first two in such a duet) carry the correctness check, so a cell warms up at least
        once; a fresh pair's warm-ups check nothing. `settle`: as many again, whose seconds stand
        for the first's (a machine's first run compiles its kernels there, once: the plan's pace
        must come from a round that does not). Returns their seconds and the last one's: the pace
        of a round once every variant has compiled, and its trials' clocks, both with the decode
        steps a warm-up leaves out added at its own decode pace (`_as_round`)."""
        checking = self.warmup_rounds
        unchecked = set() if fresh else self.unchecked()
        warmups = max(self.exp.warmup, 1 if unchecked else 0)
        began = time.monotonic()
        last, clocks, compiled_at = None, Clocks(), began
        for w in range(warmups * checking + (checking if settle and warmups else 0)):
            if w == checking and settle:
                compiled_at = time.monotonic()
            started = time.monotonic()
            check = unchecked if w < checking else set()
            # a resumed cell without its check runs its check rounds again: the fresh worker
            # holds none of the logits its trials had
            clocks = self.round(w, warmup=True, fresh=fresh or bool(check), check=check)
            last = time.monotonic() - started
        if last is None:
            return time.monotonic() - compiled_at, None, clocks
        round_s, clocks = self._as_round(last, clocks)
        return time.monotonic() - compiled_at, round_s, clocks

    def _as_round(self, warmup_s: float, clocks: Clocks) -> tuple[float, Clocks]:
        """A warm-up round's time and clocks as a timed round's: its decode steps scaled to the
        round's count."""
        steps, warm_steps = self.timed_shape.gen_tokens - 1, self.shape.gen_tokens - 1
        if not warm_steps or steps == warm_steps:
            return warmup_s, clocks
        extra_s = clocks.gen_s * (steps / warm_steps - 1)
        return warmup_s + extra_s, Clocks(clocks.prefill_s, clocks.gen_s + extra_s)
