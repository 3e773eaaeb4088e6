"""`fusebench check`, `calibrate` and the named runs of `history add --name` on synthetic results
written to tmp_path: no model runs."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import cell, fusebench_here, trials
from conftest import results_file as write_results

from fusebench.analysis import noise as calibrate
from fusebench.analysis.gate import Status
from fusebench.commands import calibrate as calibrate_command
from fusebench.commands import main
from fusebench.commands.sources import load_noise
from fusebench.core.calibration import NOISE_KIND
from fusebench.core.errors import UserError
from fusebench.core.fingerprint import Fingerprint
from fusebench.core.history import HistoryRun, HistoryStore

OLD_FILES = Path(__file__).parent / "fixtures" / "old-stores"  # written by baseline save, calibrate
MODEL_KEY = "e2b:layers=2:float32:none"
SIZE = "E2B (2/35 layers)"
WORKLOAD = "pp128 tg4 b1"
CELL = f"{MODEL_KEY}|{WORKLOAD}"
# Round-to-round jitter of a few percent, the same shape in every file so only the injected factor
# differs.
JITTER = (1.00, 0.98, 1.02, 0.99, 1.01, 0.97, 1.03, 1.00)
SPEED = {"baseline": (300.0, 4.0), "compiled": (330.0, 4.4), "sdpa": (310.0, 4.2)}
ENV = {
    "fusebench": "0.1.0",
    "mlx": "0.32.4",
    "python": "3.11.7",
    "backend": "cpu",
    "device": "Test CPU",
    "blas": "openblas (/usr/lib/libopenblas.so)",
    "cpu": "Test CPU",
    "cores": 2,
    "hostname": "ci-runner-1",
}
EXPERIMENT = """\
name: ci
models:
  - {preset: e2b, layers: 2, dtype: float32}
variants:
  baseline: {geglu: unfused, softcap: unfused, attention: manual}
  compiled: {geglu: compiled, softcap: compiled, attention: manual}
  sdpa: {geglu: unfused, softcap: unfused, attention: sdpa}
comparisons:
  - [baseline, compiled]
  - [baseline, sdpa]
workloads: {prompt_tokens: 128, gen_tokens: 4}
trials: 8
"""
NO_EXPECTATIONS = EXPERIMENT
ALL_CORRECT = EXPERIMENT + "expect:\n  - {all_correct: true}\n"


def results_file(
    path: Path,
    *,
    scale: dict[tuple[str, str], float] | None = None,
    experiment: str = NO_EXPECTATIONS,
    env: dict[str, Any] | None = None,
    failing_variant: str | None = None,
    run_id: str = "run1",
) -> Path:
    """A results file as `fusebench run` writes it; `scale[(variant, metric)]` multiplies that
    variant's tok/s."""
    scale = scale or {}
    meta = cell(SIZE, run_id=run_id)
    records: list[dict[str, Any]] = []
    for variant in SPEED:
        passed = variant != failing_variant
        records.append(
            {
                "kind": "correctness",
                **meta,
                "variant": variant,
                "reference": "baseline",
                "max_abs_err": 0.0 if passed else 0.5,
                "atol": 0.01,
                "tokens_checked": 4,
                "tokens_agree": 4 if passed else 2,
                "passed": passed,
            }
        )
    # absurd numbers: a warmup that counted would fail every test below
    records += [
        {**trial, "warmup": True}
        for trial in trials(meta, {v: [(s[0] * 0.01, s[1] * 0.01)] for v, s in SPEED.items()})
    ]
    records += trials(
        meta,
        {
            variant: [
                (
                    prefill * j * scale.get((variant, "prefill"), 1.0),
                    gen * j * scale.get((variant, "gen"), 1.0),
                )
                for j in JITTER
            ]
            for variant, (prefill, gen) in SPEED.items()
        },
    )
    return write_results(
        path,
        records,
        experiment=experiment,
        run_id=run_id,
        env={**ENV, **(env or {})},
        file="experiments/ci.yaml",
    )


def compact(markdown: str) -> str:
    """Markdown with the padding of table cells collapsed, so rows can be matched as plain text."""
    return re.sub(r" {2,}", " ", markdown)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The real CLI."""
    try:
        code = main(argv)
    except SystemExit as usage:  # argparse rejects bad usage itself
        code = usage.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The history (results/history.sqlite) and noise files (results/baselines/) go under the
    current directory: make that tmp_path."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def remember(path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The run of a results file, kept in the history under `name`."""
    assert run(["history", "add", str(path), "--name", name], capsys)[0] == 0
    return name


@pytest.fixture
def baseline(workdir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    return remember(results_file(workdir / "base-run.jsonl"), "cpu-ci", capsys)


def noise_file(path: Path, mde_pct: float, machine: dict[str, str] | None = None) -> Path:
    band = {
        "mde_pct": mde_pct,
        "max_aa_slowdown_pct": 2 * mde_pct,
        "ci_half_width_pct": mde_pct,
        "comparisons": 10,
    }
    record = {
        "kind": NOISE_KIND,
        "fingerprint": machine
        or {"backend": "cpu", "device": "Test CPU", "blas": "openblas", "cpu": "Test CPU"},
        "experiment": {"name": "ci", "file": "experiments/ci.yaml", "sha256": "0" * 64},
        "runs": 5,
        "bands": {scope: {"prefill": band, "gen": band} for scope in calibrate.SCOPES},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


# --- against a baseline ---------------------------------------------------------------------------


def test_twenty_percent_slower_cell_fails_and_is_named(workdir: Path, baseline: str, capsys):
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.8})
    # this machine calibrated: tok/s may fail
    noise = noise_file(workdir / "noise.json", mde_pct=3.0)
    code, out, _ = run(
        ["check", str(current), "--baseline", str(baseline), "--noise", str(noise)], capsys
    )
    assert code == 1
    assert "FAILED" in out
    failed = out.split("Failed:")[1]
    assert "tok/s: E2B (2/35 layers) · pp128 tg4 b1 compiled prefill: -20.0%" in failed
    assert "speedup: E2B (2/35 layers) · pp128 tg4 b1 compiled/baseline prefill: -20.0%" in failed
    # Only the doctored cell fails: the other variants and compiled's gen are untouched.
    assert failed.count("•") == 2 and "sdpa" not in failed and " gen:" not in failed


def test_tok_s_without_a_calibration_is_information_only(workdir: Path, baseline: str, capsys):
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.8})
    code, out, _ = run(
        ["check", str(current), "--baseline", str(baseline), "--format", "json"], capsys
    )
    verdicts = {(v["check"], v["variant"], v["metric"]): v for v in json.loads(out)["verdicts"]}
    tps = verdicts["tps", "compiled", "prefill"]
    assert not tps["failed"] and tps["ci_high_pct"] < -5.0
    assert tps["verdict"] == "slower, information only" and "no noise calibration" in tps["note"]
    # The fusion's speedup is paired within each run, so it still fails.
    assert code == 1 and verdicts["speedup", "compiled/baseline", "prefill"]["failed"]


def test_identical_file_passes(workdir: Path, baseline: str, capsys):
    code, out, _ = run(
        ["check", str(results_file(workdir / "now.jsonl")), "--baseline", str(baseline)], capsys
    )
    assert code == 0
    assert "fusebench check: passed, 0 of 10 verdicts failed" in out


def test_one_percent_slowdown_inside_the_noise_passes(workdir: Path, baseline: str, capsys):
    slower = {(v, m): 0.99 for v in SPEED for m in ("prefill", "gen")}
    code, out, _ = run(
        [
            "check",
            str(results_file(workdir / "now.jsonl", scale=slower)),
            "--baseline",
            str(baseline),
        ],
        capsys,
    )
    assert code == 0
    assert "-1.0%" in out


def test_worst_offenders_come_first(workdir: Path, baseline: str, capsys):
    scale = {("sdpa", "gen"): 0.9, ("compiled", "prefill"): 0.7, ("baseline", "prefill"): 1.1}
    code, out, _ = run(
        [
            "check",
            str(results_file(workdir / "now.jsonl", scale=scale)),
            "--baseline",
            str(baseline),
            "--format",
            "markdown",
        ],
        capsys,
    )
    assert code == 1
    rows = [compact(line) for line in out.splitlines() if line.startswith("| tok/s")]
    assert [row.split(" | ")[1:3] for row in rows[:2]] == [["compiled", "prefill"], ["sdpa", "gen"]]
    assert "| faster |" in rows[-1]


def test_cells_in_one_file_only_are_listed_not_failed(workdir: Path, capsys):
    base_path = results_file(workdir / "base-run.jsonl")
    lines = [line for line in base_path.read_text().splitlines() if '"variant": "sdpa"' not in line]
    base_path.write_text("\n".join(lines) + "\n")
    baseline = remember(base_path, "no-sdpa", capsys)
    code, out, _ = run(
        ["check", str(results_file(workdir / "now.jsonl")), "--baseline", str(baseline)], capsys
    )
    assert code == 0
    assert "new (not in the baseline)" in out


def test_other_machine_is_refused_unless_allowed(workdir: Path, baseline: str, capsys):
    current = results_file(
        workdir / "now.jsonl",
        env={
            "cpu": "Apple M3 Max",
            "device": "Apple M3 Max",
            "backend": "metal",
            "blas": "accelerate",
        },
    )
    code, out, err = run(["check", str(current), "--baseline", str(baseline)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert (
        "cpu · Test CPU · openblas · Test CPU" in err and "metal · Apple M3 Max · accelerate" in err
    )
    assert "--allow-other-machine" in err
    code, out, _ = run(
        ["check", str(current), "--baseline", str(baseline), "--allow-other-machine"], capsys
    )
    assert code == 0
    assert "baseline from another machine" in out


def test_a_new_hostname_is_the_same_machine(workdir: Path, baseline: str, capsys):
    current = results_file(workdir / "now.jsonl", env={"hostname": "ci-runner-2"})
    assert run(["check", str(current), "--baseline", str(baseline)], capsys)[0] == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such results file"),
        ("", "no valid records"),
        ("{not json\n\x00garbage\n", "no valid records"),
        ("RUN_ONLY", "no timed trial records"),
        ("CORRUPT_LINE", ":3: corrupt line in baseline"),
        ("NO_HEADER", "no run header"),
    ],
)
def test_malformed_baseline_exits_2_with_one_line(
    workdir: Path, capsys, content: str | None, message: str
):
    good = results_file(workdir / "good.jsonl").read_text().splitlines()
    bad = workdir / "bad.jsonl"
    if content == "RUN_ONLY":
        bad.write_text(good[0] + "\n")
    elif content == "CORRUPT_LINE":
        bad.write_text("\n".join([*good[:2], '{"kind": "trial", "truncat', *good[2:]]) + "\n")
    elif content == "NO_HEADER":
        bad.write_text("\n".join(good[1:]) + "\n")
    elif content is not None:
        bad.write_text(content)
    code, out, err = run(["check", str(workdir / "good.jsonl"), "--baseline", str(bad)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("fusebench: error: ")
    assert message in err and "Traceback" not in err


def test_a_plain_run_passes_on_correctness_and_says_speed_was_not_gated(workdir: Path, capsys):
    # What `fusebench run` suggests after every run: no --against, no --baseline, no calibration, no
    # expect.
    code, out, err = run(["check", str(results_file(workdir / "now.jsonl"))], capsys)
    assert code == 0 and err == ""
    assert "3 correctness checks passed" in out
    code, out, _ = run(
        ["check", str(results_file(workdir / "now.jsonl")), "--format", "json"], capsys
    )
    (note,) = [note for note in json.loads(out)["notes"] if "speed not gated" in note]
    assert "run --against REF" in note and "--baseline NAME" in note
    bad = results_file(workdir / "bad.jsonl", failing_variant="sdpa")
    assert run(["check", str(bad)], capsys)[0] == 1


def test_all_correct_is_not_judged_twice_on_a_plain_run(workdir: Path, capsys):
    code, out, _ = run(
        ["check", str(results_file(workdir / "ok.jsonl", experiment=ALL_CORRECT))], capsys
    )
    assert code == 0 and out.count("correctness checks passed") == 1 and "speed not gated" in out


def test_a_file_without_trials_is_still_nothing_to_check(workdir: Path, capsys):
    path = results_file(workdir / "now.jsonl")
    path.write_text(
        "".join(
            line + "\n" for line in path.read_text().splitlines() if '"kind": "trial"' not in line
        )
    )
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "no timed trial records" in err


@pytest.mark.parametrize("threshold", ["abc", "-1", "100", "150%"])
def test_bad_threshold_is_usage_error(workdir: Path, baseline: str, capsys, threshold: str):
    code, _, err = run(
        ["check", "base-run.jsonl", "--baseline", baseline, "--max-regression", threshold], capsys
    )
    assert code == 2
    assert "--max-regression" in err


def test_threshold_accepts_a_percent_sign(workdir: Path, baseline: str, capsys):
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.8})
    code, out, _ = run(
        ["check", str(current), "--baseline", str(baseline), "--max-regression", "30%"], capsys
    )
    assert code == 0
    assert "limit: -30.0% (threshold) for every check" in out


# --- expectations declared in the experiment ------------------------------------------------------


def slowdown_experiment(pct: float) -> str:
    return (
        EXPERIMENT + "expect:\n"
        f"  - {{comparison: [baseline, compiled], metric: prefill, max_slowdown_pct: {pct}}}\n"
    )


def test_slowdown_expectation_passes_when_new_is_faster(workdir: Path, capsys):
    code, out, _ = run(
        ["check", str(results_file(workdir / "now.jsonl", experiment=slowdown_experiment(5)))],
        capsys,
    )
    assert code == 0
    assert "compiled vs baseline" in out and "+10.0%" in out


def test_slowdown_expectation_fails_beyond_its_limit(workdir: Path, capsys):
    # compiled is 10% faster by design; at 0.75x it is 17.5% slower than baseline, beyond the
    # declared 5%.
    path = results_file(
        workdir / "now.jsonl",
        experiment=slowdown_experiment(5),
        scale={("compiled", "prefill"): 0.75},
    )
    code, out, _ = run(["check", str(path)], capsys)
    assert code == 1
    assert "expect: E2B (2/35 layers) · pp128 tg4 b1 compiled vs baseline prefill: -17.5%" in out
    assert "-5.0% (threshold)" in out


def test_slowdown_expectation_inside_its_limit_passes(workdir: Path, capsys):
    scale = {("compiled", "prefill"): 0.75}
    path = results_file(workdir / "now.jsonl", experiment=slowdown_experiment(25), scale=scale)
    assert run(["check", str(path)], capsys)[0] == 0


def test_slowdown_expectation_without_data_fails(workdir: Path, capsys):
    path = results_file(workdir / "now.jsonl", experiment=slowdown_experiment(5))
    path.write_text(
        "".join(
            line + "\n"
            for line in path.read_text().splitlines()
            if '"kind": "trial"' not in line or '"variant": "compiled"' not in line
        )
    )
    code, out, _ = run(["check", str(path)], capsys)
    assert code == 1
    assert "no round ran both baseline and compiled" in out


def test_all_correct_passes_and_fails_naming_cell_and_variant(workdir: Path, capsys):
    code, out, _ = run(
        ["check", str(results_file(workdir / "ok.jsonl", experiment=ALL_CORRECT))], capsys
    )
    assert code == 0
    assert "3 correctness checks passed" in out
    bad = results_file(workdir / "bad.jsonl", experiment=ALL_CORRECT, failing_variant="sdpa")
    code, out, _ = run(["check", str(bad)], capsys)
    assert code == 1
    assert "correct: E2B (2/35 layers) · pp128 tg4 b1 sdpa: ✗ incorrect" in out
    assert "2/4 greedy tokens agree" in out


def test_invalid_expectation_in_the_header_is_bad_input(workdir: Path, capsys):
    broken = (
        EXPERIMENT
        + "expect:\n  - {comparison: [baseline, nosuch], metric: prefill, max_slowdown_pct: 5}\n"
    )
    code, _, err = run(
        ["check", str(results_file(workdir / "now.jsonl", experiment=broken))], capsys
    )
    assert code == 2
    assert "now.jsonl (run header: experiments/ci.yaml):" in err and "nosuch" in err


def test_baseline_and_expectations_together(workdir: Path, baseline: str, capsys):
    bad = results_file(workdir / "bad.jsonl", experiment=ALL_CORRECT, failing_variant="compiled")
    code, out, _ = run(["check", str(bad), "--baseline", str(baseline)], capsys)
    assert code == 1
    assert "fusebench check: FAILED, 1 of 11 verdicts failed" in out


# --- output formats -------------------------------------------------------------------------------


def test_json_holds_verdicts_and_github_action_benchmark_list(workdir: Path, baseline: str, capsys):
    current = results_file(
        workdir / "now.jsonl", scale={("compiled", "prefill"): 0.8}, experiment=ALL_CORRECT
    )
    noise = noise_file(workdir / "noise.json", mde_pct=3.0)
    code, out, _ = run(
        [
            "check",
            str(current),
            "--baseline",
            str(baseline),
            "--format",
            "json",
            "--noise",
            str(noise),
        ],
        capsys,
    )
    assert code == 1
    document = json.loads(out)
    assert document["passed"] is False and document["exit_code"] == 1
    failed = [v for v in document["verdicts"] if v["failed"]]
    assert {(v["check"], v["variant"], v["metric"]) for v in failed} == {
        ("tps", "compiled", "prefill"),
        ("speedup", "compiled/baseline", "prefill"),
    }
    assert document["verdicts"][:2] == failed  # worst first
    worst = next(v for v in failed if v["check"] == "tps")
    assert worst["delta_pct"] == pytest.approx(-20.0) and worst["ci_high_pct"] < -5.0
    assert worst["limit_pct"] == 5.0 and worst["limit_bound"] == "threshold"
    # Codes and numbers, never the table's words and glyphs.
    assert {v["verdict"] for v in document["verdicts"]} <= {status.value for status in Status}
    assert {v["check"] for v in document["verdicts"]} == {"tps", "speedup", "correct"}
    assert not any(glyph in out for glyph in "✗✓×")
    gab = document["github_action_benchmark"]
    assert all(set(entry) == {"name", "unit", "value", "extra"} for entry in gab)
    by_name = {entry["name"]: entry for entry in gab}
    compiled = by_name["E2B (2/35 layers) · pp128 tg4 b1 compiled prefill"]
    assert compiled["unit"] == "tok/s" and compiled["value"] == pytest.approx(330.0 * 0.8)
    assert by_name["E2B (2/35 layers) · pp128 tg4 b1 sdpa/baseline gen"]["unit"] == "x"
    assert len(gab) == 3 * 2 + 2 * 2  # tok/s of 3 variants and 2 speedups, prefill and gen each


def test_markdown_is_a_pasteable_table(workdir: Path, baseline: str, capsys):
    code, out, _ = run(
        [
            "check",
            str(results_file(workdir / "now.jsonl")),
            "--baseline",
            str(baseline),
            "--format",
            "markdown",
        ],
        capsys,
    )
    assert code == 0
    assert out.startswith("## fusebench check: passed")
    assert (
        "| Check | Variant | Metric | Baseline | Current | Δ [95% CI] | Limit | Verdict |"
        in compact(out)
    )


# --- noise calibration ----------------------------------------------------------------------------


def test_noise_band_raises_the_limit_and_says_so(workdir: Path, baseline: str, capsys):
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.8})
    noise = noise_file(workdir / "noise.json", mde_pct=25.0)
    code, out, _ = run(
        ["check", str(current), "--baseline", str(baseline), "--noise", str(noise)], capsys
    )
    assert code == 0
    assert "limit: -25.0% (noise) for every check" in out
    assert f"noise band: {noise} (5 runs of ci)" in out


def test_threshold_binds_when_above_the_noise(workdir: Path, baseline: str, capsys):
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.8})
    noise = noise_file(workdir / "noise.json", mde_pct=3.0)
    code, out, _ = run(
        [
            "check",
            str(current),
            "--baseline",
            str(baseline),
            "--noise",
            str(noise),
            "--max-regression",
            "10",
        ],
        capsys,
    )
    assert code == 1
    assert "beyond the limit -10.0% (threshold)" in out


def test_a_small_slowdown_fails_a_zero_threshold_but_not_the_noise_band(
    workdir: Path, baseline: str, capsys
):
    current = results_file(
        workdir / "now.jsonl", scale={(v, m): 0.95 for v in SPEED for m in ("prefill", "gen")}
    )
    quiet = noise_file(workdir / "quiet.json", mde_pct=0.0)
    assert (
        run(
            [
                "check",
                str(current),
                "--baseline",
                str(baseline),
                "--max-regression",
                "0",
                "--noise",
                str(quiet),
            ],
            capsys,
        )[0]
        == 1
    )
    noise = noise_file(workdir / "noise.json", mde_pct=8.0)
    code, out, _ = run(
        [
            "check",
            str(current),
            "--baseline",
            str(baseline),
            "--max-regression",
            "0",
            "--noise",
            str(noise),
        ],
        capsys,
    )
    assert code == 0
    assert "(noise)" in out


def test_this_machines_noise_file_is_found_automatically(workdir: Path, baseline: str, capsys):
    machine = Fingerprint(backend="cpu", device="Test CPU", blas="openblas", cpu="Test CPU")
    path = noise_file(calibrate.default_noise_path(machine), mde_pct=30.0)
    assert path == Path("results/baselines/noise-cpu-openblas-test-cpu.json")
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.8})
    code, out, _ = run(["check", str(current), "--baseline", str(baseline)], capsys)
    assert code == 0
    assert f"noise band: {path}" in out


def test_noise_from_another_machine_is_refused(workdir: Path, baseline: str, capsys):
    noise = noise_file(
        workdir / "noise.json",
        5.0,
        {"backend": "metal", "device": "M3", "blas": "accelerate", "cpu": "M3"},
    )
    code, _, err = run(
        ["check", "base-run.jsonl", "--baseline", baseline, "--noise", str(noise)], capsys
    )
    assert code == 2
    assert "noise calibrated on metal · M3" in err


@pytest.mark.parametrize("text", ["", "{}", "[1, 2]", '{"kind": "fusebench-noise"}'])
def test_malformed_noise_file_exits_2(workdir: Path, baseline: str, capsys, text: str):
    path = workdir / "noise.json"
    path.write_text(text)
    code, _, err = run(
        ["check", "base-run.jsonl", "--baseline", baseline, "--noise", str(path)], capsys
    )
    assert code == 2 and err.count("\n") == 1
    assert str(path) in err


# --- named runs: history add --name, and what baseline save wrote ---------------------------------


def test_baseline_save_is_retired_and_names_its_replacement(workdir: Path, capsys):
    source = results_file(workdir / "run.jsonl")
    code, out, err = run(["baseline", "save", str(source), "--name", "cpu-ci"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "fusebench baseline is retired" in err and "history add RESULTS --name NAME" in err
    assert not Path("results").exists()


def test_history_add_names_the_run_and_a_second_naming_moves_the_name(workdir: Path, capsys):
    first = results_file(workdir / "a.jsonl", run_id="ra")
    second = results_file(workdir / "b.jsonl", run_id="rb")
    code, out, _ = run(["history", "add", str(first), "--name", "cpu-ci"], capsys)
    assert code == 0 and "1 run(s) added" in out and "cpu-ci: run ra" in out
    code, out, _ = run(["history", "add", str(second), "--name", "cpu-ci"], capsys)
    assert code == 0 and "cpu-ci: run rb" in out and "(was run ra)" in out
    (named,) = HistoryStore("results/history.sqlite").named("cpu-ci").values()
    assert named.run_id == "rb"
    # the run's header and timed trials are kept, its warmups and correctness records left behind
    kinds = [r["kind"] for r in HistoryStore("results/history.sqlite").records(named)]
    assert kinds == ["run"] + ["trial"] * len(SPEED) * len(JITTER)


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", ""])
def test_a_name_with_path_separators_is_bad_input(workdir: Path, capsys, name: str):
    code, _, err = run(
        ["history", "add", str(results_file(workdir / "run.jsonl")), "--name", name], capsys
    )
    assert code == 2 and err.count("\n") == 1
    assert "no path separators" in err
    assert not Path("results/history.sqlite").exists()


def test_a_name_takes_one_file_of_one_run(workdir: Path, capsys):
    a, b = (results_file(workdir / f"{n}.jsonl", run_id=n) for n in "ab")
    code, _, err = run(["history", "add", str(a), str(b), "--name", "x"], capsys)
    assert code == 2 and "give the one results file" in err
    both = workdir / "both.jsonl"
    both.write_text(a.read_text() + b.read_text())
    code, _, err = run(["history", "add", str(both), "--name", "x"], capsys)
    assert code == 2 and "the file holds 2 run(s)" in err
    code, _, err = run(["history", "show", "--name", "x"], capsys)
    assert code == 2 and "takes no results files or --name" in err


def test_an_unknown_name_is_bad_input_listing_the_names(workdir: Path, baseline: str, capsys):
    code, out, err = run(["check", "base-run.jsonl", "--baseline", "nosuch"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--baseline nosuch: no such results file, and no run of that name" in err
    assert "(names: cpu-ci)" in err


def test_a_name_on_a_run_added_before_trials_were_kept_says_how_to_mend_it(workdir: Path, capsys):
    # A store made before it kept records: the run and a name, nothing else.
    current = results_file(workdir / "now.jsonl")
    machine = "cpu · Test CPU · openblas · Test CPU"
    old = HistoryRun("r0", machine, "vm", "ci", "?", None, None, None, "old.jsonl", "t")
    store = HistoryStore("results/history.sqlite")
    store.add(old, [])
    store.name("cpu-ci", old, "t")
    code, _, err = run(["check", str(current), "--baseline", "cpu-ci"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "holds run r0 without its trials" in err and "history add old.jsonl" in err


def test_a_noise_file_without_speedups_has_nothing_to_add(workdir: Path, capsys):
    noise = noise_file(workdir / "noise.json", mde_pct=3.0)
    code, _, err = run(["history", "add", str(noise)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "noise.json: no speedups to add" in err


def test_a_file_baseline_save_wrote_still_reads_and_imports(workdir: Path, capsys):
    # Written by `baseline save` before the history kept named runs (tests/fixtures/old-stores).
    old = OLD_FILES / "baseline-save-cpu-ci.jsonl"
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.8})
    by_file = run(["check", str(current), "--baseline", str(old), "--format", "json"], capsys)
    assert run(["history", "add", str(old), "--name", "cpu-ci"], capsys)[0] == 0
    by_name = run(["check", str(current), "--baseline", "cpu-ci", "--format", "json"], capsys)
    assert by_file[0] == by_name[0] == 1
    verdicts = [json.loads(out)["verdicts"] for _, out, _ in (by_file, by_name)]
    assert verdicts[0] == verdicts[1]
    assert {(v["check"], v["variant"]) for v in verdicts[0] if v["failed"]} == {
        ("speedup", "compiled/baseline")
    }


# --- calibrate (the runs themselves stubbed: synthetic files instead of model runs) ---------------


def test_calibrate_writes_noise_bands_from_aa_comparisons(
    workdir: Path, capsys, monkeypatch: pytest.MonkeyPatch
):
    # Three "runs": the second 4% slower across the board, the third 2% faster: run-to-run noise of
    # up to 6%.
    runs = [
        results_file(
            workdir / f"run-{i}.jsonl",
            run_id=f"r{i}",
            scale={(v, m): factor for v in SPEED for m in ("prefill", "gen")},
        )
        for i, factor in enumerate((1.0, 0.96, 1.02))
    ]
    experiment = workdir / "ci.yaml"
    experiment.write_text(EXPERIMENT)
    monkeypatch.setattr(
        calibrate_command, "run_calibration", lambda exp, count, console: runs[:count]
    )
    code, out, _ = run(["calibrate", str(experiment), "--runs", "3"], capsys)
    assert code == 0
    path = Path("results/baselines/noise-cpu-openblas-test-cpu.json")
    assert f"wrote {path}" in out
    noise = load_noise(path)
    tps = noise.band("run_to_run_tps", "prefill")
    # Read as a slowdown, the widest pair (0.96 against 1.02) is 1 - 0.96/1.02.
    assert tps.max_aa_slowdown_pct == pytest.approx(100 * (1 - 0.96 / 1.02), abs=0.01)
    # The CIs (a few percent wide, from the jitter) cover part of that shift; the rest is the MDE.
    assert 0.0 < tps.mde_pct < tps.max_aa_slowdown_pct - tps.ci_half_width_pct / 2
    assert tps.comparisons == 3 * len(SPEED)  # 3 pairs of runs x 3 variants
    # Every variant slowed alike, so the speedups did not move: their noise is zero.
    speedup = noise.band("run_to_run_speedup", "gen")
    assert (speedup.mde_pct, speedup.max_aa_slowdown_pct, speedup.comparisons) == (0.0, 0.0, 3 * 2)
    assert noise.band("within_run", "prefill").comparisons == 3 * len(SPEED)
    assert json.loads(path.read_text())["experiment"]["name"] == "ci"
    # the runs themselves go to the history, where check holds later speedups against them
    assert out.count("1 run(s) added") == 3
    assert [r.run_id for r in HistoryStore("results/history.sqlite").runs()] == ["r0", "r1", "r2"]


def test_calibrate_from_existing_runs(workdir: Path, capsys):
    runs = [
        results_file(
            workdir / f"run-{i}.jsonl",
            run_id=f"r{i}",
            experiment=ALL_CORRECT,
            scale={("compiled", "prefill"): factor},
        )
        for i, factor in enumerate((1.0, 0.9))
    ]
    out_file = workdir / "noise.json"
    code, out, _ = run(["calibrate", "--from", *map(str, runs), "--out", str(out_file)], capsys)
    assert code == 0 and f"wrote {out_file}" in out.replace("\n", "")
    noise = load_noise(out_file)
    assert noise.runs == 2 and noise.experiment.name == "ci"
    assert noise.band("run_to_run_speedup", "prefill").max_aa_slowdown_pct == pytest.approx(10.0)
    assert noise.band("run_to_run_tps", "gen").max_aa_slowdown_pct == pytest.approx(0.0)


def test_calibrate_from_refuses_mixed_experiments_and_extra_arguments(workdir: Path, capsys):
    first = results_file(workdir / "a.jsonl")
    other = results_file(workdir / "b.jsonl", experiment=ALL_CORRECT)
    # another sha256: another experiment version
    other.write_text(other.read_text().replace('"0000', '"1111', 1))
    code, _, err = run(["calibrate", "--from", str(first), str(other)], capsys)
    assert code == 2 and "runs of different experiments" in err
    code, _, err = run(["calibrate", "--from", str(first), str(first), "--runs", "3"], capsys)
    assert code == 2 and "not both" in err


def test_calibrate_needs_two_runs(workdir: Path, capsys):
    code, _, err = run(["calibrate", "--runs", "1"], capsys)
    assert code == 2
    assert "needs two runs" in err


def test_every_input_error_is_a_user_error():
    # The command line turns UserError into one line and exit 2; the check's own errors must ride on
    # it.
    from fusebench.analysis.gate import CheckError
    from fusebench.core.fingerprint import MachineMismatchError

    for error in (MachineMismatchError, CheckError, calibrate.NoiseFileError):
        assert issubclass(error, UserError)


# --- a fusion's speedup against the history's runs ------------------------------------------------


def calibration_runs(workdir: Path, factors: list[float]) -> list[Path]:
    """Runs whose compiled prefill speedup is 1.1 x factor (the variants' jitter is shared, so
    exactly that)."""
    return [
        results_file(
            workdir / f"cal-{i}.jsonl", run_id=f"cal{i}", scale={("compiled", "prefill"): f}
        )
        for i, f in enumerate(factors)
    ]


# Ten runs whose compiled prefill speedup wanders by about 1% (SD 1.15%): the prediction bound,
# Bonferroni over the run's 4 rows (2 comparisons x 2 metrics), is 1 - exp(-t(9,
# 1 - 2.5%/4) * SD * sqrt(1 + 1/10)) = 3.7%, below the 5% threshold, which then binds.
WANDER = [1.00, 0.99, 1.01, 1.00, 0.98, 1.02, 1.00, 0.99, 1.01, 1.00]


@pytest.fixture(scope="module")
def wander_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """results/ as `calibrate --from` the WANDER runs leaves it (the noise file and the history
    holding the runs), made once: calibrating compares every pair of the ten runs (seconds), and
    each test below gates against the same history."""
    folder = tmp_path_factory.mktemp("wander")
    done = fusebench_here(
        "calibrate", "--from", *map(str, calibration_runs(folder, WANDER)), cwd=folder
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return folder / "results"


@pytest.mark.parametrize(("factor", "failed"), [(1.0, False), (0.97, False), (0.9, True)])
def test_a_speedup_is_gated_against_its_history(
    workdir: Path, wander_results: Path, capsys, factor: float, failed: bool
):
    shutil.copytree(wander_results, workdir / "results", dirs_exist_ok=True)
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): factor})
    code, out, _ = run(["check", str(current), "--format", "json"], capsys)
    assert code == (1 if failed else 0)
    rows = {
        (v["variant"], v["metric"]): v
        for v in json.loads(out)["verdicts"]
        if v["check"] == "history"
    }
    assert set(rows) == {
        (c, m) for c in ("compiled vs baseline", "sdpa vs baseline") for m in ("prefill", "gen")
    }
    row = rows["compiled vs baseline", "prefill"]
    assert row["baseline"] == pytest.approx(1.1, rel=1e-3) and row["current"] == pytest.approx(
        1.1 * factor
    )
    assert (row["limit_pct"], row["limit_bound"]) == (5.0, "threshold")
    assert row["failed"] is failed and row["verdict"] == (
        "regressed" if failed else "within history"
    )
    assert "from the mean of 10 runs" in row["note"]


def test_a_wide_history_sets_the_limit(workdir: Path, capsys):
    wide = [1.00, 0.94, 1.06, 1.00, 0.92, 1.08, 1.00, 0.95, 1.05, 1.00]
    assert run(["calibrate", "--from", *map(str, calibration_runs(workdir, wide))], capsys)[0] == 0
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.9})
    code, out, _ = run(["check", str(current), "--format", "json"], capsys)
    row = next(
        v
        for v in json.loads(out)["verdicts"]
        if (v["check"], v["variant"], v["metric"]) == ("history", "compiled vs baseline", "prefill")
    )
    sd = float(np.std(np.log(wide), ddof=1))
    bound = 100 * (1 - math.exp(-3.1109 * sd * math.sqrt(1.1)))  # t(9, 1 - 0.025 / 4 rows) = 3.1109
    assert row["limit_bound"] == "history" and row["limit_pct"] == pytest.approx(bound, abs=0.01)
    assert code == 0 and not row["failed"]  # -10% is inside this history's 15.8% bound


def test_a_short_history_is_reported_never_failed(workdir: Path, capsys):
    assert (
        run(
            ["calibrate", "--from", *map(str, calibration_runs(workdir, [1.0, 0.99, 1.01]))], capsys
        )[0]
        == 0
    )
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.5})
    code, out, _ = run(["check", str(current), "--format", "json"], capsys)
    rows = [v for v in json.loads(out)["verdicts"] if v["check"] == "history"]
    assert code == 0 and rows and not any(v["failed"] for v in rows)
    assert {v["verdict"] for v in rows} == {"needs more stored runs"}


def test_a_run_the_history_holds_is_not_held_against_itself(workdir: Path, capsys):
    runs = calibration_runs(workdir, WANDER)
    assert run(["history", "add", *map(str, runs)], capsys)[0] == 0
    # the last run, checked after it was added: the 9 others are its history
    code, out, _ = run(["check", str(runs[-1]), "--format", "json"], capsys)
    rows = [v for v in json.loads(out)["verdicts"] if v["check"] == "history"]
    assert code == 0 and rows and all("of 9 runs" in v["note"] for v in rows)
    assert {v["verdict"] for v in rows} == {"needs more stored runs"}


def test_an_old_noise_files_speedups_import_into_the_history(workdir: Path, capsys):
    # Written by calibrate before its runs went to the history: the bands still read as they were,
    # and `history add` takes the speedups it kept, one run per calibration run.
    old = OLD_FILES / "noise-with-speedup-history.json"
    assert load_noise(old).band("within_run", "prefill").mde_pct == 0.0
    code, out, _ = run(["history", "add", str(old)], capsys)
    assert code == 0 and "10 run(s) added" in out
    assert "0 run(s) added, 10 already held" in run(["history", "add", str(old)], capsys)[1]
    current = results_file(workdir / "now.jsonl", scale={("compiled", "prefill"): 0.9})
    code, out, _ = run(["check", str(current), "--noise", str(old), "--format", "json"], capsys)
    row = next(
        v
        for v in json.loads(out)["verdicts"]
        if (v["check"], v["variant"], v["metric"]) == ("history", "compiled vs baseline", "prefill")
    )
    # the same gate as the ten calibration runs themselves give (test_a_speedup_is_gated_...)
    assert code == 1 and row["failed"] and row["baseline"] == pytest.approx(1.1, rel=1e-3)
    assert "from the mean of 10 runs" in row["note"]


# --- the A/B gate: a current build that stalls ----------------------------------------------------


def ab_file(path: Path, stalls: dict[str, tuple[int, ...]]) -> Path:
    """A `run --against` file: 40 rounds, both builds alike (1% noise), except that the build named
    in `stalls` loses 40% of compiled's prefill in the listed rounds."""
    rng = np.random.default_rng(40)
    meta = cell(SIZE, run_id="ab")
    records: list[dict[str, Any]] = []
    for round_ in range(40):
        for variant in ("baseline", "compiled"):
            for build in ("current", "reference"):
                stalled = variant == "compiled" and round_ in stalls.get(build, ())
                prefill, gen = SPEED[variant]
                records.append(
                    {
                        "kind": "trial",
                        **meta,
                        "variant": variant,
                        "build": build,
                        "round": round_,
                        "warmup": False,
                        "prefill_tps": prefill * rng.lognormal(0, 0.01) * (0.6 if stalled else 1.0),
                        "gen_tps": gen * rng.lognormal(0, 0.01),
                    }
                )
    builds = {
        "current": {"commit": "c" * 40, "dirty": False},
        "reference": {"commit": "r" * 40, "dirty": False},
    }
    return write_results(
        path,
        records,
        experiment=EXPERIMENT,
        run_id="ab",
        env=ENV,
        builds=builds,
        file="experiments/ci.yaml",
    )


def test_a_current_build_that_stalls_fails_the_ab_gate(workdir: Path, capsys):
    stalling = ab_file(workdir / "ab.jsonl", {"current": (3, 9, 15, 22, 30, 37)})
    code, out, _ = run(["check", str(stalling), "--format", "json"], capsys)
    assert code == 1
    rows = {
        (v["variant"], v["metric"]): v for v in json.loads(out)["verdicts"] if v["check"] == "build"
    }
    prefill = rows["compiled", "prefill"]
    assert prefill["failed"] and prefill["stalls"] == "new" and prefill["over_all_rounds"] is True
    assert (
        prefill["excluded_against_new"],
        prefill["excluded_against_baseline"],
        prefill["rounds"],
    ) == (6, 0, 40)
    # The verdict's Δ is the one over all rounds; the trimmed one (about 0) is carried beside it.
    assert (
        prefill["delta_pct"]
        == prefill["all_rounds"]["delta_pct"]
        < prefill["trimmed"]["ci_low_pct"]
    )
    assert abs(prefill["trimmed"]["delta_pct"]) < 2.0 and prefill["trimmed"]["rounds"] == 34
    assert all(
        v["stalls"] is None
        for key, v in rows.items()
        if key != ("compiled", "prefill") and key[0] != "all variants"
    )
    _, text, _ = run(["check", str(stalling), "--max-regression", "90"], capsys)
    failed = text.split("Failed:")[1]
    assert (
        "compiled prefill: the current build stalls and "
        "the reference build does not: 6 of 40 rounds" in failed
    )


def test_a_reference_build_that_stalls_does_not_fail_the_gate(workdir: Path, capsys):
    code, out, _ = run(
        [
            "check",
            str(ab_file(workdir / "ab.jsonl", {"reference": (3, 9, 15, 22, 30, 37)})),
            "--format",
            "json",
        ],
        capsys,
    )
    rows = {
        (v["variant"], v["metric"]): v for v in json.loads(out)["verdicts"] if v["check"] == "build"
    }
    assert (
        rows["compiled", "prefill"]["stalls"] == "baseline"
        and not rows["compiled", "prefill"]["failed"]
    )
    assert code == 0


# --- three outcomes: the slow VM's real gate runs -------------------------------------------------

SLOW_VM = Path(__file__).resolve().parent / "fixtures" / "slow-vm"


@pytest.mark.parametrize("name", ["ab-identical.jsonl", "ab-softcap-sleeps-15ms.jsonl"])
def test_a_gate_run_too_noisy_to_see_the_limit_cannot_tell_and_never_passes(name: str, capsys):
    # Real runs from the slow VM that the old gate called "passed": 6-7 rounds at 4-11% noise per
    # round.
    code = main(["check", str(SLOW_VM / name)])
    out = capsys.readouterr().out
    assert code == 3, out
    assert out.splitlines()[-1] == "cannot tell" and "check: passed" not in out
    flat = " ".join(out.split())  # the console wraps long lines
    assert re.search(
        r"about \d+ rounds \(\d ran, [\d.]+ (s|min) more at this run's pace\) would settle it", flat
    )


def test_the_json_of_an_undecided_gate_says_what_would_settle_each_row(capsys):
    assert main(["check", str(SLOW_VM / "ab-identical.jsonl"), "--format", "json"]) == 3
    document = json.loads(capsys.readouterr().out)
    assert (document["passed"], document["cannot_tell"], document["exit_code"]) == (False, True, 3)
    undecided = [v for v in document["verdicts"] if v["verdict"] == Status.CANNOT_TELL.value]
    assert undecided and all(
        v["settle_rounds"] > v["rounds"] for v in undecided if v["settle_rounds"]
    )
    # Each undecided row's interval reaches across the -5% limit.
    assert all(v["ci_low_pct"] < -5.0 <= (v["ci_high_pct"] or math.inf) for v in undecided)
