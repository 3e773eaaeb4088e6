"""Two builds started alike (issue 75): equivalent places that rotate between worker pairs, the
builds' order in a round rotating too, each worker's placement recorded and compared, and the
control arm whose identical builds qualify the gate's setup."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, tree_copy

from fusebench.analysis import gate, stats
from fusebench.analysis.placement import summarize_placement
from fusebench.core.placement import Placement, WorkerRecord
from fusebench.measure.builds.places import places_for, tree_parts
from fusebench.measure.run.jobs import RunOptions, run_builds
from fusebench.measure.run.schedules.sequential import round_plan
from fusebench.measure.run.session import CURRENT, Build


def test_a_checkout_copies_what_its_workers_import(tmp_path: Path):
    assert tree_parts(ROOT) == ["bench", "experiments", "models", "pyproject.toml"]
    installed = tmp_path / "site-packages"
    (installed / "fusebench").mkdir(parents=True)
    (installed / "models").mkdir()  # another package of the same environment: not copied
    assert tree_parts(installed) == ["fusebench"]


def test_every_set_of_places_has_equal_paths_and_the_slots_rotate(tmp_path: Path):
    reference = Build("reference", tree_copy(tmp_path / "reference"))
    control = Build("control", reference.root)
    with places_for([CURRENT, reference, control]) as places:
        sets = []
        for _ in range(3):
            sets.append(builds := places.next())
            roots = [build.root for build in builds]
            assert len({len(str(root)) for root in roots}) == 1
            assert len({root.parent for root in roots}) == 1
            assert all((root / "bench" / "measure" / "launch.py").is_file() for root in roots)
            assert [build.name for build in builds] == ["current", "reference", "control"]
        # over three sets every build held every slot once
        for i in range(3):
            assert sorted(builds[i].slot for builds in sets) == ["a", "b", "c"]
        # an earlier set's copies are gone once the next set is made
        assert not sets[0][0].root.exists() and sets[2][0].root.exists()
        # the current build's copy holds this tree's code, byte-compiled once
        copied = sets[2][0].root / "bench" / "measure" / "launch.py"
        assert copied.read_bytes() == (ROOT / "bench" / "measure" / "launch.py").read_bytes()
        assert list((copied.parent / "__pycache__").glob("launch.*.pyc"))
        root = places.root
    assert not root.exists()


def test_the_compared_builds_go_first_in_half_the_pairs_and_the_control_moves():
    builds = ["current", "reference", "control"]
    turns = [round_plan(["a", "b"], builds, 0, pair) for pair in range(6)]
    # pairs 0-5: who runs variant "a" (the control's in pairs 0, 2, 4) in what order
    assert [[b for b, v in plan if v == "a"] for plan in turns[::2]] == [
        ["current", "reference", "control"],
        ["control", "current", "reference"],
        ["current", "control", "reference"],
    ]
    firsts = [next(b for b, _ in plan if b != "control") for plan in turns]
    assert firsts == ["current", "reference"] * 3  # of the two compared, each first half the time
    plan = round_plan(["a", "b"], builds, 1, 1)
    # within a pair, strict turns: each variant in every build back to back; the control runs
    # one variant a pair, the pairs taking the variants in turn
    assert plan == [
        ("reference", "b"), ("current", "b"), ("control", "b"), ("reference", "a"), ("current", "a")
    ]  # fmt: skip
    assert [v for b, v in round_plan(["a", "b"], builds, 0, 2) if b == "control"] == ["a"]
    assert round_plan(["a"], ["current"], 0, 3) == [("current", "a")]


def test_the_control_arm_runs_with_sequential_rounds_only():
    reference = Build("reference", ROOT)
    options = RunOptions(out=Path("x.jsonl"), reference=reference, control=True)
    assert [b.name for b in run_builds(options, sequential=True)] == [
        "current",
        "reference",
        "control",
    ]
    assert run_builds(options, sequential=True)[2].root == ROOT
    assert [b.name for b in run_builds(options, sequential=False)] == ["current", "reference"]
    assert [b.name for b in run_builds(RunOptions(out=Path("x")), sequential=True)] == ["current"]


def _worker(build: str, slot: str, **placed) -> WorkerRecord:
    placement = Placement(
        interpreter=placed.get("interpreter", "/venv/bin/python"),
        launcher="/tree/bench/measure/launch.py",
        tree=f"/tmp/fusebench-ab-x/0000/{slot}",
        tree_chars=24,
        slot=slot,
        env_bytes=placed.get("env_bytes", 1500),
        env_names=("HOME", "PATH"),
        cpus=(0, 1),
    )
    return WorkerRecord(
        run_id="r",
        model_key="m",
        build=build,
        process=1,
        pid=1,
        pair=0,
        started=0,
        placement=placement,
    )


def test_placements_alike_but_for_their_places_show_no_difference():
    records = [_worker("current", "a"), _worker("reference", "b")]
    records += [_worker("current", "b"), _worker("reference", "a")]
    summary = summarize_placement(records)
    assert summary.alike
    assert summary.slots == {"current": {"a": 1, "b": 1}, "reference": {"a": 1, "b": 1}}
    assert summarize_placement(records[:1]) is None


def test_a_placement_that_differs_between_builds_is_named():
    records = [
        _worker("current", "a", env_bytes=1600, interpreter="/clone/.venv/bin/python"),
        _worker("reference", "b"),
    ]
    summary = summarize_placement(records)
    assert {d.field for d in summary.differences} == {"env_bytes", "interpreter"}
    (interpreter,) = [d for d in summary.differences if d.field == "interpreter"]
    assert interpreter.by_build["current"] == ("/clone/.venv/bin/python",)


def _trials(control_factor: float, rounds: int = 12, one_variant: bool = False) -> pd.DataFrame:
    """Three builds' trials of two variants in pairs of 2 rounds: current and reference alike,
    the control's tok/s `control_factor` times the reference's (every variant, or with
    `one_variant` one a pair, as the runner does), each round's level and noise shared by the
    builds."""
    rng = np.random.default_rng(3)
    rows = []
    for r in range(rounds):
        for variant in ("a", "b"):
            level = 100.0 * (1 + 0.02 * rng.standard_normal())
            for build, factor in (
                ("current", 1.0),
                ("reference", 1.0),
                ("control", control_factor),
            ):
                if build == "control" and one_variant and variant != "ab"[r // 2 % 2]:
                    continue
                noise = 1 + 0.002 * rng.standard_normal()
                rows.append(
                    {
                        "machine": "host · cpu · cpu · openblas",
                        "size": "E2B",
                        "model_key": "m",
                        "workload": "pp128 tg3 b1",
                        "run_id": "run1",
                        "cell": "m|pp128",
                        "variant": variant,
                        "round": r,
                        "process": r // 2,
                        "warmup": False,
                        "build": build,
                        "prefill_tps": level * factor * noise,
                        "gen_tps": level / 30 * factor * noise,
                    }
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("one_variant", [False, True])
@pytest.mark.parametrize(("factor", "status"), [(1.0, "alike"), (0.95, "apart")])
def test_the_control_arm_qualifies_the_setup_or_makes_the_gate_say_cannot_tell(
    factor: float, status: str, one_variant: bool
):
    trials = _trials(factor, one_variant=one_variant)
    rows = stats.compare_control(trials)
    assert {(row.variant, row.metric) for row in rows} == {
        (stats.ALL_VARIANTS, "prefill"),
        (stats.ALL_VARIANTS, "gen"),
    }
    labels = gate.cell_names([trials])
    findings = [gate._control_finding(row, labels) for row in rows]
    expected = gate.Status.SETUP_ALIKE if status == "alike" else gate.Status.SETUP_DIFFERS
    assert {finding.status for finding in findings} == {expected}
    outcome = gate.GateOutcome(tuple(findings), (), ())
    assert outcome.exit_code == (gate.EXIT_PASSED if status == "alike" else gate.EXIT_CANNOT_TELL)
    # the builds' own rows never read the control's trials
    assert {row.variant for row in stats.compare_builds(trials)} == {"a", "b", stats.ALL_VARIANTS}
    assert all(abs(row.delta_pct) < 1 for row in stats.compare_builds(trials))


def test_a_run_without_the_control_arm_has_no_control_rows():
    trials = _trials(1.0)
    assert stats.compare_control(trials[trials["build"] != "control"]) == []
