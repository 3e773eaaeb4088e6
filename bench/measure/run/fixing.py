"""How many timed rounds a cell runs where its rule fixes them before the first (`trials:
budget`, `trials: plan`), from the pace its warm-ups showed; and, for the plans after it, what
the cell cost (`RoundFixing.measure`). A cell's run (measure.run.cellrun) asks it once its
warm-ups are done, and again once its op shares are."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...core.experiment import Cell, Trials
from .cellstop import CellStop
from .planning import CellMeasure, CellSetup, now_iso, sds_of

if TYPE_CHECKING:
    from .cellcontext import CellContext
    from .cellshares import CellShares
    from .warmups import Clocks


class RoundFixing:
    """A cell's rounds fixed from its warm-ups, and its costs kept for the planner: its load (in
    a model's first cell), its setup (kernel facts and warm-ups), its fresh worker pairs."""

    def __init__(
        self,
        context: CellContext,
        cell: Cell,
        cell_stop: CellStop,
        deadline: float,
        say: Callable[[str], None],
    ) -> None:
        self.context, self.exp, self.cell, self.cell_stop = context, context.exp, cell, cell_stop
        self.deadline, self.say = deadline, say
        self.load_paid, self.setup_s, self.fresh_s = 0.0, 0.0, 0.0
        self.blind = False  # fixed by a plan that knew no spread here: fixed again after them

    @property
    def _label(self) -> str:
        return f"{self.cell.model.label} {self.cell.workload.label}"

    def fix(
        self,
        *,
        load_s: float,
        setup_s: float,
        round_s: float,
        clocks: Clocks,
        fresh_pair_s: float,
        counted: int = 0,
    ) -> None:
        """With trials: budget or plan, the rounds fixed now, before the next: from the last
        warm-up round's pace (`round_s`, its trials' `clocks`) and a fresh pair's cost (0: none).
        `load_s` is the cell's load where its model's first, `setup_s` its kernel facts and
        warm-ups; `counted`, timed rounds already run (a weighing's kept ones): a plan counts them
        among the rounds the cell needs, a budget adds what the time left after them holds."""
        if self.exp.trials is Trials.PLAN:
            self.load_paid, self.setup_s = load_s, setup_s
            self._by_plan(round_s, clocks, fresh_pair_s)
        elif self.exp.trials is Trials.BUDGET:
            self._by_budget(round_s, fresh_pair_s)
        planned = self.cell_stop.planned
        if counted and planned is not None:
            more = planned if self.exp.trials is Trials.BUDGET else 0
            self.cell_stop.planned = min(self.exp.rounds, max(planned, counted + more))
            self.say(
                f"{self._label}: {self.cell_stop.planned} timed rounds in all, the {counted} the "
                "schedules' weighing kept among them"
            )

    def _by_budget(self, round_s: float, fresh_pair_s: float) -> None:
        """As many rounds as the cell's allowance holds at the warm-up's pace."""
        rounds = self.cell_stop.fix_rounds()
        every = self.cell_stop.rounds_per_pair
        chosen = (
            ": the count whose interval is narrowest across the pair offsets machines show"
            if self.cell_stop.choose_pairs
            else ""
        )
        pairs = (
            f", a fresh worker pair every {every} at {fresh_pair_s:.1f} s{chosen}"
            if fresh_pair_s and every
            else ""
        )
        self.say(
            f"{self._label}: {rounds} timed rounds, fixed from the budget (a warm-up round took "
            f"{round_s:.1f} s{pairs}; {self.cell_stop.time_left_s():.0f} s of this cell's "
            "allowance left)"
        )
        spreads = self.context.spreads
        measured = spreads.read(self.cell) if spreads is not None else None
        forecast = self.cell_stop.limit_forecast(measured.rows if measured else None)
        if forecast is None or spreads is None:
            return
        if forecast.in_reach is False:  # a gate that cannot decide its limit: even with --quiet
            self.context.console.print(
                f"[yellow]warning[/]: {self._label}: {forecast.text}", highlight=False
            )
        else:
            self.say(f"{self._label}: {forecast.text}")

    def _by_plan(self, round_s: float, clocks: Clocks, fresh_pair_s: float) -> None:
        """The rounds the plan of what is left gives the cell (a fresh pair's cost spread over the
        rounds it serves)."""
        planner = self.context.planner
        assert planner is not None
        every = self.cell_stop.rounds_per_pair
        pace = round_s + (fresh_pair_s / every if fresh_pair_s and every else 0.0)
        planned_before = planner.plan is not None
        self.blind = not planner.spread_known()
        setup = CellSetup(self.load_paid, self.setup_s, pace, clocks.prefill_s, clocks.gen_s)
        rounds, allowance = planner.fix(self.cell, setup, self.context.time.time_left_s())
        self.cell_stop.planned = rounds
        self.cell_stop.limit_to(min(allowance, self.deadline - time.monotonic()))
        spent_s = self.context.time.spent_s()
        if planner.plan is not None and (not planned_before or planner.moved(spent_s)):
            self.say(planner.line(planner.plan, spent_s))
        said = (
            f"{rounds} timed rounds, fixed by the plan (a warm-up round took {round_s:.1f} s)"
            if rounds
            else "no timed rounds: " + planner.needs(self.cell.key)
        )
        self.say(f"{self._label}: {said}")

    def fixed_again(self, rounds: int) -> bool:
        """Whether a cell fixed while no spread was known here (a machine's first run) has more
        rounds now that its `rounds` are done: fixed again by the plan on the spreads they showed,
        never their Δ (planning.RunPlanner.fix_again)."""
        planner, sds = self.context.planner, sds_of(self.cell_stop.row_sds())
        if not self.blind or planner is None or not sds:
            return False
        self.blind = False
        spent_s = sum(self.cell_stop.round_times)
        left_s = self.context.time.time_left_s()
        total, allowance = planner.fix_again(self.cell, sds, spent_s / rounds, left_s + spent_s)
        spread = f"{100 * statistics.median(sds.values()):.1f}%"
        if total <= rounds:
            self.say(f"{self._label}: its rows' spread ({spread} a round) asks no more rounds")
            return False
        self.cell_stop.planned = total
        self.cell_stop.limit_to(min(allowance - spent_s, self.deadline - time.monotonic()))
        if planner.plan is not None and planner.moved(self.context.time.spent_s()):
            self.say(planner.line(planner.plan, self.context.time.spent_s()))
        self.say(
            f"{self._label}: {total} timed rounds, fixed by the plan again on the spread its first "
            f"{rounds} showed ({spread} a round, its rows' median)"
        )
        return True

    def measure(self, after_s: float, timed_clocks: Clocks, shares: CellShares) -> CellMeasure:
        """What this cell cost and how its rows scattered: the plans after it start from it."""
        planner = self.context.planner
        assert planner is not None
        work = planner.work[self.cell.key]
        times = self.cell_stop.round_times
        return CellMeasure(
            load_s=self.load_paid,
            warmup_s=self.setup_s,
            warmups=work.warmups,
            # a fresh pair's cost spread over the rounds, as the plan spends it
            round_s=(sum(times) + self.fresh_s) / len(times) if times else 0.0,
            after_s=after_s,
            weight_bytes=work.weight_bytes,
            round_flops=work.round_flops,
            round_bytes=work.round_bytes,
            prefill_bytes=work.prefill_bytes,
            prefill_s=timed_clocks.prefill_s / len(times) if times else 0.0,
            gen_s=timed_clocks.gen_s / len(times) if times else 0.0,
            sds=sds_of(self.cell_stop.row_sds()),
            measured_at=now_iso(),
            shares_s=shares.seconds,
            shares=shares.timed,
        )
