"""Whether a duet buys more precision per second than sequential rounds, weighed on a run's own
rounds (issue 76): the first cell alternates the two schedules, and the run goes on in the one its
rounds say is surely better.

A schedule's precision per second is 1 / (s² · t): s the SD of a round's log ratio on its noisiest
row (a cell waits for its noisiest row), t the seconds a round took. Both schedules give each row
one log ratio a round, so the ratio of the two is the ratio of the rounds' costs at equal interval
width. The gain (duet over sequential) gets an interval from a bootstrap that resamples each
schedule's rounds whole (the rows of a round stay together, as correlated as they ran; seeded, so
the same rounds give the same interval); its bounds are the GAIN_BOUND and 1 − GAIN_BOUND
quantiles, each a one-sided 90% bound, as `threads: auto` and the schedule pilot ask of theirs.

What it chooses: the duet where the gain's lower bound is above 1, sequential where its upper
bound is below 1, else the prior (an earlier run's weighing here, cached; on a first run the safe
schedule, sequential). The weighing stops once either bound is past 1, or before a round that
would take the schedule that loses more than `cap_s` (the run's price for having asked).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GAIN_BOUND = 0.10  # each bound of the gain is one-sided at 1 − this (a 80% two-sided interval)
MIN_WEIGHING_ROUNDS = 5  # per schedule: the fewest a spread and its bootstrap are read from (3 let
# a bound cross 1 wrongly in up to 11.5% of replays, 5 in up to 9.5%: results/schedule-weighing)
DRAWS = 2000
SEQUENTIAL, DUET = "sequential", "duet"


@dataclass(frozen=True)
class ScheduleRounds:
    """One schedule's rounds in a weighing: each round's log ratio on every row (one order of
    rows throughout) and the seconds each round took."""

    schedule: str
    logs: tuple[tuple[float, ...], ...]
    seconds: tuple[float, ...]

    @property
    def rounds(self) -> int:
        return len(self.seconds)

    @property
    def sd(self) -> float:
        """The noisiest row's SD of a round's log ratio."""
        return float(np.max(np.std(np.asarray(self.logs), axis=0, ddof=1)))

    @property
    def round_s(self) -> float:
        return float(np.mean(self.seconds))

    @property
    def precision_per_s(self) -> float:
        return _precision(np.asarray(self.logs)[None], np.asarray(self.seconds)[None])[0]


def _precision(logs: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """1 / (s² · t) of each draw: `logs` draws x rounds x rows, `seconds` draws x rounds."""
    sd = np.maximum(logs.std(axis=1, ddof=1).max(axis=1), 1e-4)
    return 1.0 / (sd**2 * seconds.mean(axis=1))


@dataclass(frozen=True)
class Gain:
    """The duet's precision per second over sequential rounds': the point and its bounds."""

    point: float
    low: float
    high: float

    @property
    def surely(self) -> str | None:
        """The schedule the gain surely favours, or None."""
        if self.low > 1.0:
            return DUET
        if self.high < 1.0:
            return SEQUENTIAL
        return None

    def __str__(self) -> str:
        return f"{self.point:.2f}x [{self.low:.2f}x, {self.high:.2f}x]"


def schedule_gain(sequential: ScheduleRounds, duet: ScheduleRounds) -> Gain | None:
    """The duet's gain with its bounds, resampling each schedule's rounds; None before each has
    MIN_WEIGHING_ROUNDS."""
    if min(sequential.rounds, duet.rounds) < MIN_WEIGHING_ROUNDS:
        return None
    rng = np.random.default_rng(0)

    def drawn(side: ScheduleRounds) -> np.ndarray:
        logs, seconds = np.asarray(side.logs), np.asarray(side.seconds)
        picks = rng.integers(0, side.rounds, size=(DRAWS, side.rounds))
        return _precision(logs[picks], seconds[picks])

    ratios = drawn(duet) / drawn(sequential)
    low, high = np.quantile(ratios, [GAIN_BOUND, 1.0 - GAIN_BOUND])
    point = duet.precision_per_s / sequential.precision_per_s
    return Gain(float(point), float(low), float(high))


@dataclass(frozen=True)
class Weighing:
    """Both schedules' rounds so far, and what they choose: `prior` until the gain is sure."""

    sequential: ScheduleRounds
    duet: ScheduleRounds
    prior: str = SEQUENTIAL

    def of(self, schedule: str) -> ScheduleRounds:
        return self.duet if schedule == DUET else self.sequential

    @property
    def gain(self) -> Gain | None:
        return schedule_gain(self.sequential, self.duet)

    @property
    def chosen(self) -> str:
        gain = self.gain
        return (gain.surely if gain else None) or self.prior

    def next_schedule(self) -> str:
        """The schedule of the next round: turns in ABBA order (duet, sequential, sequential,
        duet, ...), so a drift in the machine's noise lands on both alike."""
        done = self.sequential.rounds + self.duet.rounds
        return DUET if done % 4 in (0, 3) else SEQUENTIAL

    def go_on(self, cap_s: float) -> bool:
        """Whether another round is worth it: not yet sure, and the next round keeps what either
        schedule spent within `cap_s` (the most a run pays for the schedule it drops)."""
        gain = self.gain
        if gain is not None and gain.surely:
            return False
        side = self.of(self.next_schedule())
        return not side.rounds or sum(side.seconds) + side.round_s <= cap_s

    def line(self) -> str:
        """The plan line's word on it: 'duet 2.9x as precise per second here [1.8x, 4.6x] ...'."""
        gain = self.gain
        seq, duet = self.sequential, self.duet
        spent = (
            f"{seq.rounds} sequential rounds ({100 * seq.sd:.1f}% a round, {seq.round_s:.1f} s) "
            f"and {duet.rounds} duets ({100 * duet.sd:.1f}%, {duet.round_s:.1f} s)"
            if gain
            else f"{seq.rounds} sequential rounds and {duet.rounds} duets"
        )
        if gain is None:
            return f"schedules weighed on {spent}: too few to say; {self.prior} as before"
        verdict = gain.surely
        if verdict is None:
            why = f"neither surely better: {self.prior}, " + (
                "as an earlier run here chose" if self.prior == DUET else "the safe schedule"
            )
        else:
            why = f"{verdict} surely better"
        return f"duet {gain} as precise per second as sequential on {spent}: {why}"
