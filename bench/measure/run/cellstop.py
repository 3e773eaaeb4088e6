"""When a cell has enough rounds (`CellStop`, analysis.stopping): fixed rounds, or with `trials:
auto` every round until its rows are decided, out of reach or out of time; and the forecasts the
first screen and the gate print."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from ...analysis.allocation import (
    Components,
    components,
    rounds_per_pair,
    scatter_within_pct,
    widest_half_width_pct,
)
from ...analysis.inference import PairedEstimate, paired_estimate
from ...analysis.stopping import Goal, Row, print_level
from ...core.cell import CellFields, Forecast, ScheduleWeighing, StopRecord, Trial
from ...core.experiment import MIN_AUTO_ROUNDS, Experiment, Trials, fresh_pairs_in
from ...core.fileformat import METRICS
from ...core.spec import DEFAULT_WORKER_ROUNDS
from ...present.format import format_duration
from .jobs import comparison_pairs, table_rows
from .session import CURRENT

# trials: budget never fixes fewer rounds than this: the fewest a paired t interval is finite at
# and a round's spread can be estimated from.
MIN_BUDGET_ROUNDS = 3


@dataclass(frozen=True)
class RoundCosts:
    """What a cell's budget pays for its rounds besides the rounds' trials: a fresh worker pair
    (stopping the old pair, starting and loading one, its warm-up) every `rounds_per_pair`, and
    stopping the workers once the last round is done. Estimated before the first timed round, then
    raised to what the cell's own fresh pairs measured."""

    round_s: float  # a timed round at the warm-up's pace, then at the timed rounds' mean
    fresh_pair_s: float = 0.0
    stop_s: float = 0.0


@dataclass(frozen=True)
class LimitForecast:
    """What the first screen says of the limit before the first round, and whether its rounds are
    expected to reach it (None: nothing measured here to say)."""

    text: str
    in_reach: bool | None


class CellStop:
    """When a cell has enough rounds (analysis.stopping). With `trials: auto`: after its first
    MIN_AUTO_ROUNDS rounds, every round, stop when every watched row is decided at the level the
    table prints it (Bonferroni over the table's rows, which Holm never exceeds), when no undecided
    row's decision is in reach of the rounds and time left, at max_rounds, or before a round that
    would not fit the cell's allowance (its part of the run's budget). The intervals are
    confidence sequences, so stopping on a decision leaves them valid. Its intervals are on the wall
    clock, as a run's are (a Δ is wall-clock tok/s)."""

    def __init__(self, exp: Experiment, builds: Sequence[str], allowance_s: float | None) -> None:
        self.exp = exp
        self.pairs = comparison_pairs(exp, builds)
        across = len(builds) > 1
        self.alpha = 1.0 - print_level(table_rows(exp, builds))
        # A gate row is decided against the experiment's margin as the limit (ci.yaml's 5%: check's
        # default).
        self.goal = Goal(
            exp.margin_pct, limit_pct=exp.margin_pct if across else None, target_pct=exp.target_pct
        )
        # (build, variant) -> round -> each metric's tok/s
        self.values: dict[tuple[str, str], dict[int, tuple[float | None, ...]]] = {}
        self.process_of: dict[int, int] = {}  # round -> the worker process (pair) that ran it
        self.allowance_s = allowance_s
        self.started = time.monotonic()
        self.first_round_at: float | None = None
        self.planned: int | None = None  # trials: budget: the rounds fixed before the first one
        self.costs = RoundCosts(round_s=0.0)
        self.round_times: list[float] = []
        # rounds a worker pair runs (across builds): worker_rounds, or with auto chosen where the
        # rounds are fixed from the time (fix_rounds)
        self.choose_pairs = across and exp.worker_rounds is None
        self.rounds_per_pair = (
            (DEFAULT_WORKER_ROUNDS if exp.worker_rounds is None else exp.worker_rounds)
            if across
            else 0
        )

    def add(self, build: str, trial: Trial, process: int) -> None:
        if not trial.warmup:
            self.process_of[trial.round] = process
            measured = trial.measured
            if self.first_round_at is None:
                self.first_round_at = (
                    time.monotonic() - measured.prefill_s - (measured.gen_s or 0.0)
                )
            self.values.setdefault((build, trial.variant), {})[trial.round] = (
                measured.prefill_tps,
                measured.gen_tps,
            )

    def _row_rounds(self) -> Iterator[tuple[str, list[float], list[float], list[int]]]:
        """Each watched row with two rounds or more: its label, both sides' tok/s round by round,
        and the worker process (pair) each round came from."""
        for a, b in self.pairs:
            rounds = sorted(set(self.values.get(a, {})) & set(self.values.get(b, {})))
            if len(rounds) < 2:
                continue
            for i, metric in enumerate(METRICS):
                base = [self.values[a][r][i] for r in rounds]
                new = [self.values[b][r][i] for r in rounds]
                if None not in base and None not in new:
                    label = f"{'/'.join(b)} vs {'/'.join(a)} {metric}".replace(
                        f"{CURRENT.name}/", ""
                    )
                    yield label, base, new, [self.process_of[r] for r in rounds]

    def round_logs(self) -> tuple[tuple[float, ...], ...]:
        """Each round's log ratio on every watched row, the rows' n-th rounds together (a duet of
        variants numbers its comparisons' rounds apart)."""
        rows = [
            [math.log(n / b) for b, n in zip(base, new, strict=True)]
            for _, base, new, _ in self._row_rounds()
        ]
        return tuple(zip(*rows, strict=False)) if rows else ()  # to the shortest row

    def _estimates(self) -> dict[str, PairedEstimate]:
        fixed = not self.exp.trials.adaptive
        return {
            label: paired_estimate(base, new, processes=processes, fixed_rounds=fixed)
            for label, base, new, processes in self._row_rounds()
        }

    def row_components(self) -> dict[str, Components]:
        """Each watched row's scatter within a worker pair and between pairs (rows of two pairs
        or more)."""
        found = {}
        for label, base, new, processes in self._row_rounds():
            logs = [math.log(n / b) for b, n in zip(base, new, strict=True)]
            measured = components(logs, processes)
            if measured is not None:
                found[label] = measured
        return found

    def rows(self) -> dict[str, Row]:
        return {
            label: Row(
                e.mean_log, e.sd_log, e.n, self.alpha, self.goal, fixed=not self.exp.trials.adaptive
            )
            for label, e in self._estimates().items()
        }

    def row_sds(self) -> dict[str, float]:
        """Each watched row's per-round log-ratio SD (the spread the plan of a later run uses)."""
        return {label: est.sd_log for label, est in self._estimates().items()}

    def half_widths(self) -> dict[str, float]:
        """Each watched row's half-width in percent at the level the table prints it."""
        level = 1.0 - self.alpha
        widths = {}
        for label, est in self._estimates().items():
            low, high = est.interval(level)
            widths[label] = round((high - low) / 2.0 * 100.0, 3)
        return widths

    def round_s(self, rounds: int) -> float | None:
        if self.first_round_at is None or rounds < 1:
            return None
        return (time.monotonic() - self.first_round_at) / rounds

    def limit_to(self, seconds: float) -> None:
        """From now on, at most `seconds` for the rest of the cell (trials: plan's allowance)."""
        self.allowance_s = seconds + (time.monotonic() - self.started)

    def time_left_s(self) -> float:
        return (
            math.inf
            if self.allowance_s is None
            else self.allowance_s - (time.monotonic() - self.started)
        )

    def forecasts(self, rounds: int) -> dict[str, Forecast]:
        """Each undecided row's forecast (analysis.stopping, "In reach")."""
        pace = self.round_s(rounds)
        found = {}
        for label, row in self.rows().items():
            if not row.decided:
                needed = row.rounds_to_decide()
                seconds = None if needed is None or pace is None else (needed - rounds) * pace
                found[label] = Forecast(needed, seconds)
        return found

    def record(
        self,
        cell: CellFields,
        rounds: int,
        reason: str,
        schedule: str,
        weighing: ScheduleWeighing | None = None,
    ) -> StopRecord:
        """The cell's stop record: why it stopped after `rounds`, the rows' half-widths, a round's
        pace, each undecided row's forecast, and the schedules' weighing where its rounds began
        with one."""
        return StopRecord(
            cell=cell,
            rounds=rounds,
            reason=reason,
            schedule=schedule,
            half_width_pct=self.half_widths(),
            round_s=self.round_s(rounds),
            undecided=self.forecasts(rounds),
            weighing=weighing,
        )

    def _in_reach(self, forecast: Forecast) -> bool:
        return (
            forecast.rounds is not None
            and forecast.rounds <= self.exp.rounds
            and (forecast.seconds or 0.0) <= self.time_left_s()
        )

    def expect(self, costs: RoundCosts) -> None:
        """What the rounds will cost, estimated before the first (the warm-up's pace, the first
        pair's load): the budget's stops plan with it until the rounds measure their own."""
        self.costs = costs

    def round_took(self, seconds: float) -> None:
        self.round_times.append(seconds)
        self.costs = replace(self.costs, round_s=statistics.fmean(self.round_times))

    def take_rounds(self, other: CellStop) -> None:
        """The rounds `other` measured (the schedule a weighing kept), as this cell's first: its
        values, its workers and its rounds' seconds, the pace theirs alone."""
        self.values, self.process_of = other.values, other.process_of
        self.round_times = list(other.round_times)
        if self.round_times:
            self.first_round_at = time.monotonic() - sum(self.round_times)
            self.costs = replace(self.costs, round_s=statistics.fmean(self.round_times))

    def fresh_pair_took(self, seconds: float, stop_s: float) -> None:
        """A fresh pair's measured cost: the budget plans with the dearest seen."""
        self.costs = replace(
            self.costs,
            fresh_pair_s=max(self.costs.fresh_pair_s, seconds),
            stop_s=max(self.costs.stop_s, stop_s),
        )

    def fix_rounds(self) -> int:
        """trials: budget: the timed rounds this cell's allowance holds at the expected
        costs, at least MIN_BUDGET_ROUNDS and at most max_rounds, fixed before any timed round is
        seen; with worker_rounds: auto, the rounds a pair with them (analysis.allocation)."""
        if self.choose_pairs:
            self.rounds_per_pair, _ = rounds_per_pair(self._fits, self.exp.rounds, self.alpha)
        self.planned = min(
            self.exp.rounds, max(MIN_BUDGET_ROUNDS, self._fits(self.rounds_per_pair))
        )
        return self.planned

    def limit_forecast(self, measured: Mapping[str, Components] | None) -> LimitForecast | None:
        """Before the first round, with two builds: whether the fixed rounds can decide the limit
        (margin_pct) for a build no slower, from the rows' scatter this cell's last A/B here
        showed (`measured`), or, before any, the scatter they can decide it at."""
        limit, rounds, k = self.goal.limit_pct, self.planned, self.rounds_per_pair
        if limit is None or not rounds or not k:
            return None
        pairs = math.ceil(rounds / k)
        design = f"{rounds} rounds in {pairs} pairs"
        if not measured:
            scatter = scatter_within_pct(limit, k, rounds, self.alpha)
            return LimitForecast(
                f"the -{limit:g}% limit: no A/B of this cell measured here yet; {design} decide "
                f"a row that scatters up to {scatter:.1f}% a round, its pairs agreeing",
                None,
            )
        width = widest_half_width_pct(measured.values(), k, rounds, self.alpha)
        basis = f"its widest row expected at ±{width:.1f}%, as its last A/B here scattered"
        if width < limit:
            return LimitForecast(f"the -{limit:g}% limit: in reach of {design} ({basis})", True)
        needed = next(
            (
                n
                for n in range(rounds + 1, 20 * self.exp.rounds)
                if widest_half_width_pct(measured.values(), k, n, self.alpha) < limit
            ),
            None,
        )
        more = (
            f"; about {needed} rounds ({format_duration(self._rounds_s(needed, k))}) would reach "
            "it (--budget)"
            if needed
            else ""
        )
        return LimitForecast(
            f"the -{limit:g}% limit: out of reach of {design} ({basis}){more}", False
        )

    def _fits(self, every: int) -> int:
        """The timed rounds the time left holds at the expected costs with a fresh pair every
        `every` rounds (max_rounds where the time is not limited)."""
        left = self.time_left_s()
        if not (math.isfinite(left) and self.costs.round_s > 0):
            return self.exp.rounds
        return next(
            (n - 1 for n in range(1, self.exp.rounds + 1) if self._rounds_s(n, every) > left),
            self.exp.rounds,
        )

    def pairs_started(self, rounds: int) -> int:
        """The fresh worker pairs this cell starts during its first `rounds` timed rounds."""
        return fresh_pairs_in(rounds, self.rounds_per_pair)

    def _rounds_s(self, rounds: int, every: int) -> float:
        """The seconds `rounds` timed rounds take with a fresh pair every `every`, the fresh
        pairs between them and the workers' stop after them included."""
        costs = self.costs
        return (
            rounds * costs.round_s
            + fresh_pairs_in(rounds, every) * costs.fresh_pair_s
            + costs.stop_s
        )

    def _next_round_fits(self, rounds: int) -> bool:
        """Whether one more round (after `rounds`) at the slowest pace a round has taken, with the
        fresh pair due before it and the workers' stop after it, fits the time left. One round
        is planned with the dearest seen, as a fresh pair is: the mean would let the last round
        overrun the budget by its own scatter."""
        fresh = self.pairs_started(rounds + 1) - self.pairs_started(rounds)
        slowest = max(self.round_times, default=self.costs.round_s)
        extra = slowest + fresh * self.costs.fresh_pair_s
        return extra + self.costs.stop_s <= self.time_left_s()

    def stop_reason(self, rounds: int) -> str | None:
        """Why the cell stops after `rounds` timed rounds, or None to go on."""
        if self.exp.trials is Trials.FIXED:
            return "trials" if rounds >= self.exp.rounds else None
        if self.planned is not None:
            # trials: budget or plan: what the data say never ends it; only the count fixed before
            # it, or a round that would overrun the cell's time (a stop no Δ had a say in)
            if rounds >= self.planned:
                return "planned" if self.exp.trials is Trials.PLAN else "fixed from the budget"
            return None if self._next_round_fits(rounds) else "budget"
        if rounds < MIN_AUTO_ROUNDS:
            return None
        forecasts = self.forecasts(rounds)
        if not forecasts:
            return "decided"
        if rounds >= self.exp.rounds:
            return "max_rounds"
        if not self._next_round_fits(rounds):
            return "budget"
        if not any(self._in_reach(f) for f in forecasts.values()):
            return "out of reach"
        return None

    def plan_line(self, rounds: int) -> str:
        """What the first rounds say this cell can decide in its allowance: the first screen's early
        word."""
        forecasts = self.forecasts(rounds)
        rows = len(self.rows())
        pace = self.round_s(rounds)
        head = (
            f"after {rounds} rounds ({pace:.1f} s a round): "
            f"{rows - len(forecasts)} of {rows} rows decided"
            if pace
            else f"after {rounds} rounds: {rows - len(forecasts)} of {rows} rows decided"
        )
        left = self.time_left_s()
        allows = (
            (rounds + max(0, int(left // pace)))
            if pace and math.isfinite(left)
            else self.exp.rounds
        )
        allows = min(allows, self.exp.rounds)
        far = {label: f for label, f in forecasts.items() if not self._in_reach(f)}
        out = [f"{label} {settle_text(f)}" for label, f in far.items()]
        reach = len(forecasts) - len(out)
        beyond = (
            [
                f"out of reach (this size's allowance of the budget holds {allows} rounds): "
                + ", ".join(out)
            ]
            if out
            else []
        )
        more = [f.seconds for f in far.values() if f.seconds is not None]
        if more and all(f.rounds is not None for f in far.values()):
            beyond.append(
                f"about {format_duration(max(more))} more budget for this size would settle them"
            )
        return "; ".join([head, *([f"{reach} more in reach"] if reach else []), *beyond])


def settle_text(forecast: Forecast) -> str:
    """ "about 60 rounds (9 min) would settle it"."""
    if forecast.rounds is None:
        return "cannot be settled at this estimate"
    took = f" ({format_duration(forecast.seconds)} more)" if forecast.seconds is not None else ""
    return f"about {forecast.rounds} rounds{took} would settle it"
