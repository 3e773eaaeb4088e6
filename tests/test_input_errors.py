"""Every error a user can cause is one line and exit code 2, never a traceback: each case through
`main([...])`."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cell, results_file, trials

from fusebench.commands import main

EXPERIMENT = """\
name: t
models: [{preset: tiny}]
variants:
  a: {}
  b: {geglu: compiled}
comparisons: [[a, b]]
workloads: {prompt_tokens: 8, gen_tokens: 2}
"""


def good_results(path: Path) -> Path:
    of = cell("tiny", prompt=8, gen=2, key="tiny")
    return results_file(
        path,
        trials(of, {v: [(100.0 + r, 10.0) for r in range(3)] for v in "ab"}),
        experiment=EXPERIMENT,
        file="t.yaml",
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    utf16 = tmp_path / "utf16.jsonl"
    utf16.write_text(good_results(tmp_path / "tmp.jsonl").read_text(), encoding="utf-16")
    bad_plugin = tmp_path / "broken.py"
    bad_plugin.write_text(
        "from fusebench.models.ops import register\n\nraise RuntimeError('not today')\n"
    )
    unknown_op = tmp_path / "unknown-op.yaml"
    unknown_op.write_text(EXPERIMENT.replace("{geglu: compiled}", "{gelu: compiled}"))
    noise = tmp_path / "noise.json"
    noise.write_text("[1, 2]")
    return {
        "GOOD": good_results(tmp_path / "good.jsonl"),
        "BINARY": binary,
        "UTF16": utf16,
        "DIR": tmp_path,
        "MISSING": tmp_path / "missing.jsonl",
        "STORE": tmp_path / "history.sqlite",
        "PLUGIN": bad_plugin,
        "UNKNOWN_OP": unknown_op,
        "NOISE": noise,
        "OUT": tmp_path / "out",
    }


CASES = {
    "report of a binary file": (
        ["report", "BINARY", "--out", "OUT"],
        "binary.jsonl: no valid records",
    ),
    "report of a UTF-16 file": (
        ["report", "UTF16", "--out", "OUT"],
        "utf16.jsonl: no valid records",
    ),
    "report of a folder": (["report", "DIR", "--out", "OUT"], "no such results file"),
    "report of a missing file": (
        ["report", "MISSING", "--out", "OUT"],
        "missing.jsonl: no such results file",
    ),
    "report --compare of an unknown variant": (
        ["report", "GOOD", "--out", "OUT", "--compare", "a:nosuch"],
        "no variant 'nosuch' in the results; variants: a, b",
    ),
    "report --compare malformed": (
        ["report", "GOOD", "--out", "OUT", "--compare", "a-b"],
        "BASELINE:NEW",
    ),
    "report --reference unknown": (
        ["report", "GOOD", "--out", "OUT", "--reference", "nosuch"],
        "nosuch",
    ),
    "check of a binary file": (["check", "BINARY"], "binary.jsonl: no valid records"),
    "check of a UTF-16 file": (["check", "UTF16"], "utf16.jsonl: no valid records"),
    "check --baseline of a binary file": (
        ["check", "GOOD", "--baseline", "BINARY"],
        "binary.jsonl: no valid records",
    ),
    "check --noise of a wrong file": (
        ["check", "GOOD", "--noise", "NOISE"],
        "noise.json: not a noise file",
    ),
    "check --max-regression out of range": (
        ["check", "GOOD", "--max-regression", "150"],
        "below 100%",
    ),
    "run --max-regression not a percentage": (
        ["run", "ci", "--max-regression", "lots"],
        "--max-regression",
    ),
    "history add with a path as name": (
        ["history", "add", "GOOD", "--name", "../x", "--store", "STORE"],
        "--name '../x'",
    ),
    "baseline save, retired": (
        ["baseline", "save", "GOOD", "--name", "x"],
        "retired; the history keeps named runs: fusebench history add RESULTS --name NAME",
    ),
    "check --baseline of an unknown name": (
        ["check", "GOOD", "--baseline", "nosuch", "--store", "STORE"],
        "--baseline nosuch: no such results file, and no run of that name in the history",
    ),
    "kernels of an unknown size": (
        ["kernels", "--sizes", "e9b"],
        "unknown preset 'e9b'; choose from",
    ),
    "run with an unknown op": (
        ["run", "UNKNOWN_OP", "--dry-run"],
        "unknown-op.yaml:5: variants.b.gelu: unknown op",
    ),
    "verify with a broken plugin": (
        ["verify", "--plugin", "PLUGIN"],
        "broken.py:3: plugin: RuntimeError: not today",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_2(
    case: str, files: dict[str, Path], capsys: pytest.CaptureFixture
):
    argv, message = CASES[case]
    try:
        code = main([str(files.get(arg, arg)) for arg in argv])
    except SystemExit as usage:  # argparse's own usage errors
        code = usage.code
    out, err = capsys.readouterr()
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err, err
    assert out.count("\n") + err.count("\n") <= 4, out  # no screen of warnings before the one line
