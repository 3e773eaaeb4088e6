"""`fusebench run --model M --op OP=A,B`: an experiment from flags, run, reported and gated like a
file, saved as the file it stands for, and its bad flags as one line and exit 2."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from fusebench.commands import main
from fusebench.core.experiment import Trials
from fusebench.core.flags import experiment_from_flags
from fusebench.core.results import read_results
from fusebench.core.spec import parse_experiment


@pytest.fixture(scope="module")
def flag_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("flags")
    out, saved = folder / "r.jsonl", folder / "saved.yaml"
    argv = ["run", "--model", "tiny", "--op", "geglu=unfused,compiled", "-p", "12", "-n", "3"]
    argv += ["--trials", "2", "--schedule", "sequential", "--out", str(out)]
    assert main([*argv, "--save-experiment", str(saved), "--quiet"]) == 0
    return out, saved


def test_a_flag_run_records_the_experiment_it_saved(flag_run):
    out, saved = flag_run
    (header,) = read_results([out]).of_kind("run")
    assert header["experiment"]["sha256"] == hashlib.sha256(saved.read_bytes()).hexdigest()
    exp = parse_experiment(saved.read_text())
    assert list(exp.variants) == ["unfused", "compiled"]
    assert [(c.baseline, c.new) for c in exp.comparisons] == [("unfused", "compiled")]
    assert exp.trials is Trials.AUTO  # as a file would say it
    trials = read_results([out]).of_kind("trial")
    assert {t["variant"] for t in trials} == {"unfused", "compiled"}
    assert {t["prompt_tokens"] for t in trials} == {12}


def test_a_flag_run_reports_and_gates_like_a_file(flag_run, tmp_path):
    out, _ = flag_run
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    assert "compiled" in (tmp_path / "rep" / "report.md").read_text()
    assert main(["check", str(out)]) == 0


def test_the_saved_experiment_runs_as_the_same_experiment(flag_run, tmp_path):
    _, saved = flag_run
    again = tmp_path / "again.jsonl"
    argv = ["run", str(saved), "--trials", "1", "--schedule", "sequential", "--out", str(again)]
    assert main([*argv, "--quiet"]) == 0
    first = read_results([flag_run[0]]).of_kind("run")[0]["experiment"]["sha256"]
    assert read_results([again]).of_kind("run")[0]["experiment"]["sha256"] == first


def test_several_ops_form_a_matrix_against_the_first_values():
    text = experiment_from_flags(
        [{"preset": "e2b", "layers": 2}],
        [("geglu", ("unfused", "compiled")), ("softcap", ("unfused", "compiled"))],
        128,
        3,
    )
    exp = parse_experiment(text)
    assert len(exp.variants) == 4
    assert exp.variants["geglu-unfused_softcap-unfused"] == {
        "geglu": "unfused",
        "softcap": "unfused",
    }
    assert {c.baseline for c in exp.comparisons} == {"geglu-unfused_softcap-unfused"}
    assert len(exp.comparisons) == 3
    assert yaml.safe_load(text)["models"] == [{"preset": "e2b", "layers": 2}]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "tiny", "--op", "geglu=unfused,fast"], "choose from unfused, compiled"),
        (["--model", "tiny", "--op", "glu=unfused,compiled"], "unknown op 'glu'; choose from"),
        (["--model", "nope", "--op", "geglu=unfused,compiled"], "neither a preset"),
        (["--model", "tiny"], "needs --model PRESET|PATH and --op"),
        (["ci", "--model", "tiny", "--op", "geglu=unfused,compiled"], "not both"),
        (
            ["--model", "tiny", "--op", "geglu=unfused,compiled", "--op", "geglu=compiled,unfused"],
            "given twice",
        ),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(argv, message, capsys, tmp_path):
    assert main(["run", *argv, "--out", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_an_op_flag_without_two_variants_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as usage:
        main(["run", "--model", "tiny", "--op", "geglu=unfused"])
    assert usage.value.code == 2
    assert "two or more of its variants" in capsys.readouterr().err
