"""`trials: plan` runs on the tiny presets: rounds fixed before each cell's first (none, or at least
the minimum), the costs and spreads cached for the next run, which plans from its start, a cell the
plan gives no rounds never loaded, and where the time went on record."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from fusebench.commands import main
from fusebench.core.experiment import MIN_PLANNED_ROUNDS, Trials
from fusebench.core.results import read_results

EXPERIMENT = """\
name: tiny-plan
models:
  - {preset: tiny}
  - {preset: tiny-moe}
variants:
  baseline: {geglu: unfused, softcap: unfused, attention: manual}
  compiled: {geglu: compiled, softcap: compiled, attention: manual}
comparisons: [[baseline, compiled]]
workloads: {prompt_tokens: 12, gen_tokens: 3}
correctness: {tokens: 2}
trials: plan
budget_s: 40
max_rounds: 12
margin_pct: 5
shares: 0
warmup: 2
threads: 1
schedule: sequential
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> tuple[Path, Path, str]:
    """Two runs of the experiment with a cache of their own: the second finds the first's."""
    folder = tmp_path_factory.mktemp("plan-runs")
    exp = folder / "exp.yaml"
    exp.write_text(EXPERIMENT)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        outs = [folder / "first.jsonl", folder / "second.jsonl"]
        assert main(["run", str(exp), "--out", str(outs[0]), "--quiet"]) == 0
        import io
        from contextlib import redirect_stdout

        said = io.StringIO()
        with redirect_stdout(said):
            assert main(["run", str(exp), "--out", str(outs[1])]) == 0
    # As the two runs left it, for tests that must not see what other tests change in `cache`.
    shutil.copytree(cache, _pristine(cache))
    return outs[0], outs[1], said.getvalue()


def _pristine(cache: Path) -> Path:
    return cache.parent / f"{cache.name}-after-two-runs"


def test_each_cell_gets_its_planned_rounds_none_or_at_least_the_minimum(two_runs):
    for out in two_runs[:2]:
        results = read_results([out])
        (header,) = results.of_kind("run")
        assert header["trials"] == Trials.PLAN  # the fixed-n t interval
        for stop in results.of_kind("stop"):
            assert stop["reason"] in ("planned", "budget")
            assert stop["rounds"] == 0 or MIN_PLANNED_ROUNDS <= stop["rounds"] <= 12
        # The correctness check rode on the warm-up: one record per variant and cell.
        assert len(results.of_kind("correctness")) == 2 * 2


def test_a_run_records_where_its_time_went(two_runs):
    (spent,) = read_results([two_runs[0]]).time_spent()
    assert {"probes", "load", "warm-up", "rounds", "stop", "other"} <= set(spent.phases)
    assert all(seconds >= 0 for seconds in spent.phases.values())
    assert spent.total_s == pytest.approx(sum(spent.phases.values()), abs=0.01)


def test_the_second_run_plans_from_its_start_on_what_the_first_measured(two_runs, cache: Path):
    (path,) = cache.glob("fusebench/plan-v1-*-t1-sequential.json")
    measured = json.loads(path.read_text())
    assert len(measured) == 2
    for cell in measured.values():
        assert cell["round_s"] > 0 and cell["warmup_s"] > 0 and len(cell["sds"]) == 2
    said = two_runs[2]
    assert "plan: about" in said and "costs and spreads measured here" in said
    assert said.index("plan: about") < said.index("loaded")
    assert "time: " in said and "% measuring" in said


def test_a_machines_first_run_settles_its_first_cell_with_one_more_warm_up_round(two_runs):
    """The first run's first cell warms up once more (its first round may compile the kernels, so
    the plan's pace comes from the second); every other cell, and the second run, as asked."""
    warmups = [2 + 1, 2]  # EXPERIMENT's warmup: 2, in the order the cells ran
    for out, asked in ((two_runs[0], warmups), (two_runs[1], [2, 2])):
        trials = read_results([out]).of_kind("trial")
        order = list(dict.fromkeys(t["cell"] for t in trials))
        counts = [sum(t["warmup"] and t["cell"] == cell for t in trials) for cell in order]
        assert counts == [n * 2 for n in asked]  # each warm-up round runs both variants


def test_a_warm_up_runs_the_decode_steps_its_check_reads_and_a_round_all_of_them(two_runs):
    """gen_tokens 3 and the check's 2 greedy tokens (as the main job): a warm-up trial decodes 1
    step, a timed trial 2."""
    trials = read_results([two_runs[0]]).of_kind("trial")
    assert {len(t["step_s"]) for t in trials if t["warmup"]} == {1}
    assert {len(t["step_s"]) for t in trials if not t["warmup"]} == {2}


def test_the_cache_keeps_how_a_round_splits_between_prefill_and_generation(two_runs, cache):
    (path,) = cache.glob("fusebench/plan-v1-*-t1-sequential.json")
    for cell in json.loads(path.read_text()).values():
        assert cell["prefill_s"] > 0 and cell["gen_s"] > 0
        assert cell["prefill_s"] + cell["gen_s"] <= cell["round_s"]  # the trials' own clocks
        assert cell["prefill_bytes"] > 0


def test_a_cell_not_measured_is_scaled_by_its_flops_and_bytes_at_the_measured_paces():
    from fusebench.measure.run.planning import CellMeasure
    from fusebench.measure.run.scaling import PlanWork, Scale

    # 2 s of prefill: 1 s reading 1 GB at the generation's 1 s a GB, 1 s for 1e11 FLOPs;
    # the round 10% beyond its trials' clocks.
    known = CellMeasure(
        load_s=2.0, warmup_s=3.3, warmups=1, round_s=3.3, after_s=0.33, weight_bytes=10**9,
        round_flops=1e11, round_bytes=1e9, prefill_bytes=1e9, prefill_s=2.0, gen_s=1.0,
    )  # fmt: skip
    scale = Scale.of([known])
    assert scale is not None
    other = PlanWork(
        round_flops=3e11, round_bytes=2e9, prefill_bytes=2e9, weight_bytes=0, warmups=1, rows=2
    )
    assert scale.round_s(other) == pytest.approx(1.1 * (3.0 + 4.0))
    # a cache from before the split: its round counts as all prefill, at its FLOPs
    old = CellMeasure(
        load_s=2.0, warmup_s=3.3, warmups=1, round_s=3.3, after_s=0.33, weight_bytes=10**9,
        round_flops=1e11, round_bytes=1e9,
    )  # fmt: skip
    before = Scale.of([old])
    assert before is not None and before.round_s(other) == pytest.approx(3 * 3.3)


def test_a_cell_the_plan_gives_no_rounds_is_never_loaded(tmp_path: Path, two_runs, cache: Path):
    (path,) = cache.glob("fusebench/plan-v1-*-t1-sequential.json")
    measured = json.loads(path.read_text())
    moe = next(key for key in measured if key.startswith("tiny-moe"))
    measured[moe]["round_s"] = 1000.0  # as if its rounds took 1000 s here
    path.write_text(json.dumps(measured))
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    out = tmp_path / "r.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        assert main(["run", str(exp), "--out", str(out), "--quiet"]) == 0
    results = read_results([out])
    (skip,) = results.of_kind("skip")
    assert skip["model"] == "tiny-moe" and skip["reason"].startswith("the plan gives it no rounds")
    assert "would need about" in skip["reason"]
    assert {t["model"] for t in results.of_kind("trial")} == {"tiny"}


def test_budget_on_the_command_line_replaces_the_experiments(tmp_path: Path, capsys):
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT.replace("trials: plan", "trials: 3").replace("budget_s: 40\n", ""))
    exp.write_text(exp.read_text().replace("max_rounds: 12\n", ""))
    assert main(["run", str(exp), "--budget", "20m", "--dry-run"]) == 2
    assert "a budget needs trials: plan, auto or budget" in capsys.readouterr().err


def test_rows_twice_as_noisy_as_the_pilot_send_the_machine_to_be_measured_again(
    tmp_path: Path, monkeypatch
):
    from fusebench.core.header import Env, ScheduleChoice, ScheduleProbe
    from fusebench.measure.machine.threads import cache_path as threads_cache
    from fusebench.measure.run.pilot import cache_path as schedule_cache
    from fusebench.measure.run.runner import stale_machine_line

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = Env(backend="cpu", cpu="Test CPU", threads=1)
    cached = [threads_cache(env), schedule_cache(env, 1)]
    for path in cached:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    pilot = ScheduleProbe("sequential", wall_sd=0.01, cpu_sd=0.01, pair_s=2.0)
    choice = ScheduleChoice("sequential", "measured", (pilot,))

    class Planner:
        def __init__(self, spread: float) -> None:
            self.spread = spread

        def run_spread(self) -> float:
            return self.spread

    assert stale_machine_line(Planner(0.019), choice, env, 1) is None
    assert all(path.exists() for path in cached)
    line = stale_machine_line(Planner(0.03), choice, env, 1)
    assert line is not None and "3.0x the 1.0% the cached pilot measured" in line
    assert not any(path.exists() for path in cached)


def _weighing_cache(tmp_path: Path, cache: Path, spreads: dict[int, float]) -> Path:
    """A copy of the two runs' cache with the thread probe's choice (1 thread), the same costs at
    every core's thread count, and every row's spread set to `spreads[threads]` at each count (set,
    not measured, so what the weighing decides does not depend on how the tiny runs scattered)."""
    import os

    copy = tmp_path / "cache"
    shutil.copytree(_pristine(cache), copy)
    (plan,) = copy.glob("fusebench/plan-v1-*-t1-sequential.json")
    key = plan.name.removeprefix("plan-v1-").removesuffix("-t1-sequential.json")
    cores = os.cpu_count() or 1
    measured = json.loads(plan.read_text())
    for threads, spread in spreads.items():
        for cell in measured.values():
            cell["sds"] = {row: spread for row in cell["sds"]}
            cell["pooled_sds"] = {}
        name = f"plan-v1-{key}-t{cores if threads > 1 else 1}-sequential.json"
        plan.with_name(name).write_text(json.dumps(measured))
    (peak,) = copy.glob(f"fusebench/peak-v3-{key}-t1.json")
    shutil.copy(peak, peak.with_name(f"peak-v3-{key}-t{cores}.json"))
    probe = {"threads": 1, "settings": [], "reason": "the thread probe chose 1"}
    (copy / "fusebench" / f"threads-v2-{key}.json").write_text(json.dumps(probe))
    return copy


@pytest.mark.parametrize(("every_core_sd", "threads"), [(0.08, 1), (0.01, None)])
def test_auto_threads_weigh_this_experiments_own_runs_at_each_thread_count(
    tmp_path: Path, two_runs, cache: Path, every_core_sd: float, threads: int | None
):
    # Measured alike at both counts, the probe's 1 thread stays (the other must win at its
    # spreads' upper bounds); measured far quieter at every core, every core is chosen.
    import os

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: nothing to weigh")
    copy = _weighing_cache(tmp_path, cache, {1: 0.08, 2: every_core_sd})
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT.replace("threads: 1\n", "threads: auto\n"))
    out = tmp_path / "r.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(copy))
        assert main(["run", str(exp), "--out", str(out), "--quiet"]) == 0
    (header,) = read_results([out]).of_kind("run")
    choice = header["threads_choice"]
    assert "this experiment's runs here" in choice["reason"]
    assert choice["threads"] == (threads or os.cpu_count())
    assert header["env"]["threads"] == choice["threads"]


def test_the_spreads_upper_bound_covers_sigma_at_its_stated_rate():
    # σ's 90% upper bound from n rounds: s × factor covers σ in 90% of samples of normal rounds.
    import numpy as np

    from fusebench.measure.run.weighing import sd_upper_factor

    rounds = np.random.default_rng(3).normal(0.0, 1.0, size=(40_000, MIN_PLANNED_ROUNDS))
    covered = np.mean(rounds.std(axis=1, ddof=1) * sd_upper_factor() >= 1.0)
    assert covered == pytest.approx(0.90, abs=0.01)
    assert sd_upper_factor(30) < sd_upper_factor(8)


def test_another_configuration_wins_only_at_its_spreads_upper_bounds():
    from fusebench.measure.run.weighing import Configuration, PlannedRows, weigh

    one, two = Configuration(1, "sequential"), Configuration(2, "sequential")
    duet = Configuration(1, "duet")
    chosen = PlannedRows(one, expected=11.5, seconds=600, bounded=10.7, bounded_seconds=600)
    ahead_at_its_measures = PlannedRows(two, 12.0, 600, bounded=7.4, bounded_seconds=600)
    surely_ahead = PlannedRows(two, 15.0, 600, bounded=12.0, bounded_seconds=600)
    kept, why = weigh(chosen, [ahead_at_its_measures], rows=16)
    assert kept == one and "none other surely better" in why
    assert "1 thread, sequential 11.5 rows in 600 s" in why
    assert "7.4 in 600 s at the spreads' 90% upper bounds" in why
    switched, why = weigh(chosen, [ahead_at_its_measures, surely_ahead], rows=16)
    assert switched == two and why.endswith("2 threads, sequential surely better")
    # Every row decided either way: the one that surely takes less time wins.
    decided = PlannedRows(one, 15.5, seconds=400, bounded=15.5, bounded_seconds=470)
    sooner = PlannedRows(duet, 15.5, seconds=250, bounded=15.5, bounded_seconds=330)
    not_surely_sooner = PlannedRows(duet, 15.5, seconds=300, bounded=15.5, bounded_seconds=420)
    assert weigh(decided, [sooner], rows=16)[0] == duet
    assert weigh(decided, [not_surely_sooner], rows=16)[0] == one


def test_a_plans_spreads_pool_the_cells_last_runs():
    from fusebench.measure.run.planning import POOLED_RUNS, pool_spreads

    first, second = {"prefill": 0.02, "gen": 0.03}, {"prefill": 0.04, "new row": 0.05}
    pooled = pool_spreads(first, 1, second)
    assert pooled["prefill"] == pytest.approx(((0.02**2 + 0.04**2) / 2) ** 0.5)
    assert pooled["new row"] == 0.05 and "gen" not in pooled  # the latest run's rows
    # Past POOLED_RUNS the newest run counts as one of POOLED_RUNS, however many came before.
    steady = pool_spreads({"prefill": 0.02}, 1000, {"prefill": 0.04})["prefill"] ** 2
    assert steady == pytest.approx(((POOLED_RUNS - 1) * 0.02**2 + 0.04**2) / POOLED_RUNS)


def test_a_later_run_caches_spreads_pooled_over_the_runs(two_runs, cache: Path):
    (path,) = cache.glob("fusebench/plan-v1-*-t1-sequential.json")
    cells = json.loads(path.read_text()).values()
    pooled = [cell for cell in cells if cell["runs"] >= 2]
    assert pooled  # a cell measured by the first run and again by a later one
    for cell in pooled:
        assert set(cell["pooled_sds"]) == set(cell["sds"])
        assert all(sd > 0 for sd in cell["pooled_sds"].values())


def test_every_row_is_planned_at_the_runs_spread_once_it_has_one(tmp_path: Path):
    """A size whose own pooled spread is stale (one noisy run, never renewed while it was skipped)
    is planned at the median of every pool, and at the spread this run's rows showed once the run
    has some."""
    from fusebench.core.spec import parse_experiment
    from fusebench.measure.run.planning import CellMeasure, CellSetup, RunPlanner
    from fusebench.measure.run.scaling import PlanWork

    exp = parse_experiment(EXPERIMENT)
    first, second = exp.cells()
    work = PlanWork(
        round_flops=1e9, round_bytes=1e8, prefill_bytes=1e7, weight_bytes=10**8, warmups=1, rows=2
    )
    quiet = CellMeasure(
        load_s=1.0, warmup_s=1.0, warmups=1, round_s=1.0, after_s=0.1, weight_bytes=10**8,
        round_flops=1e9, round_bytes=1e8, sds={"prefill": 0.02, "gen": 0.04},
    )  # fmt: skip
    planner = RunPlanner(exp, [first, second], ["current"], tmp_path / "plan.json",
                         work=lambda cell: work, rows=4)  # fmt: skip
    planner.known[planner._signature(first)] = quiet
    planner.known[planner._signature(second)] = replace(quiet, sds={"prefill": 0.3, "gen": 0.3})

    def planned() -> tuple[float, ...]:
        plan = planner.make(600.0)
        assert plan is not None
        (cell,) = [c.cost for c in plan.cells if c.cost.cell == second.key]
        return cell.sds

    assert planned() == pytest.approx((0.17, 0.17))  # the pools' median: 0.02, 0.04, 0.3, 0.3
    planner.fix(first, CellSetup(1.0, 1.0, 1.0, 0.6, 0.3), 600.0)
    planner.measured(first, replace(quiet, sds={"prefill": 0.01, "gen": 0.03}))
    assert planned() == pytest.approx((0.02, 0.02))  # the median of this run's rows


def test_a_first_runs_first_cell_is_fixed_again_on_the_spread_its_rounds_showed(tmp_path: Path):
    """With no spread known here the first cell gets the fewest rounds a plan gives; once they are
    done the plan fixes it again on their spreads: more rounds where they scatter, never fewer
    than it ran, and its first-stage spreads are not pooled as if an earlier run's."""
    from fusebench.core.spec import parse_experiment
    from fusebench.measure.run.planning import CellMeasure, CellSetup, RunPlanner
    from fusebench.measure.run.scaling import PlanWork

    exp = parse_experiment(EXPERIMENT)
    first, second = exp.cells()
    work = PlanWork(
        round_flops=1e9, round_bytes=1e8, prefill_bytes=1e7, weight_bytes=10**8, warmups=1, rows=2
    )
    planner = RunPlanner(exp, [first, second], ["current"], tmp_path / "plan.json",
                         work=lambda cell: work, rows=4)  # fmt: skip
    assert not planner.spread_known()
    rounds, _ = planner.fix(first, CellSetup(1.0, 1.0, 0.1, 0.06, 0.03), 600.0)
    assert rounds == MIN_PLANNED_ROUNDS
    noisy = {"prefill": 0.03, "gen": 0.03}
    again, allowance = planner.fix_again(first, noisy, 0.1, 600.0)
    assert rounds < again <= exp.rounds and 0 < allowance <= 600.0
    assert planner.fix_again(first, {"prefill": 0.001, "gen": 0.001}, 0.1, 600.0)[0] == again
    assert planner.known[planner._signature(first)].sds == {}  # `measured` writes them
    planner.measured(first, CellMeasure(
        load_s=1.0, warmup_s=1.0, warmups=1, round_s=0.1, after_s=0.1, weight_bytes=10**8,
        round_flops=1e9, round_bytes=1e8, sds=noisy,
    ))  # fmt: skip
    assert planner.known[planner._signature(first)].pooled_sds == {}  # one run: nothing pooled
    assert planner.spread_known()


# One model, op shares on; max_rounds, not the budget, ends its rounds.
SHARES_EXPERIMENT = (
    EXPERIMENT.replace("name: tiny-plan\n", "name: tiny-plan-shares\n")
    .replace("  - {preset: tiny-moe}\n", "")
    .replace("budget_s: 40", "budget_s: 600")  # 8 rounds fit even on a busy machine
    .replace("max_rounds: 12", "max_rounds: 8")
    .replace("shares: 0", "shares: 1")
    .replace("warmup: 2", "warmup: 1")
)


def _shares_run(
    folder: Path, cache: Path, name: str, code: str, shares: int = 1
) -> tuple[Path, str]:
    """A run of SHARES_EXPERIMENT (with `shares` op-share rounds) as if from a clean checkout whose
    commit `code` names, its rows taken as decided (so it times op shares whatever the tiny rounds
    scatter)."""
    import io
    from contextlib import redirect_stdout

    from fusebench.measure.run import cellstop, runner

    exp = folder / "exp.yaml"
    exp.write_text(SHARES_EXPERIMENT.replace("shares: 1", f"shares: {shares}"))
    out = folder / f"{name}.jsonl"
    said = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(said):
        patch.setenv("XDG_CACHE_HOME", str(cache))
        patch.setattr(runner, "shares_code", lambda env, exp: code)
        patch.setattr(cellstop.CellStop, "forecasts", lambda self, rounds: {})
        assert main(["run", str(exp), "--out", str(out)]) == 0
    return out, said.getvalue()


def test_a_run_of_the_same_code_writes_the_cached_op_shares_instead_of_timing_them(
    tmp_path: Path,
):
    cache = tmp_path / "cache"
    first, _ = _shares_run(tmp_path, cache, "first", "commit-a mlx 0", shares=2)
    timed = read_results([first]).of_kind("share")
    assert timed and all(share.get("reused_from") is None for share in timed)
    (path,) = cache.glob("fusebench/plan-v1-*.json")
    (cell,) = json.loads(path.read_text()).values()
    assert cell["shares"]["code"] == "commit-a mlx 0" and cell["shares_s"] > 0
    assert len(cell["shares"]["samples"]) == len(timed)

    # the experiment now asks one round of the two cached: that one is written
    second, said = _shares_run(tmp_path, cache, "second", "commit-a mlx 0")
    reused = read_results([second]).of_kind("share")
    assert {share["round"] for share in timed} == {0, 1}
    assert len(reused) == sum(share["round"] == 0 for share in timed)
    assert {share["round"] for share in reused} == {0}
    assert {share["reused_from"] for share in reused} == {cell["shares"]["measured_at"]}
    assert "op shares as timed here at" in said
    report = tmp_path / "report"
    assert main(["report", str(second), "--out", str(report)]) == 0
    assert "an earlier run timed on this machine" in (report / "report.md").read_text()

    # another commit times them again
    third, said = _shares_run(tmp_path, cache, "third", "commit-b mlx 0")
    assert all(share.get("reused_from") is None for share in read_results([third]).of_kind("share"))
    assert "op shares as timed here at" not in said


def test_a_cell_given_no_timed_rounds_times_no_op_shares(tmp_path: Path, capsys):
    exp = tmp_path / "exp.yaml"
    # the run's one-second preflight alone spends a 1 s budget: the plan gives the cell no rounds
    exp.write_text(SHARES_EXPERIMENT.replace("budget_s: 600", "budget_s: 1"))
    out = tmp_path / "r.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        assert main(["run", str(exp), "--out", str(out)]) == 0
    results = read_results([out])
    assert not results.of_kind("share")
    assert all(trial["warmup"] for trial in results.of_kind("trial"))
    said = capsys.readouterr().out
    assert "op shares skipped: no timed rounds to weigh them against" in said
    # its closing line names no spread, as it measured none
    assert "no row got timed rounds here" in said and "spread here was" not in said


def test_op_shares_are_keyed_by_the_ops_files_not_the_commit(tmp_path: Path, monkeypatch):
    from fusebench.core.header import Env
    from fusebench.core.spec import load_experiment
    from fusebench.measure.run import cellshares

    package = tmp_path / "ops_under_test"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "geglu.py").write_text("SPEED = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cellshares, "SHARES_SOURCES", ("ops_under_test",))
    (tmp_path / "exp.yaml").write_text(SHARES_EXPERIMENT)
    exp = load_experiment(tmp_path / "exp.yaml")
    env = Env(git_commit="a" * 40, git_dirty=False, mlx="0.32.4")
    first = cellshares.shares_code(env, exp)
    # another commit, or a dirty tree, with the same files: the same code
    assert cellshares.shares_code(replace(env, git_commit="b" * 40, git_dirty=True), exp) == first
    assert cellshares.shares_code(replace(env, mlx="0.31.2"), exp) != first
    (package / "geglu.py").write_text("SPEED = 2\n")
    changed = cellshares.shares_code(env, exp)
    assert changed != first
    plugin = tmp_path / "my_ops.py"
    plugin.write_text("# registers a variant\n")
    with_plugin = replace(exp, plugins=(str(plugin),))
    before = cellshares.shares_code(env, with_plugin)
    assert before != changed
    plugin.write_text("# registers another variant\n")
    assert cellshares.shares_code(env, with_plugin) != before
