"""A plugin file outside the package, end to end: a right variant passes the correctness gate and
gets a verdict in the report; a wrong one is caught by the gate, by `fusebench verify` (exit 1) and
by `fusebench check` (exit 1).

Each command runs in its own process, as a user runs it, so the variants the plugins register never
leak into the registry of the tests that follow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, fusebench

GOOD, BAD = ROOT / "examples/plugins/fast_softcap.py", ROOT / "examples/plugins/broken_softcap.py"

EXPERIMENT = f"""\
name: plugins
models: [{{preset: tiny}}]
plugins: [{GOOD}, {BAD}]
variants:
  base: {{}}
  reciprocal: {{softcap: reciprocal}}
  forgot: {{softcap: forgot_cap}}
comparisons: [[base, reciprocal], [base, forgot]]
workloads: {{prompt_tokens: 12, gen_tokens: 3}}
trials: 3
shares: 1          # one round: the worker times the plugin's op too (Expected Δ column)
warmup: 1
expect:
  - {{all_correct: true}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "exp.yaml").write_text(EXPERIMENT)
    done = fusebench("run", "exp.yaml", "--out", "r.jsonl", "--quiet", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder


def test_the_run_records_the_plugins_and_the_gate_catches_the_wrong_one(run: Path):
    records = [json.loads(line) for line in (run / "r.jsonl").read_text().splitlines()]
    header = records[0]
    assert {Path(p["path"]).name for p in header["plugins"]} == {GOOD.name, BAD.name}
    assert all(len(p["sha256"]) == 64 for p in header["plugins"])
    passed = {r["variant"]: r["passed"] for r in records if r["kind"] == "correctness"}
    assert passed == {"base": True, "reciprocal": True, "forgot": False}


def test_the_report_shows_the_right_one_and_never_calls_the_wrong_one_faster(run: Path):
    done = fusebench("report", "r.jsonl", "--out", "report", cwd=run)
    assert done.returncode == 0, done.stderr
    markdown = (run / "report" / "report.md").read_text()
    assert "### base → reciprocal" in markdown and "### base → forgot" in markdown
    forgot = markdown.split("### base → forgot")[1].split("###")[0]
    rows = [
        line
        for line in forgot.splitlines()
        if line.startswith("| tiny") and line.split("|")[2].strip() in ("prefill", "gen")
    ]
    # Its verdict says incorrect, and neither a measured nor an expected Δ is shown for it.
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert rows and all("✗ incorrect" in row and row[-1] == "—" and row[4] == "—" for row in cells)
    # The correct plugin variant gets the Δ its op accounts for, from the run's op shares.
    reciprocal = markdown.split("### base → reciprocal")[1].split("###")[0]
    lines = [line for line in reciprocal.splitlines() if line.startswith("| tiny")]
    expected = [line.strip(" |").split("|")[-1].strip() for line in lines]
    assert expected and all(cell[0] in "+-" and "[" in cell for cell in expected)


def test_check_fails_the_wrong_one(run: Path):
    done = fusebench("check", "r.jsonl", cwd=run)
    assert done.returncode == 1
    assert "forgot" in done.stdout and "✗ incorrect" in done.stdout


@pytest.mark.parametrize(("plugin", "code"), [(GOOD, 0), (BAD, 1)])
def test_verify_checks_a_plugin_against_the_reference(plugin: Path, code: int, tmp_path: Path):
    done = fusebench("verify", "--plugin", str(plugin), "--tokens", "2", cwd=tmp_path)
    assert done.returncode == code, done.stdout + done.stderr
