"""Duet rounds (measure.run.schedules.duet's plan, measure.run.pilot's choice, the runner end to end
on the tiny preset) and the interval that follows the design (fixed rounds: the fixed-n t interval;
rounds added on the data: the confidence sequence)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import cell, results_file, trials

from fusebench.analysis import stats
from fusebench.analysis.inference import adjust, paired_estimate, verdict
from fusebench.commands import main
from fusebench.core.cell import CellFields, Measured, StopRecord, Trial
from fusebench.core.experiment import Schedule, Trials
from fusebench.core.fileformat import METRICS, Clock
from fusebench.core.flags import experiment_path
from fusebench.core.header import Env, LoadSummary, MachineLoad, RunHeader, ScheduleChoice
from fusebench.core.results import read_results
from fusebench.core.spec import load_experiment
from fusebench.measure.job import CellShape
from fusebench.measure.machine.cores import duet_cores
from fusebench.measure.run.pilot import (
    ClockSample,
    PilotTrials,
    ScheduleProbe,
    _probe,
    choose_schedule,
    decide,
    gain_lower_bound,
)
from fusebench.measure.run.schedules import SCHEDULES
from fusebench.measure.run.schedules.duet import duet_plan
from fusebench.present.sections.context import design_note, sequential_sizes

PAIRS = [("baseline", "compiled"), ("baseline", "sdpa")]
ORDER = ["compiled", "baseline", "sdpa"]


# --- the plan -------------------------------------------------------------------------------------


def test_across_builds_every_variant_runs_beside_its_other_build_on_swapped_cores():
    for cycle in range(4):
        duets = duet_plan(ORDER, ["current", "reference"], PAIRS, cycle, cores=(2, 5))
        assert sorted(d.arms[0].variant for d in duets) == sorted(ORDER)
        for duet in duets:
            assert duet.round == cycle
            assert [(a.build, a.worker) for a in duet.arms] == [("current", 0), ("reference", 1)]
            assert duet.arms[0].variant == duet.arms[1].variant
            assert duet.cores == ((2, 5) if cycle % 2 == 0 else (5, 2))


def test_a_rounds_trials_are_its_steps_arms():
    sequential, duet = SCHEDULES[Schedule.SEQUENTIAL], SCHEDULES[Schedule.DUET]
    assert sequential.round_trials(ORDER, ["current"], PAIRS) == 3
    assert sequential.round_trials(ORDER, ["current", "reference"], PAIRS) == 6
    assert duet.round_trials(ORDER, ["current"], PAIRS) == 4  # both arms of each comparison
    assert duet.round_trials(ORDER, ["current", "reference"], PAIRS) == 6
    # nothing to pair: no trial, and the runner runs such a model sequentially
    assert duet.round_trials(ORDER, ["current"], []) == 0
    assert duet.worker_builds(["current"]) == ["current", "current"]
    assert duet.places(2, (3, 5), None) == [[3], [5]]
    assert sequential.places(2, (3, 5), [1]) == [[1], [1]]


def test_within_a_build_each_comparison_is_one_duet_and_the_workers_swap_variants():
    seen: Counter = Counter()
    for cycle in range(6):
        duets = duet_plan(ORDER, ["current"], PAIRS, cycle)
        assert sorted((d.arms[0].variant, d.arms[1].variant) for d in duets) == PAIRS
        for duet in duets:
            baseline, new = duet.arms
            # the baseline's worker alternates, so a worker's (or core's) offset cancels
            assert baseline.worker == cycle % 2 and new.worker == 1 - cycle % 2
            assert duet.cores == (baseline.worker, new.worker)
            seen.update((arm.variant, duet.round) for arm in duet.arms)
    # a (variant, round) names one trial: the records key on it
    assert set(seen.values()) == {1}


def test_two_cores_are_two_physical_cores_or_none():
    assert duet_cores([3]) is None
    assert duet_cores([]) is None
    cores = duet_cores([0, 1, 2, 3])
    assert cores is not None and cores[0] != cores[1]


# --- the choice -----------------------------------------------------------------------------------


def test_a_gpu_backend_runs_sequentially_on_the_wall_clock_without_measuring():
    gpu = choose_schedule(Schedule.AUTO, Env(backend="cuda"), {})
    assert gpu.schedule == Schedule.SEQUENTIAL and "GPU" in gpu.reason
    assert gpu.clock == Clock.WALL and gpu.probes == ()


class _Quiet:
    """A load sampler that saw nothing else running, so a choice is cached as on an idle machine."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def summary(self):
        return LoadSummary(samples=3, interval_s=1.0)


@pytest.fixture
def pilots(monkeypatch, tmp_path):
    """The pilot replaced by figures (each call recorded), on two cores, caching under tmp_path."""
    calls = []

    def pilot(worker_env, cores, threads):
        calls.append(threads)
        quiet_cpu = ScheduleProbe(Schedule.SEQUENTIAL, wall_sd=0.08, cpu_sd=0.04, pair_s=2.0)
        duet = ScheduleProbe(Schedule.DUET, wall_sd=0.05, cpu_sd=0.05, pair_s=1.0)
        return (quiet_cpu, duet) if threads == 1 else (quiet_cpu,)

    monkeypatch.setattr("fusebench.measure.run.pilot.pilot", pilot)
    monkeypatch.setattr("fusebench.measure.run.pilot.duet_cores", lambda: (0, 1))
    monkeypatch.setattr("fusebench.measure.run.pilot.cache_dir", lambda: tmp_path)
    monkeypatch.setattr("fusebench.measure.run.pilot.LoadSampler", _Quiet)
    monkeypatch.setattr("fusebench.measure.run.pilot.preflight", lambda: None)
    return calls


def test_a_run_never_pilots_and_runs_sequentially_with_nothing_weighed(pilots):
    # A machine's first run: the safe schedule, no pilot in its noisiest first minutes.
    choice = choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=1)
    assert choice.schedule == Schedule.SEQUENTIAL and "the safe schedule" in choice.reason
    assert pilots == [] and choice.clock == Clock.WALL
    # once `env --probe` has cached a pilot's choice, a run uses it
    probed = choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=1, fresh=True)
    assert choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=1) == probed
    assert pilots == [1]


def test_auto_runs_sequentially_where_sequential_workers_run_more_threads(pilots):
    choice = choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=2, fresh=True)
    assert choice.schedule == Schedule.SEQUENTIAL and "2 BLAS threads" in choice.reason
    # the pilot timed the sequential pair alone; its CPU clock scattered half as much, and the run
    # is on the wall clock all the same (a Δ is wall-clock tok/s), the CPU figure information
    assert pilots == [2] and choice.clock == Clock.WALL
    assert "4.0% on it against 8.0% on the wall clock: information only" in choice.clock_reason
    asked = choose_schedule(Schedule.DUET, Env(backend="cpu"), {}, threads=2)
    assert asked.schedule == Schedule.DUET and "one BLAS thread each" in asked.reason
    # no pilot measured a duet at 2 threads: the wall clock, with no figure to quote
    assert asked.clock == Clock.WALL and "information" not in asked.clock_reason
    assert pilots == [2]


def test_the_pilot_is_cached_per_machine_and_an_asked_schedule_reads_its_clock(pilots):
    first = choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=1, fresh=True)
    again = choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=1)
    assert pilots == [1] and first == again
    # the duet bought (8/5)² x 2 = 5.12x: chosen, on the wall clock (its clocks scattered alike)
    assert first.schedule == Schedule.DUET and "5.12x" in first.reason
    assert first.clock == Clock.WALL and "5.0% on it against 5.0%" in first.clock_reason
    asked = choose_schedule(Schedule.SEQUENTIAL, Env(backend="cpu"), {}, threads=1)
    assert asked.schedule == Schedule.SEQUENTIAL and asked.clock == Clock.WALL and pilots == [1]
    assert "4.0% on it against 8.0%" in asked.clock_reason


def test_no_pilot_starts_beside_other_work(pilots, monkeypatch):
    busy = MachineLoad(loadavg_1m=2.0, cores=2, other_cores=1.5, steal_cores=0.0)
    monkeypatch.setattr("fusebench.measure.run.pilot.preflight", lambda: busy)
    choice = choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=1, fresh=True)
    assert choice.schedule == Schedule.SEQUENTIAL and "1.5 cores" in choice.reason
    assert choice.clock == Clock.WALL and pilots == []


def test_one_core_runs_sequentially(monkeypatch):
    monkeypatch.setattr("fusebench.measure.run.pilot.duet_cores", lambda: None)
    choice = choose_schedule(Schedule.DUET, Env(backend="cpu"), {})
    assert choice.schedule == Schedule.SEQUENTIAL and "two physical cores" in choice.reason
    assert choice.clock == Clock.WALL


class _Worker:
    """A worker that answers each trial at once, logging what it was sent and when it answered."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log
        self.process = SimpleNamespace(pid=2**22 + 1)  # no process has it: pinning is a no-op

    def send(self, command) -> None:
        self.log.append(("send", self.name, command.round))

    def collect(self, command, deadline, timeout_s):
        self.log.append(("collect", self.name, command.round))
        measured = Measured(
            prefill_s=1.0,
            prefill_tps=128.0,
            gen_s=0.5,
            gen_tps=4.0,
            prefill_cpu_s=0.9,
            gen_cpu_s=0.4,
        )
        return [
            Trial(variant=command.variant, round=command.round, warmup=False, measured=measured)
        ]


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        # both sent before either is collected: the two trials run at once
        (Schedule.DUET, ["send a", "send b", "collect a", "collect b"]),
        # strict turns, as run --against takes two builds' workers
        (Schedule.SEQUENTIAL, ["send a", "collect a", "send b", "collect b"]),
    ],
)
def test_a_pilot_pair_is_the_two_workers_on_one_prompt(schedule, expected):
    exp = load_experiment(experiment_path("ci"))
    shape = CellShape(exp.cells()[0].key, 128, 3, 1)
    log: list = []
    trials = PilotTrials(shape, exp, (0, 1))
    workers = [_Worker("a", log), _Worker("b", log)]
    first, second, _ = trials.pair(workers, schedule, turn=0)
    again = trials.pair(workers, schedule, turn=1)
    assert [f"{what} {name}" for what, name, _ in log[:4]] == expected
    # one round number (the prompt) a pair, a new one the next pair
    assert {r for *_, r in log[:4]} == {1} and {r for *_, r in log[4:]} == {2}
    assert first == second == again[0] == ClockSample(wall=(1.0, 0.5), cpu=(0.9, 0.4))


def _pairs(prefill_wall, prefill_cpu, gen):
    """Pilot pairs whose log ratios are the given sequences (the second trial's seconds 1.0)."""
    one = ClockSample(wall=(1.0, 1.0), cpu=(1.0, 1.0))
    return [
        (ClockSample(wall=(np.exp(pw), np.exp(g)), cpu=(np.exp(pc), np.exp(g))), one, 2.0)
        for pw, pc, g in zip(prefill_wall, prefill_cpu, gen, strict=True)
    ]


def test_the_pilot_reads_each_metric_as_a_row_and_keeps_the_noisier():
    # prefill scatters twice as much on the wall clock as on the CPU clock; gen alike on both and
    # quieter: a trial's sum would have hidden prefill's wall noise behind gen's time
    rng = np.random.default_rng(7)
    z, g = rng.standard_normal(200), 0.01 * rng.standard_normal(200)
    probe = _probe(Schedule.SEQUENTIAL, _pairs(0.08 * z, 0.04 * z, g))
    assert probe.wall_sd == pytest.approx(0.08, rel=0.15)
    assert probe.cpu_sd == pytest.approx(0.04, rel=0.15)
    assert decide((probe,), (0, 1), threads=2).clock == Clock.WALL


def test_a_stalled_pair_counts_in_the_pilots_spread_as_in_a_runs_intervals():
    z = 0.01 * np.random.default_rng(9).standard_normal(20)
    stalled = np.append(z, 0.30)  # one turn 30% slow: what decides a run's interval
    probe = _probe(Schedule.SEQUENTIAL, _pairs(stalled, stalled, [*z.tolist(), 0.0]))
    assert probe.wall_sd == pytest.approx(float(np.std(stalled, ddof=1)))
    assert probe.wall_sd > 0.05 and len(probe.prefill_ratios) == len(probe.pair_seconds) == 21


def test_a_pilot_without_cpu_times_keeps_the_wall_clock():
    z = np.random.default_rng(8).standard_normal(40)
    probe = _probe(Schedule.SEQUENTIAL, _pairs(0.08 * z, [np.nan] * 40, 0.01 * z))
    assert np.isnan(probe.cpu_sd)
    choice = decide((probe,), (0, 1), threads=2)
    assert choice.clock == Clock.WALL
    assert "information" not in choice.clock_reason and "nan" not in choice.clock_reason


@pytest.mark.parametrize(
    ("duet_sd", "expected", "gain"),
    [(0.02, Schedule.DUET, "8.00x"), (0.06, Schedule.SEQUENTIAL, "0.89x")],
)
def test_auto_takes_the_duet_only_for_enough_precision_per_second(duet_sd, expected, gain):
    # a sequential pair: SD 4% in 2 s; the duet takes half the time, at duet_sd
    sequential = ScheduleProbe(Schedule.SEQUENTIAL, wall_sd=0.04, cpu_sd=0.04, pair_s=2.0)
    duet = ScheduleProbe(Schedule.DUET, wall_sd=duet_sd, cpu_sd=duet_sd, pair_s=1.0)
    choice = decide((sequential, duet), (0, 1))
    assert choice.schedule == expected
    assert gain in choice.reason and choice.cores == (0, 1)


def pilot_probe(schedule: str, sd: float, pair_s: float, pairs: int = 20) -> ScheduleProbe:
    """A pilot's probe with its pairs: log ratios of SD `sd` exactly, `pair_s` seconds each."""
    z = np.random.default_rng(7).standard_normal((pairs, 2))
    ratios = sd * (z - z.mean(axis=0)) / z.std(axis=0, ddof=1)
    return ScheduleProbe(
        schedule,
        wall_sd=sd,
        cpu_sd=sd,
        pair_s=pair_s,
        prefill_ratios=tuple(ratios[:, 0]),
        gen_ratios=tuple(ratios[:, 1]),
        pair_seconds=(pair_s,) * pairs,
    )


def test_a_duet_must_win_at_its_lower_bound_not_at_its_point_estimate():
    sequential = pilot_probe(Schedule.SEQUENTIAL, 0.04, 2.0)
    # 1.42x the sequential pair's precision per second: past the old 1.25x, not surely above 1
    near = decide((sequential, pilot_probe(Schedule.DUET, 0.0475, 1.0)), (0, 1))
    assert near.schedule == Schedule.SEQUENTIAL
    assert "1.42x" in near.reason and "not surely more" in near.reason
    clear = decide((sequential, pilot_probe(Schedule.DUET, 0.02, 1.0)), (0, 1))
    assert clear.schedule == Schedule.DUET and "at least" in clear.reason
    low = gain_lower_bound(sequential, pilot_probe(Schedule.DUET, 0.02, 1.0))
    assert low is not None and 1.0 < low < 8.0


@pytest.mark.parametrize("cpu_sd", [0.01, 0.035, 0.08])
def test_a_run_is_on_the_wall_clock_however_little_the_cpu_clock_scatters(cpu_sd):
    # The CPU clock misses waits (and sums BLAS threads): it could hide a change that waits.
    sequential = ScheduleProbe(Schedule.SEQUENTIAL, wall_sd=0.04, cpu_sd=cpu_sd, pair_s=2.0)
    choice = decide((sequential,), (0, 1), threads=2)
    assert choice.clock == Clock.WALL and "a Δ is wall-clock tok/s" in choice.clock_reason


def test_a_cached_choice_of_the_cpu_clock_runs_on_the_wall_clock(pilots, tmp_path):
    first = choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=2, fresh=True)
    (cached,) = tmp_path.glob("schedule-*.json")
    # as an earlier version wrote it
    cached.write_text(cached.read_text().replace('"clock": "wall"', '"clock": "cpu"'))
    again = choose_schedule(Schedule.AUTO, Env(backend="cpu"), {}, threads=2)
    assert pilots == [2] and again.clock == first.clock == Clock.WALL


def test_a_bad_schedule_is_one_line_and_exit_2(tmp_path, capsys):
    exp = tmp_path / "exp.yaml"
    exp.write_text(TINY.format(trials=2, schedule="together"))
    assert main(["run", str(exp), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "schedule" in err and "auto, duet, sequential" in err and str(exp) in err


# --- the runner -----------------------------------------------------------------------------------

TINY = """\
name: tiny-duet
models:
  - {{preset: tiny}}
variants:
  baseline: {{geglu: unfused, softcap: unfused, attention: manual}}
  compiled: {{geglu: compiled, softcap: compiled, attention: manual}}
  sdpa: {{geglu: unfused, softcap: unfused, attention: sdpa}}
comparisons: [[baseline, compiled], [baseline, sdpa]]
workloads: {{prompt_tokens: 12, gen_tokens: 3}}
trials: {trials}
warmup: 1
shares: 0
worker_rounds: 2
schedule: {schedule}
correctness: {{reference: baseline, tokens: 2}}
"""


@pytest.fixture(scope="module")
def duet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("duet-run")
    exp = folder / "exp.yaml"
    exp.write_text(TINY.format(trials=3, schedule="duet"))
    out = folder / "r.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        # a cache of its own: both workers write the weights, at once
        patch.setenv("XDG_CACHE_HOME", str(folder / "cache"))
        assert main(["run", str(exp), "--out", str(out), "--quiet"]) == 0
    return out


def test_a_duet_run_pairs_each_comparison_beside_itself_on_two_cores(duet_run: Path):
    results = read_results([duet_run])
    (header,) = results.of_kind("run")
    assert header["schedule_choice"]["schedule"] == "duet"
    assert header["trials"] == Trials.FIXED
    assert header["env"]["threads"] == 1  # one BLAS thread a worker: one core each
    timed = [t for t in results.of_kind("trial") if not t["warmup"]]
    by_round: dict[int, list[dict]] = {}
    for trial in timed:
        by_round.setdefault(trial["round"], []).append(trial)
    # 3 rounds of 2 comparisons, each a duet of two trials
    assert sorted(by_round) == list(range(6))
    for pair in by_round.values():
        a, b = pair
        assert {a["variant"], b["variant"]} in ({"baseline", "compiled"}, {"baseline", "sdpa"})
        assert a["beside"] == f"current/{b['variant']}" and b["beside"] == f"current/{a['variant']}"
        assert a["core"] != b["core"]
        assert a["process"] == b["process"]  # one pair of workers: one process label
        for trial in pair:
            assert trial["prefill_cpu_s"] > 0 and trial["gen_cpu_s"] > 0
            assert trial["started_unix_s"] <= trial["ended_unix_s"]
    # a duet of one build's variants keeps its pair, whatever worker_rounds says (2 here)
    assert len({t["process"] for t in timed}) == 1
    stop = results.of_kind("stop")[0]
    assert stop["schedule"] == "duet" and stop["rounds"] == 3
    # The correctness check rode on the two warm-up rounds, in the first worker, which ran every
    # variant on the check prompt: once per variant, no pass of its own.
    correctness = results.of_kind("correctness")
    assert sorted(c["variant"] for c in correctness) == ["baseline", "compiled", "sdpa"]
    assert all(c["passed"] and c["tokens_checked"] == 2 for c in correctness)
    # the two workers wrote the weights at once: once on the machine's time, never a negative load
    (spent,) = results.of_kind("time")
    assert spent["phases"]["machine"] > 0 and all(s >= 0 for s in spent["phases"].values())


def test_a_duet_run_reports_and_says_how_it_ran(duet_run: Path, tmp_path: Path):
    assert main(["report", str(duet_run), "--out", str(tmp_path / "rep")]) == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "Rounds: duet" in text and "fixed-n Student t interval" in text
    rows = list((tmp_path / "rep" / "deltas.csv").read_text().splitlines())
    assert len(rows) == 1 + 2 * 2  # two comparisons, prefill and gen


# --- the interval follows the design --------------------------------------------------------------

PR15587_BASELINES = [18777, 153.8, 6980, 99.1, 3957, 101.3, 531, 21.4]
PR15587_DELTAS_PCT = [16.6, 15.0, 15.8, 11.6, 10.5, 6.1, 11.7, 4.8]
SIZES = ["E2B", "E4B", "26B", "31B"]


def _pr15587_file(path: Path, rule: Trials, seed: int) -> Path:
    """PR 15587's eight rows at its 5 rounds (`trials: 5`), 1% lognormal noise on every trial."""
    rng = np.random.default_rng(seed)
    records = []
    for i, size in enumerate(SIZES):
        rounds = []
        for _ in range(5):
            base = [PR15587_BASELINES[2 * i + m] * rng.lognormal(0, 0.01) for m in (0, 1)]
            new = [
                PR15587_BASELINES[2 * i + m]
                * (1 + PR15587_DELTAS_PCT[2 * i + m] / 100)
                * rng.lognormal(0, 0.01)
                for m in (0, 1)
            ]
            rounds.append((base, new))
        records += trials(
            cell(f"{size} (2/35 layers)"),
            {
                "baseline": [tuple(b) for b, _ in rounds],
                "compiled": [tuple(n) for _, n in rounds],
            },
        )
    experiment = "name: pr15587\ntrials: 5\n"
    return results_file(path, records, experiment=experiment, trials=rule)


@pytest.mark.parametrize("seed", range(3))
def test_pr15587_at_its_five_fixed_rounds_reads_faster_on_every_row(tmp_path, seed):
    path = _pr15587_file(tmp_path / "fixed.jsonl", Trials.FIXED, seed)
    rows = stats.compare(read_results([path]).frame("trial"), "baseline", "compiled", METRICS)
    assert [row.verdict.word for row in rows] == ["faster"] * 8


def test_the_same_rounds_stopped_on_the_data_get_the_confidence_sequence(tmp_path):
    path = _pr15587_file(tmp_path / "adaptive.jsonl", Trials.AUTO, 0)
    rows = stats.compare(read_results([path]).frame("trial"), "baseline", "compiled", METRICS)
    # unbounded below 6 rounds at a table's Holm level: the price of looking
    assert {row.verdict.word for row in rows} == {"inconclusive"}


def test_pooled_runs_are_never_read_as_fixed(tmp_path):
    one = _pr15587_file(tmp_path / "a.jsonl", Trials.FIXED, 0)
    frame = read_results([one]).frame("trial")
    assert stats.fixed_rounds(frame)
    two = frame.assign(run_id=np.where(frame["round"] < 3, "run1", "run2"))
    assert not stats.fixed_rounds(two)


def test_the_fixed_n_interval_is_students_t():
    rng = np.random.default_rng(1)
    base, new = 100 * rng.lognormal(0, 0.02, 7), 103 * rng.lognormal(0, 0.02, 7)
    est = paired_estimate(base, new, fixed_rounds=True)
    r = np.log(new) - np.log(base)
    half = 2.4469118511449692 * r.std(ddof=1) / np.sqrt(7)  # t(0.975, 6)
    assert np.log(est.low) == pytest.approx(r.mean() - half)
    assert np.log(est.high) == pytest.approx(r.mean() + half)
    (row,) = adjust([est])
    assert verdict(row).word == ("faster" if est.low > 1 else "inconclusive")
    sequence = paired_estimate(base, new)
    assert sequence.high - sequence.low > est.high - est.low


@pytest.mark.parametrize(
    ("stopping", "fixed"), [("fixed", True), ("adaptive", False), (None, False)]
)
def test_a_results_file_of_format_3_reads_its_rule_from_stopping(tmp_path, stopping, fixed):
    # format 3 said only whether the rounds were fixed; a header without it stopped on its data
    path = _pr15587_file(tmp_path / "old.jsonl", Trials.FIXED, 0)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    del lines[0]["trials"]
    lines[0] |= {"format": 3, **({"stopping": stopping} if stopping else {})}
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert stats.fixed_rounds(read_results([path]).frame("trial")) == fixed


def test_a_duet_runs_report_names_the_sizes_whose_rounds_ran_sequentially():
    run = RunHeader(run_id="r1", schedule_choice=ScheduleChoice("duet", "measured faster"))

    def stop(size: str, schedule: str) -> StopRecord:
        cell = CellFields(
            run_id="r1", cell=f"{size}|w", model_key=size, size=size, workload="w",
            prompt_tokens=8, gen_tokens=2, batch=1,
        )  # fmt: skip
        return StopRecord(cell=cell, rounds=6, reason="out of reach", schedule=schedule)

    stops = [stop("E2B", "duet"), stop("31B", "sequential")]
    assert sequential_sizes(stops, [run], "w") == ["31B"]
    assert sequential_sizes(stops, [run], "another workload") == []
    note = design_note([run], ["31B"])
    assert "(measured faster); 31B ran sequentially" in note
    assert "ran sequentially" not in design_note([run], [])
