"""The runner end to end on the tiny presets: records, interleaving, resume, failures, and the CLI's
input errors."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import fusebench_command, tree_copy

from fusebench.commands import main
from fusebench.core.experiment import Trials
from fusebench.core.fileformat import ResultsError
from fusebench.core.results import read_results
from fusebench.core.spec import load_experiment
from fusebench.measure.run.jobs import plan_jobs
from fusebench.measure.run.resume import DoneWork
from fusebench.measure.run.schedules.order import centre_order, round_order
from fusebench.measure.run.schedules.sequential import round_plan
from fusebench.models import save_checkpoint
from fusebench.models.loading import load_model

TINY = """\
name: tiny
models:
  - {{preset: tiny}}
  - {{preset: tiny-moe}}
variants:
  baseline: {{geglu: unfused, softcap: unfused, attention: manual}}
  fused: {{geglu: compiled, softcap: compiled, attention: sdpa}}
comparisons: [[baseline, fused]]
workloads: {{prompt_tokens: 12, gen_tokens: 3}}
trials: {trials}
schedule: sequential  # the order these tests check; tests/test_duet.py runs duets
shares: 0          # op shares cost seconds per cell; tests/test_shares.py and test_plugin_runs.py \
run them
warmup: 1
timeout_s: {timeout}
"""


def write_experiment(
    tmp_path: Path, trials: int = 3, timeout: float = 120, text: str | None = None
) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text or TINY.format(trials=trials, timeout=timeout))
    return path


def trial_keys(path: Path) -> list[tuple]:
    return [
        (r["cell"], r["variant"], r["warmup"], r["round"])
        for r in read_results([path]).of_kind("trial")
    ]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of the tiny experiment (3 rounds, both models) for the tests that only read what a
    run records; its experiment is exp.yaml beside it."""
    folder = tmp_path_factory.mktemp("tiny-run")
    out = folder / "r.jsonl"
    assert main(["run", str(write_experiment(folder)), "--out", str(out), "--quiet"]) == 0
    return out


def test_run_records_every_trial_with_its_environment(tiny_run: Path):
    results = read_results([tiny_run])
    header = results.of_kind("run")[0]
    assert header["env"]["backend"] in ("cpu", "metal", "cuda") and header["env"]["blas"]
    assert header["experiment"]["content"] == (tiny_run.parent / "exp.yaml").read_text()
    trials = results.of_kind("trial")
    assert len(trials) == 2 * 2 * (3 + 1)
    for t in trials:
        assert t["prefill_tps"] == pytest.approx(t["batch"] * 12 / t["prefill_s"])
        assert t["gen_tps"] == pytest.approx(t["batch"] * 2 / t["gen_s"])
        assert t["peak_memory_bytes"] > 0
    cold = [t for t in trials if t["compile_s"] is not None]
    assert {(t["model"], t["variant"]) for t in cold} == {
        (m, v) for m in ("tiny", "tiny-moe") for v in ("baseline", "fused")
    }
    assert all(t["warmup"] for t in cold)
    correctness = results.of_kind("correctness")
    assert len(correctness) == 4 and all(c["passed"] for c in correctness)
    assert {t["size"] for t in trials} == {"tiny", "tiny-moe"}
    # Inter-token latencies: one per decode step, adding up to the generation time.
    for t in trials:
        assert len(t["step_s"]) == 2 and sum(t["step_s"]) == pytest.approx(t["gen_s"], rel=1e-6)
    # The machine as it was: the thread count `threads: auto` measured here (1 or every core), the
    # load before and during the run, on record.
    cores = os.cpu_count() or 1
    assert header["env"]["threads"] == header["threads_choice"]["threads"] in {1, cores}
    assert {"loadavg_1m", "other_cores", "steal_cores"} <= set(header["preflight"])
    assert results.of_kind("load")[0]["samples"] >= 1
    stops = results.of_kind("stop")
    assert [s["reason"] for s in stops] == ["trials", "trials"] and all(
        s["rounds"] == 3 for s in stops
    )
    # Kernel facts for every cell: on this CPU, sdpa has no fused kernel.
    kernels = [k for k in results.of_kind("kernel") if k["probe"] == "force_fused"]
    assert kernels and all(k["cell"] in {t["cell"] for t in trials} for k in kernels)


def test_trials_budget_runs_the_rounds_it_fixed_and_records_a_fixed_design(tmp_path):
    text = TINY.format(trials="budget\nbudget_s: 300\nmax_rounds: 6", timeout=120)
    out = tmp_path / "r.jsonl"
    argv = ["run", str(write_experiment(tmp_path, text=text)), "--out", str(out), "--quiet"]
    assert main([*argv, "--only", "tiny"]) == 0
    results = read_results([out])
    (header,) = results.headers.values()
    assert header.trials is Trials.BUDGET  # so its rows get the fixed-n t interval
    (stop,) = results.stop_records()
    # the count is fixed from the warm-up's pace (at least 3, at most max_rounds); only a round that
    # would overrun the cell's time ends it sooner
    assert stop.reason in ("fixed from the budget", "budget") and 3 <= stop.rounds <= 6
    timed = [t for t in results.of_kind("trial") if not t["warmup"]]
    assert {t["round"] for t in timed} == set(range(stop.rounds))


def test_trials_auto_stops_when_its_rows_are_decided_or_out_of_reach(tmp_path):
    text = TINY.format(trials="auto\nprecision: 50%\nmax_rounds: 8", timeout=120)
    out = tmp_path / "r.jsonl"
    assert (
        main(
            [
                "run",
                str(write_experiment(tmp_path, text=text)),
                "--out",
                str(out),
                "--quiet",
                "--only",
                "tiny",
            ]
        )
        == 0
    )
    results = read_results([out])
    stop = results.of_kind("stop")[0]
    # Never before the first 6 rounds, never past max_rounds. Which reason a toy model's noise gives
    # is a timing outcome; what each reason promises is not: "decided" leaves no row undecided, the
    # others name a forecast.
    assert stop["reason"] in ("decided", "out of reach", "max_rounds") and 6 <= stop["rounds"] <= 8
    assert (stop["reason"] == "decided") == (not stop["undecided"])
    if stop["reason"] == "out of reach":
        assert all(f["rounds"] is None or f["rounds"] > 8 for f in stop["undecided"].values())
    assert stop["round_s"] > 0 and set(stop["undecided"]) <= set(stop["half_width_pct"])
    timed = {t["round"] for t in results.of_kind("trial") if not t["warmup"]}
    assert timed == set(range(stop["rounds"]))


def test_the_shared_baseline_sits_next_to_every_variant_compared_with_it():
    assert centre_order(
        ["baseline", "compiled", "sdpa"], [("baseline", "compiled"), ("baseline", "sdpa")]
    ) == [
        "compiled",
        "baseline",
        "sdpa",
    ]
    assert centre_order(["a", "b"], [("a", "b")]) == ["a", "b"]
    assert round_plan(["x", "y"], ["current", "reference"], 1) == [
        ("current", "y"),
        ("reference", "y"),
        ("current", "x"),
        ("reference", "x"),
    ]


def test_the_builds_take_strict_turns_across_rounds():
    # No worker runs two trials in a row, at a round's boundary either: a second trial runs warm.
    plan = [step for r in range(4) for step in round_plan(["x", "y", "z"], ["cur", "ref"], r)]
    builds = [build for build, _ in plan]
    assert all(a != b for a, b in itertools.pairwise(builds))


def test_rounds_alternate_the_variant_order(tiny_run: Path):
    # Each cell runs its rounds in turn; three rounds show the order reversed and restored.
    timed = [
        (t["round"], t["variant"])
        for t in read_results([tiny_run]).of_kind("trial")
        if not t["warmup"] and t["model"] == "tiny"
    ]
    assert timed == [(r, v) for r in range(3) for v in round_order(["baseline", "fused"], r)]
    assert round_order(["a", "b", "c"], 1) == ["c", "b", "a"]


# The interrupted run's worker, in a copy of this tree, waits before its first trial of timed round
# HELD_ROUND while the file HOLD_TRIALS names exists: the run cannot finish before the signal
# however fast or loaded the machine (a race against 120 rounds of trials before, 40 once lost), so
# a few rounds suffice. The resumed run is this tree's, and nothing holds it.
HELD_ROUND = 4
HOLD = (
    "        cell, variant = command.cell, command.variant\n",
    "        cell, variant = command.cell, command.variant\n"
    f"        while not command.warmup and command.round == {HELD_ROUND} and os.path.exists(\n"
    "            os.environ.get('HOLD_TRIALS', '')\n"
    "        ):\n"
    "            time.sleep(0.01)\n",
)


@pytest.mark.parametrize("name", ["r.jsonl", "r.jsonl.gz"])
def test_sigint_then_resume_gives_the_uninterrupted_set_of_trials(tmp_path, name):
    rounds = HELD_ROUND + 2
    exp = write_experiment(tmp_path, trials=rounds)
    out = tmp_path / name
    held = tree_copy(tmp_path / "held", HOLD)
    hold = tmp_path / "hold"
    hold.touch()
    cmd = [*fusebench_command(held), "run", str(exp), "--out", str(out), "--quiet"]
    # A suite started in the background (`pytest &` in a script) inherits SIGINT ignored, and so
    # would the run: give it Ctrl-C's default, as a terminal's foreground run has it.
    process = subprocess.Popen(
        cmd,
        cwd=held,
        env={**os.environ, "HOLD_TRIALS": str(hold)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # The first cell's warmups and rounds before the held one: then its worker waits.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and recorded_trials(out) < 2 * (1 + HELD_ROUND):
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        hold.unlink()  # a worker the run failed to stop goes on, and ends
        process.kill()
    assert process.returncode == 130, output
    assert "--resume" in output
    interrupted = trial_keys(out)
    assert 10 <= len(interrupted) < 2 * 2 * (rounds + 1)
    # mid-cell: the resumed run finishes a cell it started as well as the one it never reached
    assert {r for _, _, warmup, r in interrupted if not warmup} == set(range(HELD_ROUND))

    assert main(["run", str(exp), "--resume", str(out), "--quiet"]) == 0
    keys = trial_keys(out)
    assert Counter(keys).most_common(1)[0][1] == 1, "a resumed run repeated a recorded trial"
    expected = {
        (cell.key, v, warmup, r)
        for cell in load_experiment(exp).cells()
        for v in ("baseline", "fused")
        for warmup, count in ((True, 1), (False, rounds))
        for r in range(count)
    }
    assert set(keys) == expected


def recorded_trials(path: Path) -> int:
    """The trials a running run has written so far: none while its file is missing or still empty
    (the writer creates it a moment before the header lands)."""
    try:
        return len(trial_keys(path))
    except ResultsError:
        return 0


def test_resume_refuses_a_changed_experiment(tmp_path, capsys, tiny_run: Path):
    # a copy: the other readers' file stays as recorded
    out = shutil.copy(tiny_run, tmp_path / "r.jsonl")
    exp = write_experiment(tmp_path, trials=2)  # the recorded run's experiment, but for its trials
    assert main(["run", str(exp), "--resume", str(out), "--quiet"]) == 2
    assert "different version" in capsys.readouterr().err


@pytest.fixture(scope="module")
def unrunnable_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of tiny beside a model too big for memory and a checkpoint whose weights do not match
    its config."""
    folder = tmp_path_factory.mktemp("unrunnable")
    broken = save_checkpoint(load_model("tiny"), folder / "broken")
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "hidden_size": 32}))
    text = TINY.format(trials=1, timeout=60).replace(
        "{preset: tiny-moe}", f"{{preset: 31b}}\n  - {{path: {broken}}}"
    )
    out = folder / "r.jsonl"
    assert (
        main(["run", str(write_experiment(folder, text=text)), "--out", str(out), "--quiet"]) == 0
    )
    return out


def test_model_that_does_not_fit_is_skipped_without_loading(unrunnable_run: Path):
    skips = read_results([unrunnable_run]).of_kind("skip")
    assert [s["model"] for s in skips] == ["31b"]
    assert "does not fit in memory: needs ~" in skips[0]["reason"]
    assert {t["model"] for t in read_results([unrunnable_run]).of_kind("trial")} == {"tiny"}


def test_a_failing_model_is_an_error_record_and_the_suite_goes_on(unrunnable_run: Path):
    errors = read_results([unrunnable_run]).of_kind("error")
    assert len(errors) == 1 and "weights do not match config.json" in errors[0]["reason"]
    assert {t["model"] for t in read_results([unrunnable_run]).of_kind("trial")} == {"tiny"}


def test_per_cell_timeout_records_an_error(tmp_path):
    text = TINY.format(trials=100000, timeout=1).replace("  - {preset: tiny-moe}\n", "")
    out = tmp_path / "r.jsonl"
    assert (
        main(["run", str(write_experiment(tmp_path, text=text)), "--out", str(out), "--quiet"]) == 0
    )
    errors = read_results([out]).of_kind("error")
    assert len(errors) == 1 and errors[0]["reason"] == "timed out after 1 s"


def test_shards_partition_the_matrix_and_merge(tmp_path):
    exp = write_experiment(tmp_path, trials=1)
    outs = [tmp_path / f"s{i}.jsonl" for i in (1, 2)]
    for i, out in enumerate(outs, start=1):
        assert main(["run", str(exp), "--out", str(out), "--quiet", "--shard", f"{i}/2"]) == 0
    cells = [{t["cell"] for t in read_results([out]).of_kind("trial")} for out in outs]
    assert cells[0].isdisjoint(cells[1])
    assert cells[0] | cells[1] == {c.key for c in load_experiment(exp).cells()}


def test_dry_run_prints_the_matrix_and_runs_nothing(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["run", str(write_experiment(tmp_path)), "--dry-run", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "16 trials" in printed and "tiny-moe" in printed and "GiB" in printed
    assert not out.exists()


def test_dry_run_with_explicit_trials_promises_exactly_that_many(tmp_path, capsys):
    text = TINY.format(trials="auto\nprecision: 5%", timeout=120)
    assert (
        main(["run", str(write_experiment(tmp_path, text=text)), "--dry-run", "--trials", "3"]) == 0
    )
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        "then 3 timed rounds" in printed and "at least" not in printed and "at most" not in printed
    )
    assert "--trials 3: exactly 3 timed rounds per cell" in printed  # and the target it turned off


def test_dry_run_refuses_a_resume_file_of_another_experiment(tmp_path, capsys):
    other = tmp_path / "other.jsonl"
    header = {
        "kind": "run",
        "run_id": "x",
        "env": {},
        "experiment": {"name": "other", "sha256": "0" * 64, "content": "name: other\n"},
    }
    other.write_text(json.dumps(header) + "\n")
    code = main(["run", str(write_experiment(tmp_path)), "--dry-run", "--resume", str(other)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "holds a run of experiment 'other'" in err and str(other) in err


def recorded(tmp_path: Path, *records: dict, run_id: str = "a") -> DoneWork:
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return DoneWork.recorded(read_results([path]), run_id)


@pytest.mark.parametrize("kind", ["skip", "error", "stop"])
def test_plan_skips_closed_and_stopped_cells(tmp_path, kind):
    exp = load_experiment(Path("experiments/ci.yaml"))
    cell = exp.cells()[0]
    done = recorded(tmp_path, {"kind": kind, "run_id": "a", "cell": cell.key, "reason": "x"})
    assert done.finished(cell.key) and plan_jobs(exp.cells(), done) == []
    assert [job.cells for job in plan_jobs(exp.cells(), DoneWork())] == [exp.cells()]


def test_done_work_only_counts_the_resumed_run(tmp_path):
    trial = {"kind": "trial", "cell": "c", "variant": "v", "warmup": False}
    done = recorded(
        tmp_path, {**trial, "run_id": "a", "round": 0}, {**trial, "run_id": "b", "round": 1}
    )
    assert done.has_trial("c", "current", "v", False, 0)
    assert not done.has_trial("c", "current", "v", False, 1) and not done.has_trial(
        "c", "reference", "v", False, 0
    )


def test_done_work_tells_each_kind_apart(tmp_path):
    cell = {"run_id": "a", "cell": "c"}
    done = recorded(
        tmp_path,
        {"kind": "run", "run_id": "a"},
        {"kind": "load", "run_id": "a", "samples": 0},
        {"kind": "correctness", **cell, "build": "reference"},
        {"kind": "kernel", **cell},
        {"kind": "depth", **cell, "variant": "v", "round": 2},
        {"kind": "trial", **cell, "variant": "v", "warmup": True, "round": 0},
    )
    assert done.has_facts("c", "reference", "correctness") and not done.has_facts(
        "c", "current", "correctness"
    )
    assert done.has_facts("c", "current", "kernel")
    assert done.has_depth("c", "current", "v", 2) and not done.has_depth("c", "current", "v", 0)
    assert done.has_trial("c", "current", "v", True, 0) and not done.has_trial(
        "c", "current", "v", False, 0
    )
    assert not done.finished("c")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "nope.yaml"], "nope.yaml:0: file:"),
        (
            ["run", "experiments/ci.yaml", "--only", "E9B"],
            "--only: e9b not in experiments/ci.yaml; choose from E2B",
        ),
        (["run", "experiments/ci.yaml", "--shard", "3/2"], "--shard: bad shard '3/2'"),
        (
            ["run", "experiments/ci.yaml", "--blas", "/nope/libblas.so"],
            "choose auto, reference, or a path",
        ),
        (
            ["run", "experiments/ci.yaml", "--resume", "missing.jsonl"],
            "missing.jsonl: no such results file",
        ),
        # A dry run refuses what the real run would.
        (
            ["run", "experiments/ci.yaml", "--dry-run", "--blas", "/nope/libblas.so"],
            "choose auto, reference, or a",
        ),
        (
            ["run", "experiments/ci.yaml", "--dry-run", "--resume", "missing.jsonl"],
            "missing.jsonl: no such results",
        ),
        (["verify", "--model", "e3b"], "unknown preset 'e3b'; choose from"),
        (
            ["verify", "--model", "tiny", "--dtype", "int4"],
            "unknown dtype 'int4'; choose from float32",
        ),
        (["verify", "--model", "tiny", "--layers", "9"], "layers=9 is out of range; choose 1..6"),
        (["verify", "--model", "./no/such/dir"], "no such checkpoint directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as usage:  # argparse's own usage errors
        code = usage.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert message in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--trials", "0"])
    assert exit_info.value.code == 2
    assert "0 is not >= 1" in capsys.readouterr().err


def test_verify_passes_on_tiny_and_tiny_moe(capsys):
    assert main(["verify", "--model", "tiny", "--tokens", "4"]) == 0
    assert main(["verify", "--model", "tiny-moe", "--tokens", "4"]) == 0
    assert "all 32 combinations agree" in capsys.readouterr().out


def test_verify_fails_a_wrong_variant(capsys):
    from fusebench.models.ops import REGISTRY, register

    register("softcap", "wrong")(lambda x, cap: x)
    try:
        assert main(["verify", "--model", "tiny", "--tokens", "2"]) == 1
    finally:
        del REGISTRY["softcap"].variants["wrong"]
    assert "outside tolerance" in capsys.readouterr().out


def test_env_names_backend_and_blas(capsys):
    assert main(["env"]) == 0
    printed = capsys.readouterr().out
    assert "cpu" in printed and "blas" in printed.lower()


def test_python_dash_m_bench_shows_help():
    result = subprocess.run(
        [sys.executable, "-m", "fusebench", "--help"],
        capture_output=True,
        text=True,
        env=os.environ,
    )
    assert result.returncode == 0 and "fusebench run" in result.stdout


def test_depth_curve_on_tiny(tmp_path):
    text = TINY.format(trials=2, timeout=120).replace("trials: 2", "trials: 2\ndepths: [8, 24, 48]")
    out = tmp_path / "r.jsonl"
    assert (
        main(
            [
                "run",
                str(write_experiment(tmp_path, text=text)),
                "--out",
                str(out),
                "--quiet",
                "--only",
                "tiny",
            ]
        )
        == 0
    )
    depths = read_results([out]).of_kind("depth")
    assert {(d["variant"], d["round"], d["depth"]) for d in depths} == {
        (v, r, d) for v in ("baseline", "fused") for r in range(2) for d in (8, 24, 48)
    }
    assert all(d["gen_tps"] == pytest.approx(2 / d["gen_s"]) for d in depths)


def test_trials_carry_the_roofline(tiny_run: Path):
    results = read_results([tiny_run])
    assert results.of_kind("run")[0]["peak"]["fp32_tflops"] > 0
    trial = results.of_kind("trial")[0]
    assert (
        trial["prefill_tflops"] > 0 and trial["gen_gbps"] > 0 and trial["prefill_pct_of_peak"] > 0
    )
