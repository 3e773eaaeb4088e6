"""The clock a row's Δ and interval use (analysis.clocks): the run's, chosen by its pilot and
recorded in the header, unless the row's two clocks disagree; tok/s stays the wall clock's."""

from __future__ import annotations

import json

import numpy as np
from conftest import cell, fusebench_here, results_file

from fusebench.analysis import stats
from fusebench.analysis.clocks import clocked_estimate
from fusebench.core.fileformat import Clock
from fusebench.core.header import RunHeader
from fusebench.core.results import read_results
from fusebench.present.sections.context import design_note

EXPERIMENT = """\
name: clocks
models:
  - {preset: e2b, layers: 2, dtype: float32}
variants:
  baseline: {geglu: unfused}
  compiled: {geglu: compiled}
workloads: {prompt_tokens: 128, gen_tokens: 4}
trials: 16
"""
ROUNDS = 16


def _rounds(seed: int, stolen: float, cpu_delta: float = 0.10):
    """Per round, each arm's (wall s, CPU s) for a new arm 10% faster: both clocks carry the same
    3% trial noise; the wall clock also what was stolen (exponential, mean `stolen`)."""
    rng = np.random.default_rng(seed)
    cpu = {
        "baseline": np.exp(rng.normal(0.0, 0.03, ROUNDS)),
        "new": np.exp(rng.normal(np.log(1.0 - cpu_delta), 0.03, ROUNDS)),
    }
    wall = {arm: s * (1.0 + rng.exponential(stolen, ROUNDS)) for arm, s in cpu.items()}
    return wall, cpu


def test_the_cpu_clock_leaves_out_stolen_time_and_keeps_wall_tok_s():
    wall, cpu = _rounds(seed=1, stolen=0.15)
    tps = {arm: 100.0 / s for arm, s in wall.items()}
    cpu_tps = {arm: 100.0 / s for arm, s in cpu.items()}
    on_wall = clocked_estimate(tps["baseline"], tps["new"], None, None, Clock.WALL)
    on_cpu = clocked_estimate(
        tps["baseline"], tps["new"], cpu_tps["baseline"], cpu_tps["new"], Clock.CPU
    )
    assert on_wall.clock == Clock.WALL and on_cpu.clock == Clock.CPU and not on_cpu.note
    width = {c.clock: c.estimate.high - c.estimate.low for c in (on_wall, on_cpu)}
    assert width[Clock.CPU] < width[Clock.WALL] / 2
    # Baseline and New stay wall-clock tok/s
    assert on_cpu.estimate.baseline_gmean == on_wall.estimate.baseline_gmean
    assert on_cpu.estimate.new_gmean == on_wall.estimate.new_gmean
    assert abs(on_cpu.estimate.ratio - 1 / 0.9) < 0.03


def test_a_row_whose_clocks_disagree_falls_back_to_the_wall_clock_and_says_so():
    # the change saved CPU time but not wall time (work moved off the worker's CPU)
    wall, cpu = _rounds(seed=2, stolen=0.0, cpu_delta=0.10)
    wall["new"] = wall["baseline"] * np.exp(np.random.default_rng(3).normal(0, 0.01, ROUNDS))
    tps = {arm: 100.0 / s for arm, s in wall.items()}
    cpu_tps = {arm: 100.0 / s for arm, s in cpu.items()}
    clocked = clocked_estimate(
        tps["baseline"], tps["new"], cpu_tps["baseline"], cpu_tps["new"], Clock.CPU
    )
    assert clocked.clock == Clock.WALL and "clocks disagree" in clocked.note
    assert abs(clocked.estimate.ratio - 1.0) < 0.02


def test_a_row_without_cpu_seconds_stays_on_the_wall_clock():
    clocked = clocked_estimate([100.0, 101.0, 99.0], [110.0, 111.0, 108.0], None, None, Clock.CPU)
    assert clocked.clock == Clock.WALL and "no CPU seconds" in clocked.note


def _trial(wall_s: float, cpu_s: float, **fields) -> dict:
    """A timed trial of the tiny cell whose prefill took half of `wall_s` and decode a quarter,
    on each clock."""
    prefill_s, gen_s = 0.5 * wall_s, 0.25 * wall_s
    return {
        "kind": "trial",
        **cell(),
        "warmup": False,
        "prefill_tps": 128 / prefill_s,
        "gen_tps": 4 / gen_s,
        "prefill_s": prefill_s,
        "gen_s": gen_s,
        "prefill_cpu_s": 0.5 * cpu_s,
        "gen_cpu_s": 0.25 * cpu_s,
        **fields,
    }


def _file(tmp_path, clock: str | None):
    wall, cpu = _rounds(seed=4, stolen=0.15)
    records = [
        _trial(wall[arm][r], cpu[arm][r], variant=variant, round=r)
        for arm, variant in (("baseline", "baseline"), ("new", "compiled"))
        for r in range(ROUNDS)
    ]
    choice = None
    if clock:
        choice = {"schedule": "sequential", "reason": "asked for", "probes": [], "cores": None}
        choice |= {"clock": clock, "clock_reason": "the pilot's pairs scattered less"}
    extra = {"schedule_choice": choice} if choice else {}
    return results_file(tmp_path / "r.jsonl", records, experiment=EXPERIMENT, **extra)


def test_a_run_on_the_cpu_clock_is_compared_and_described_on_it(tmp_path):
    results = read_results([_file(tmp_path, "cpu")])
    rows = stats.compare(results.frame("trial"), "baseline", "compiled", ["prefill", "gen"])
    assert {row.clock for row in rows} == {Clock.CPU}
    note = design_note(list(results.headers.values()))
    assert "CPU clock (the pilot's pairs scattered less)" in note and "wall-clock tok/s" in note


def test_a_run_from_before_the_clock_reads_as_the_wall_clock(tmp_path):
    results = read_results([_file(tmp_path, None)])
    rows = stats.compare(results.frame("trial"), "baseline", "compiled", ["prefill", "gen"])
    assert {row.clock for row in rows} == {Clock.WALL} and not any(r.clock_note for r in rows)
    (run,) = results.headers.values()
    assert isinstance(run, RunHeader) and run.clock == Clock.WALL


def test_the_gate_pools_every_variant_on_the_cpu_clock_and_says_which_clock(tmp_path):
    wall, cpu = _rounds(seed=5, stolen=0.15, cpu_delta=0.0)
    records = [
        _trial(wall[arm][r], cpu[arm][r], build=build, variant=variant, round=r)
        for arm, build in (("baseline", "reference"), ("new", "current"))
        for variant in ("baseline", "compiled")
        for r in range(ROUNDS)
    ]
    choice = {"schedule": "duet", "reason": "asked for", "probes": [], "cores": [0, 1]}
    choice |= {"clock": "cpu", "clock_reason": "measured"}
    path = results_file(
        tmp_path / "ab.jsonl", records, experiment=EXPERIMENT, schedule_choice=choice
    )
    rows = stats.compare_builds(read_results([path]).frame("trial"))
    assert {(row.variant, row.clock) for row in rows} == {
        (v, Clock.CPU) for v in ("baseline", "compiled", stats.ALL_VARIANTS)
    }
    done = fusebench_here("check", str(path), "--format", "json", cwd=tmp_path)
    assert done.returncode in (0, 1, 3), done.stderr
    document = json.loads(done.stdout)
    assert {v["clock"] for v in document["verdicts"] if v["check"] == "build"} == {"cpu"}
