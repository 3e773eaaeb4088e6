"""`trials: plan` runs on the tiny presets: rounds fixed before each cell's first (none, or at least
the minimum), the costs and spreads cached for the next run, which plans from its start, a cell the
plan gives no rounds never loaded, and where the time went on record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fusebench.commands import main
from fusebench.core.results import read_results
from fusebench.core.spec import MIN_PLANNED_ROUNDS, Trials

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
    return outs[0], outs[1], said.getvalue()


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
    assert "plan for the" in said and "costs and spreads measured here" in said
    assert said.index("plan for the") < said.index("loaded")
    assert "time: " in said and "% measuring" in said


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
