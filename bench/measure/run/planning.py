"""`trials: plan` in a run (analysis.planner): what each cell will cost and how its rows scatter,
measured on this machine, and the plan, made when the run starts and again as each cell starts.

Costs and spreads
    A cell an earlier run measured on this machine (the same cell, variants and builds, at the same
    BLAS threads and schedule) is planned at what that run measured: starting its workers and
    loading its weights, its warm-ups (which carry the correctness check), a timed round, what
    followed its rounds (op shares, stopping its workers), and each row's per-round spread, pooled
    over the cell's last runs (POOLED_RUNS: one run's spread is a poor forecast of the next's).
    They are cached per machine (`plan-v1-*.json`, written as each cell ends), so the second run
    plans from the start. The cache keeps the op-share samples too: a run of the same code
    (cellshares.shares_code: the ops' and models' files, not the commit) writes them instead of
    timing the ops again, and plans their seconds as rounds.
    Any other cell is scaled from the cells measured (scaling.Scale): its round by its roofline work
    at the paces their rounds showed (the generation's seconds a byte; the prefill's a FLOP, once
    the bytes it reads at that speed are taken out), its load by its weight bytes, its warm-ups and
    shares by its round. Every row is planned at one spread: the median of the rows this run has
    measured, before any the median of the pools. The noise moves with the machine's hour more than
    with the row (`_planned_sds`): a size skipped after one noisy run is planned at the noise now,
    not at its own stale pool. With nothing measured yet (a machine's first run), the first cell is
    set up first and the plan made from its pace; with no spread measured yet, it gets the fewest
    rounds a plan gives (MIN_PLANNED_ROUNDS), and once they are done its rounds are fixed again on
    the spreads they showed (`fix_again`: two stages, the second's count from the first's spread
    alone; its fixed-n intervals' coverage: benchmarks/two_stage_coverage.py).

The time the table needs
    The plan stops adding rounds once every row is expected decided (analysis.planner): the
    experiment's budget_s is a cap, and the plan's seconds, with what the run has spent, the time
    the run says before its first timed round ("about 6 min for the 16 rows here"). A cell past
    the cap gets none and says what it would need.

When the plan is made
    Before each model's cells, for the cells left: a cell the plan gives no rounds is never
    loaded, and its skip record says what it would need (unless its costs are scaled estimates
    and no cell gets any rounds: estimates too far off to skip on; its own warm-up decides). Then at
    each cell's start, once its warm-ups have measured its own pace: its rounds are fixed,
    planned with the time left and the cells after it (their setup still to pay, this cell's
    paid), for good but on a first run (above). No Δ enters: only paces and spreads.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...analysis.planner import CellCost, Plan, plan_rounds, rounds_for, widest_spread
from ...analysis.stopping import Goal
from ...core.cell import ShareTime
from ...core.experiment import MIN_PLANNED_ROUNDS, Cell, Experiment
from ...core.typed import from_mapping, to_mapping
from ...present.format import format_duration
from .scaling import PlanWork, Scale

CACHE_VERSION = 1
_MOST_BUDGET_S = 3600.0  # the largest budget a "would need" line looks at
# A plan's spreads pool a cell's last runs here: on the Zen 4 the last run alone forecast a row's
# next spread within e^0.55 on average (the main job's 14 runs), pooled within e^0.46; the Zen 3's
# duet gate runs did 5% worse pooled (results/spread-prediction): the noise moves between runs.
POOLED_RUNS = 5
MOVED = 0.15  # the share by which a plan's end may move from the time said before it is said again


@dataclass(frozen=True)
class CachedShares:
    """A cell's op-share samples as a run timed them here: a later run of the same code writes
    them instead of timing the ops again, and gives their seconds to rounds."""

    samples: tuple[ShareTime, ...]
    code: str  # what they depend on beyond the machine and threads (cellshares.shares_code)
    measured_at: str

    @property
    def rounds(self) -> int:
        return len({sample.round for sample in self.samples})


@dataclass(frozen=True)
class CellMeasure:
    """One cell as a run measured it here: what a later run's plan starts from."""

    load_s: float  # its workers started and weights loaded (0 for a model's second workload)
    warmup_s: float  # kernel facts and warm-ups
    warmups: int  # the warm-up rounds those were
    round_s: float  # a timed round, the mean
    after_s: float  # depth rounds and stopping the workers, after the rounds
    weight_bytes: int
    round_flops: float  # a round's prefill FLOPs and generation bytes (the roofline's work)
    round_bytes: float
    sds: dict[str, float] = field(default_factory=dict)  # row -> per-round log-ratio SD
    measured_at: str = ""
    # row -> the spread a plan uses: `sds` pooled with the cell's earlier runs here (pool_spreads)
    pooled_sds: dict[str, float] = field(default_factory=dict)
    runs: int = 1  # the runs pooled_sds stands for, at most POOLED_RUNS
    shares_s: float = 0.0  # the op-share rounds, when last timed (caches before it: in after_s)
    shares: CachedShares | None = None
    # the bytes a round's prefills read at memory speed (PlanWork.prefill_bytes), and its trials'
    # own prefill and generation seconds: how the round splits between FLOPs and bytes (0 in a
    # cache from before them: the round counts as all prefill)
    prefill_bytes: float = 0.0
    prefill_s: float = 0.0
    gen_s: float = 0.0

    def paces(self) -> tuple[float | None, float]:
        """Seconds a generation byte (None where the round generates nothing) and a prefill FLOP,
        the prefill's reads taken out at the generation's pace (`per_byte`)."""
        prefill_s, gen_s = (self.prefill_s, self.gen_s) if self.prefill_s else (self.round_s, 0.0)
        per_byte = gen_s / self.round_bytes if gen_s and self.round_bytes else None
        compute_s = max(0.0, prefill_s - (per_byte or 0.0) * self.prefill_bytes)
        return per_byte, compute_s / max(1.0, self.round_flops)

    @property
    def beyond(self) -> float:
        """A round's seconds per second of its trials' own clocks (1 where they are not known)."""
        clocks = self.prefill_s + self.gen_s
        return self.round_s / clocks if self.prefill_s and clocks else 1.0

    @property
    def planning_sds(self) -> dict[str, float]:
        return self.pooled_sds or self.sds


def pool_spreads(
    earlier: Mapping[str, float], runs: int, latest: Mapping[str, float]
) -> dict[str, float]:
    """Each row's spread over its last runs: the root mean square of `earlier` (standing for
    `runs` runs, counted as at most POOLED_RUNS − 1) and `latest` as one more run; a row without
    an earlier spread takes its latest."""
    weight = min(runs, POOLED_RUNS - 1)
    return {
        row: math.sqrt((weight * earlier[row] ** 2 + sd**2) / (weight + 1))
        if row in earlier
        else sd
        for row, sd in latest.items()
    }


@dataclass(frozen=True)
class CellSetup:
    """A cell's setup as its start measured it: its load (in a model's first cell), its warm-ups,
    and the last warm-up round (every variant compiled): its time and its trials' own prefill and
    generation seconds."""

    load_s: float
    warmup_s: float
    round_s: float
    prefill_s: float
    gen_s: float


def cache_signature(cell: Cell, exp: Experiment, builds: Sequence[str]) -> str:
    """The cell, its variants and comparisons, and how many builds: what its costs depend on."""
    what = json.dumps(
        [exp.variants, [(c.baseline, c.new) for c in exp.comparisons], len(builds)],
        sort_keys=True,
    )
    return f"{cell.key}|{hashlib.sha256(what.encode()).hexdigest()[:12]}"


class RunPlanner:
    """The plan of one run with `trials: plan`: its cells' costs (measured, cached or scaled) and
    each cell's rounds."""

    def __init__(
        self,
        exp: Experiment,
        cells: Sequence[Cell],
        builds: Sequence[str],
        cache: Path,
        *,
        work: Callable[[Cell], PlanWork],
        rows: int,
        code: str = "",
    ) -> None:
        self.exp, self.cells, self.builds, self.cache = exp, list(cells), list(builds), cache
        self.code = code  # cellshares.shares_code: "" never reuses an earlier run's op shares
        self.work = {cell.key: work(cell) for cell in cells}
        self.rows = rows
        self.goal = Goal(exp.margin_pct, limit_pct=exp.margin_pct if len(builds) > 1 else None)
        self.known = self._read_cache()  # signature -> CellMeasure
        self.setup_paid: dict[str, float] = {}  # cell -> seconds its setup took in this run
        self.fixed: dict[str, int] = {}  # cell -> rounds fixed at its start
        self.plan: Plan | None = None
        self.said_s: float | None = None  # the run's time, as the first plan line said it

    def follow(self, cache: Path, work: Callable[[Cell], PlanWork]) -> None:
        """From now on, the plan of another schedule (the one a run's weighing kept): its cached
        costs and spreads and its rounds' work; the plan is made again at the next cell."""
        self.cache, self.work = cache, {cell.key: work(cell) for cell in self.cells}
        self.known, self.plan = self._read_cache(), None

    # --- what the cells cost ---------------------------------------------------------------------

    def _signature(self, cell: Cell) -> str:
        return cache_signature(cell, self.exp, self.builds)

    def _read_cache(self) -> dict[str, CellMeasure]:
        try:
            data = json.loads(self.cache.read_text())
            return {key: from_mapping(CellMeasure, value) for key, value in data.items()}
        except (OSError, ValueError, TypeError, KeyError):
            return {}

    def _scale(self) -> Scale | None:
        return Scale.of(self._mine())

    def measured_any(self) -> bool:
        """Whether a cell of this run is measured here (the plan has a pace to scale from)."""
        return bool(self._mine())

    def _spread(self) -> float | None:
        """The median spread of every row measured here, each pooled over its runs (None before
        any)."""
        sds = [sd for m in self._mine() for sd in m.planning_sds.values() if sd > 0]
        return statistics.median(sds) if sds else None

    def _mine(self) -> list[CellMeasure]:
        """The measures of this run's cells: another experiment's cells (a tiny model's rounds are
        all overhead) would scale these badly."""
        signatures = (self._signature(cell) for cell in self.cells)
        return [self.known[s] for s in signatures if s in self.known]

    def source(self) -> str:
        """Where the plan's costs came from, in words."""
        mine = sum(self._signature(c) in self.known for c in self.cells)
        if mine == len(self.cells):
            dates = sorted({self.known[self._signature(c)].measured_at[:10] for c in self.cells})
            when = ", ".join(d for d in dates if d)
            return "costs and spreads measured here" + (f" ({when})" if when else "")
        spread = (
            "spreads of the measured rows"
            if any(m.sds for m in self._mine())
            else f"no spread measured yet: {MIN_PLANNED_ROUNDS} rounds a size, then the first "
            "size and those after it planned again on the first's spreads"
        )
        return (
            f"{mine} of {len(self.cells)} cells measured here, the others scaled by their "
            f"roofline work; {spread}"
        )

    def _cost(self, cell: Cell, scale: Scale, sd_scale: float = 1.0) -> CellCost:
        work = self.work[cell.key]
        label = (
            cell.model.label
            if len(self.exp.workloads) == 1
            else f"{cell.model.label} {cell.workload.label}"
        )
        known = self.known.get(self._signature(cell))
        if known is not None:
            round_s = known.round_s
            after_s = known.after_s + self._shares_s(cell, known)
            setup_s = known.load_s + known.warmup_s
        else:
            round_s = scale.round_s(work)
            first = cell is next(c for c in self.cells if c.model.key == cell.model.key)
            load_s = scale.load_per_byte * work.weight_bytes if first else 0.0
            setup_s = load_s + scale.warm * work.warmups * round_s
            after_s = scale.after * round_s
        sds = self._planned_sds(work.rows)
        if cell.key in self.setup_paid:
            setup_s = 0.0
        return CellCost(
            cell.key, label, setup_s, round_s, after_s, tuple(sd_scale * sd for sd in sds)
        )

    def _planned_sds(self, rows: int) -> tuple[float, ...]:
        """The spreads a cell's rows are planned at: the median of the rows this run measured,
        else of every measured row's pool here; () where none is known. The noise moves with the
        machine's hour more than with the row: on the Xeon's and Zen 4's main-job series the run's
        rows forecast a later size's within x1.37-1.50, all pools' median any row's within x1.54,
        a row's own pool within x1.61-1.74 (results/spread-prediction)."""
        spread = self.run_spread() or self._spread()
        return (spread,) * rows if spread else ()

    def _shares_s(self, cell: Cell, known: CellMeasure) -> float:
        """The op-share rounds this run will time for a measured cell: none where an earlier run's
        are reusable, else what they took when last timed, or their share of a round in the cells
        that timed theirs."""
        if not self.exp.shares or self.reusable_shares(cell):
            return 0.0
        timed = [m.shares_s / m.round_s for m in self._mine() if m.shares_s and m.round_s]
        scaled = statistics.median(timed) * known.round_s if timed else 0.0
        return known.shares_s or scaled

    def reusable_shares(self, cell: Cell) -> CachedShares | None:
        """The op shares an earlier run timed here for this cell, where this run's code is that
        run's and they hold the rounds the experiment asks: those rounds."""
        known = self.known.get(self._signature(cell))
        shares = known.shares if known else None
        if not self.code or shares is None or shares.code != self.code:
            return None
        if not self.exp.shares or shares.rounds < self.exp.shares:
            return None
        asked = tuple(sample for sample in shares.samples if sample.round < self.exp.shares)
        return replace(shares, samples=asked)

    # --- the plan ------------------------------------------------------------------------------

    def make(self, left_s: float, sd_scale: float = 1.0) -> Plan | None:
        """The plan of the cells not yet fixed, with `left_s` seconds left, its rows' spreads
        times `sd_scale`; None with nothing measured to plan from."""
        scale = self._scale()
        if scale is None:
            return None
        costs = [self._cost(c, scale, sd_scale) for c in self.cells if c.key not in self.fixed]
        self.plan = plan_rounds(
            costs,
            left_s,
            rows=self.rows,
            goal=self.goal,
            max_rounds=self.exp.rounds,
            until_decided=True,
        )
        return self.plan

    def skip_reason(self, cell: Cell, left_s: float) -> str | None:
        """Why the plan of what is left gives `cell` no rounds (so it is not loaded), or None."""
        if cell.key in self.fixed or self.make(left_s) is None:
            return None
        assert self.plan is not None
        if self.plan.rounds(cell.key):
            return None
        measured = self._signature(cell) in self.known
        if (
            not measured
            and not any(self.fixed.values())
            and not any(c.rounds for c in self.plan.cells)
        ):
            return None  # no cell gets rounds on estimates alone: let a measurement decide
        return "the plan gives it no rounds: " + self.needs(cell.key)

    def needs(self, cell: str) -> str:
        """What a cell given no rounds would need, in words."""
        assert self.plan is not None
        cost = next(c.cost for c in self.plan.cells if c.cost.cell == cell)
        alpha = 1.0 - self.plan.level
        rounds = [rounds_for(sd, alpha, self.goal) for sd in cost.sds] or [None]
        if None in rounds:
            return (
                f"{MIN_PLANNED_ROUNDS} rounds at about {cost.round_s:.1f} s "
                f"({format_duration(cost.cost_s(MIN_PLANNED_ROUNDS))} with its setup) would pass "
                "the budget; its rows' spread is not known here yet"
            )
        n = max(MIN_PLANNED_ROUNDS, *(r for r in rounds if r is not None))
        return (
            f"its rows would need about {n} rounds at {cost.round_s:.1f} s "
            f"({format_duration(cost.cost_s(n))} with its setup)"
        )

    def fix(self, cell: Cell, setup: CellSetup, left_s: float) -> tuple[int, float]:
        """At the cell's start, its warm-ups done: its rounds, fixed for good, and the seconds it
        may take (what is left less the later cells' plan). Its setup, measured now, and its pace
        (an earlier run's mean round, else its warm-up's) also scale the cells not measured yet."""
        work = self.work[cell.key]
        signature = self._signature(cell)
        costs = {
            "load_s": setup.load_s,
            "warmup_s": setup.warmup_s,
            "warmups": work.warmups,
            "weight_bytes": work.weight_bytes,
            "round_flops": work.round_flops,
            "round_bytes": work.round_bytes,
            "prefill_bytes": work.prefill_bytes,
        }
        earlier = self.known.get(signature)
        self.known[signature] = (
            replace(earlier, **costs)
            if earlier
            else CellMeasure(
                round_s=setup.round_s,
                after_s=0.0,
                prefill_s=setup.prefill_s,
                gen_s=setup.gen_s,
                **costs,
            )
        )
        self.setup_paid[cell.key] = setup.load_s + setup.warmup_s
        return self._fix_now(cell, left_s)

    def fix_again(
        self, cell: Cell, sds: Mapping[str, float], round_s: float, left_s: float
    ) -> tuple[int, float]:
        """A cell fixed while no spread was known here, its rounds done: its rounds fixed again on
        the `sds` they showed, at their mean `round_s`, with `left_s` counting those rounds as
        still to spend (the plan counts them). A cell never loses rounds it ran."""
        signature = self._signature(cell)
        before = self.known[signature]
        self.known[signature] = replace(before, sds=dict(sds), round_s=round_s)
        done = self.fixed.pop(cell.key)
        rounds, allowance = self._fix_now(cell, left_s)
        self.known[signature] = before  # `measured` keeps the cell's spreads once it ends
        self.fixed[cell.key] = max(done, rounds)
        return self.fixed[cell.key], allowance

    def spread_known(self) -> bool:
        """Whether a row's spread is known here, to plan at (not on a machine's first run)."""
        return bool(self._planned_sds(1))

    def _fix_now(self, cell: Cell, left_s: float) -> tuple[int, float]:
        plan = self.make(left_s)
        assert plan is not None  # this cell is measured now
        rounds = plan.rounds(cell.key)
        self.fixed[cell.key] = rounds
        return rounds, left_s - plan.after(cell.key)

    def measured(self, cell: Cell, measure: CellMeasure) -> None:
        """A cell's measured costs and spreads: later plans use them, this run's and later runs',
        its spreads pooled with its earlier runs'."""
        signature = self._signature(cell)
        earlier = self.known.get(signature)
        if earlier is not None and earlier.planning_sds:
            pooled = pool_spreads(earlier.planning_sds, earlier.runs, measure.sds)
            runs = min(earlier.runs, POOLED_RUNS - 1) + 1
            measure = replace(measure, pooled_sds=pooled, runs=runs)
        if earlier is not None and measure.shares is None:
            # a run that timed no op shares (its rows undecided) keeps the earlier run's
            measure = replace(measure, shares=earlier.shares, shares_s=earlier.shares_s)
        self.known[signature] = measure
        data = {key: to_mapping(value) for key, value in self.known.items()}
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        partial = self.cache.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(data, indent=1))
        partial.replace(self.cache)  # atomic: a reader sees the old file or the new

    # --- what the first screen says ------------------------------------------------------------

    @property
    def total_rows(self) -> int:
        return sum(work.rows for work in self.work.values())

    def moved(self, spent_s: float) -> bool:
        """Whether the plan of what is left now puts the run's end MOVED away from what the run
        said (a first run's sizes measured one by one): then it says the plan again."""
        if self.plan is None or self.said_s is None:
            return False
        return abs((spent_s + self.plan.seconds) / self.said_s - 1.0) > MOVED

    def line(self, plan: Plan, spent_s: float) -> str:
        """The plan in one line: the run's time (`spent_s` so far and the plan's), each cell's
        rounds, the rows it expects to decide, and what the cells given none would need. The first
        line's time is what the run said (`said_s`); a later one says it is the plan again."""
        parts = [
            f"{_short(c.cost.label)} {c.rounds} rounds ({c.cost.round_s:.1f} s each)"
            if c.rounds
            else f"{_short(c.cost.label)} none"
            for c in plan.cells
        ]
        total_s = spent_s + plan.seconds
        if self.said_s is None:
            self.said_s = total_s
        given = {c.cost.cell for c in plan.cells if c.rounds} | {
            k for k, n in self.fixed.items() if n
        }
        planned = sum(self.work[cell].rows for cell in given)
        of = "" if planned == self.total_rows else f"{planned} of "
        left = sum(self.work[c.cost.cell].rows for c in plan.cells)
        rows = f"{self.total_rows} rows" if left == self.total_rows else f"the {left} rows left"
        spreads_known = any(c.cost.sds for c in plan.cells)
        widest = widest_spread(MIN_PLANNED_ROUNDS, 1.0 - plan.level, self.goal)
        expected = (
            f"expected to decide {plan.expected:.1f} of {rows}"
            if spreads_known
            else f"{MIN_PLANNED_ROUNDS} rounds decide a row that scatters up to "
            f"{100 * widest:.1f}% a round; a noisier size gets more"
        )
        again = "" if self.said_s == total_s else f" (said: {_minutes(self.said_s)})"
        said = f"about {_minutes(total_s)}" if spreads_known else f"{_minutes(total_s)} or more"
        head = (
            f"plan: {said}{again} for {of}the {self.total_rows} rows here, at "
            f"most {format_duration(self.exp.budget_s or 0.0)} (budget_s) ({self.source()}): "
            f"{', '.join(parts)}; {expected}"
        )
        dropped = [c for c in plan.cells if not c.rounds]
        if not dropped:
            return head
        wider = self.budget_to_decide(plan, every_cell=True)
        more = f"; `--budget {wider}` plans every size" if wider else ""
        needs = "; ".join(f"{_short(c.cost.label)}: {self.needs(c.cost.cell)}" for c in dropped)
        return f"{head}; {needs}{more}"

    def budget_to_decide(self, plan: Plan, *, every_cell: bool = False) -> str | None:
        """The smallest whole-minute budget (from the run's start) whose plan gives every cell
        rounds (`every_cell`) or expects every row decided but half a row, at the costs and
        spreads of `plan`'s cells; None past an hour."""
        spent = (self.exp.budget_s or 0.0) - plan.budget_s
        costs = [c.cost for c in plan.cells]
        rows = sum(len(cost.sds) for cost in costs)
        minutes = max(1, math.ceil((spent + plan.budget_s) / 60.0))
        while minutes * 60.0 <= _MOST_BUDGET_S:
            wider = plan_rounds(
                costs,
                minutes * 60.0 - spent,
                rows=self.rows,
                goal=self.goal,
                max_rounds=self.exp.rounds,
            )
            if all(c.rounds for c in wider.cells) and (every_cell or wider.expected >= rows - 0.5):
                return f"{minutes}m"
            minutes += 1
        return None

    def closing_line(self) -> str | None:
        """After the run, where its plan left rows to chance or gave a size none: the spread its
        rows showed, and the budget at which a plan would expect every row decided."""
        if self._scale() is None or not self.plan:
            return None
        short = not all(self.fixed.get(c.key, 0) for c in self.cells)
        measured = sorted(self._run_sds())
        self.fixed.clear()
        self.setup_paid.clear()
        budget = self.exp.budget_s or 0.0
        plan = self.make(budget)
        sds = sorted(sd for c in plan.cells for sd in c.cost.sds) if plan else []
        # a plan stops at every row but half a row of the table (to rounding): nothing to add
        if plan is None or (not short and plan.expected >= len(sds) - 0.5 - 1e-6):
            return None
        if not sds:  # nothing to plan a wider budget on
            return "no row got timed rounds here" if short else None
        wider = self.budget_to_decide(plan)
        head = (
            f"the rows' per-round spread here was {_span(measured)}"
            if measured
            else f"no row got timed rounds here (the plan assumed spreads of {_span(sds)})"
        )
        return head + (
            f"; at this pace `--budget {wider}` plans rounds that would decide every row"
            if wider
            else f"; at this pace neither an hour nor {self.exp.rounds} rounds a size "
            "(max_rounds) would decide every row"
        )

    def run_spread(self) -> float | None:
        """The median per-round spread of the rows this run measured (None before any)."""
        sds = self._run_sds()
        return statistics.median(sds) if sds else None

    def _run_sds(self) -> list[float]:
        """The per-round spreads of the rows this run measured (not pooled with earlier runs)."""
        return [
            sd
            for cell in self.cells
            if self.fixed.get(cell.key) and self._signature(cell) in self.known
            for sd in self.known[self._signature(cell)].sds.values()
        ]


def _span(sds: list[float]) -> str:
    """ "1.2-3.4%" for sorted per-round spreads, "1.2%" for one."""
    low, high = f"{100 * sds[0]:.1f}", f"{100 * sds[-1]:.1f}"
    return f"{low}%" if low == high else f"{low}-{high}%"


def _minutes(seconds: float) -> str:
    """ "95 s", or "5.8 min" from two minutes on: a time said ahead, to be held to within 15%."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _short(label: str) -> str:
    """ "E2B" for "E2B (2/35 layers)"."""
    return label.split(" (")[0]


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def sds_of(rows: Mapping[str, float]) -> dict[str, float]:
    """Finite spreads only: a row of fewer than two rounds has none."""
    return {label: sd for label, sd in rows.items() if math.isfinite(sd) and sd > 0}
