"""schedule: auto weighed on a run's own rounds (analysis.schedule_gain, issue 76): the duet's gain
in precision per second with its bounds, what it keeps, and when the weighing stops."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fusebench.analysis.schedule_gain import (
    DUET,
    MIN_WEIGHING_ROUNDS,
    SEQUENTIAL,
    ScheduleRounds,
    Weighing,
    schedule_gain,
)
from fusebench.commands import main
from fusebench.core.results import read_results
from fusebench.measure.machine.cores import duet_cores


def rounds(schedule: str, sd: float, seconds: float, n: int, seed: int) -> ScheduleRounds:
    """`n` rounds of two rows scattering `sd` a round, each round taking `seconds`."""
    rng = np.random.default_rng(seed)
    logs = rng.normal(0.0, sd, size=(n, 2))
    return ScheduleRounds(schedule, tuple(map(tuple, logs)), (seconds,) * n)


def test_precision_per_second_is_one_over_the_noisiest_rows_variance_times_a_rounds_cost():
    side = ScheduleRounds(SEQUENTIAL, ((0.01, 0.0), (-0.01, 0.02), (0.0, -0.02)), (2.0, 2.0, 2.0))
    noisiest = float(np.std([0.0, 0.02, -0.02], ddof=1))
    assert side.sd == pytest.approx(noisiest)
    assert side.precision_per_s == pytest.approx(1.0 / (noisiest**2 * 2.0))


def test_a_duet_twice_as_precise_and_cheaper_is_surely_better():
    # the Zen 3's A/A: sequential 8.95% a round, duet 6.44% at 0.62 of the time
    seq, duet = rounds(SEQUENTIAL, 0.0895, 16.1, 30, 1), rounds(DUET, 0.0644, 10.0, 30, 2)
    gain = schedule_gain(seq, duet)
    assert gain is not None and gain.low > 1.0 and gain.surely == DUET
    assert gain.low <= gain.point <= gain.high
    assert Weighing(seq, duet).chosen == DUET


def test_a_duet_that_scatters_more_than_it_saves_is_surely_worse():
    seq, duet = rounds(SEQUENTIAL, 0.02, 10.0, 12, 3), rounds(DUET, 0.06, 6.0, 12, 4)
    gain = schedule_gain(seq, duet)
    assert gain is not None and gain.high < 1.0 and gain.surely == SEQUENTIAL
    assert Weighing(seq, duet, prior=DUET).chosen == SEQUENTIAL


@pytest.mark.parametrize("prior", [SEQUENTIAL, DUET])
def test_where_neither_is_surely_better_the_prior_stays(prior):
    seq, duet = rounds(SEQUENTIAL, 0.03, 10.0, 6, 5), rounds(DUET, 0.03, 10.0, 6, 6)
    gain = schedule_gain(seq, duet)
    assert gain is not None and gain.surely is None
    weighing = Weighing(seq, duet, prior=prior)
    assert weighing.chosen == prior and "neither surely better" in weighing.line()


def test_too_few_rounds_say_nothing_and_keep_the_prior():
    seq = rounds(SEQUENTIAL, 0.03, 10.0, MIN_WEIGHING_ROUNDS - 1, 7)
    duet = rounds(DUET, 0.01, 5.0, MIN_WEIGHING_ROUNDS, 8)
    assert schedule_gain(seq, duet) is None
    weighing = Weighing(seq, duet)
    assert weighing.chosen == SEQUENTIAL and "too few" in weighing.line()


def test_the_same_rounds_give_the_same_bounds():
    seq, duet = rounds(SEQUENTIAL, 0.05, 10.0, 8, 9), rounds(DUET, 0.04, 7.0, 8, 10)
    assert schedule_gain(seq, duet) == schedule_gain(seq, duet)


def test_turns_run_in_abba_order_so_a_drift_lands_on_both():
    empty = Weighing(rounds(SEQUENTIAL, 0.0, 1.0, 0, 0), rounds(DUET, 0.0, 1.0, 0, 0))
    order = []
    weighing = empty
    for _ in range(8):
        name = weighing.next_schedule()
        order.append(name)
        side = weighing.of(name)
        grown = ScheduleRounds(name, (*side.logs, (0.0, 0.0)), (*side.seconds, 1.0))
        weighing = (
            Weighing(grown, weighing.duet)
            if name == SEQUENTIAL
            else Weighing(weighing.sequential, grown)
        )
    assert order == [DUET, SEQUENTIAL, SEQUENTIAL, DUET] * 2


def test_the_weighing_stops_when_sure_or_before_the_dropped_schedule_passes_its_cap():
    sure = Weighing(rounds(SEQUENTIAL, 0.09, 16.0, 12, 1), rounds(DUET, 0.03, 10.0, 12, 2))
    assert not sure.go_on(cap_s=1e9)
    unsure_seq, unsure_duet = rounds(SEQUENTIAL, 0.03, 10.0, 6, 5), rounds(DUET, 0.03, 10.0, 6, 6)
    unsure = Weighing(unsure_seq, unsure_duet)
    assert unsure.go_on(cap_s=70.0)  # 60 s spent in the next schedule, 10 s more fits
    assert not unsure.go_on(cap_s=69.0)


# --- a run weighs in its first cell (the tiny preset, end to end) ---------------------------------

WEIGHED = """\
name: tiny-weighed
models:
  - {preset: tiny}
variants:
  baseline: {geglu: unfused, softcap: unfused, attention: manual}
  compiled: {geglu: compiled, softcap: compiled, attention: manual}
comparisons: [[baseline, compiled]]
workloads: {prompt_tokens: 12, gen_tokens: 3}
trials: budget
budget_s: 40
max_rounds: 8
warmup: 1
shares: 0
threads: 1
correctness: {reference: baseline, tokens: 2}
"""


@pytest.fixture(scope="module")
def weighed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if duet_cores() is None:
        pytest.skip("a weighing needs two physical cores")
    folder = tmp_path_factory.mktemp("weighed-run")
    exp = folder / "exp.yaml"
    exp.write_text(WEIGHED)
    out = folder / "r.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder / "cache"))
        assert main(["run", str(exp), "--out", str(out), "--quiet"]) == 0
    return out, folder / "cache"


def test_a_first_run_weighs_both_schedules_and_counts_only_the_kept_ones_rounds(weighed_run):
    out, _ = weighed_run
    results = read_results([out])
    (stop,) = results.stop_records()
    weighing = stop.weighing
    assert weighing is not None and weighing.prior == SEQUENTIAL
    assert stop.schedule == weighing.kept
    assert weighing.sequential.rounds >= 1 and weighing.duet.rounds >= 1
    raw = [t for t in results.of_kind("trial") if not t["warmup"]]
    tagged = Counter(t["schedule"] for t in raw)
    # two variants a round in either schedule
    assert tagged[SEQUENTIAL] == 2 * weighing.sequential.rounds
    assert tagged[DUET] == 2 * weighing.duet.rounds
    counted = results.frame("trial")
    counted = counted[~counted["warmup"].astype(bool)]
    dropped = DUET if weighing.kept == SEQUENTIAL else SEQUENTIAL
    assert dropped not in set(counted["schedule"].dropna())
    # the kept schedule's weighing rounds and the rest: the stop record's rounds, two trials each
    assert len(counted) == 2 * stop.rounds
    kept_rounds = getattr(weighing, weighing.kept).rounds
    assert stop.rounds >= kept_rounds


def test_the_kept_schedule_is_the_next_runs_prior(weighed_run):
    out, cache = weighed_run
    (stop,) = read_results([out]).stop_records()
    (cached,) = cache.rglob("schedule-v5-*.json")
    choice = json.loads(cached.read_text())
    assert choice["schedule"] == stop.weighing.kept
    assert choice["reason"].startswith("weighed on a run's first rounds")
