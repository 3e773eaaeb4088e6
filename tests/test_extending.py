"""What it takes to add a stopping rule or a schedule, checked by adding one of each to a throwaway
copy of the tree, which then parses, runs and records it: docs/examples/stopping-rule.diff
(`trials: minimum`, the fewest rounds a t interval is trusted at) and
docs/examples/reversed-schedule.diff (`schedule: reversed`, the variants in the opposite order).
docs/architecture.md lists the files each touches; the diffs are held to them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from conftest import ROOT, fusebench, tree_copy

EXAMPLES = ROOT / "docs" / "examples"
EXPERIMENT = """\
name: {name}
models: [{{preset: tiny}}]
variants: {{a: {{}}, b: {{geglu: compiled}}}}
comparisons: [[a, b]]
workloads: {{prompt_tokens: 8, gen_tokens: 2}}
trials: {trials}
shares: 0
schedule: {schedule}
threads: 1
"""


def _applied(tmp_path: Path, example: str, section: str, experiment: str) -> list[dict]:
    """The example diff, held to the files the docs' section names (three at most), applied to a
    copy of the tree, which then runs `experiment`: its records."""
    diff = EXAMPLES / example
    touched = re.findall(r"^\+\+\+ b/(\S+)", diff.read_text(), re.MULTILINE)
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    named = architecture[architecture.index(f"### {section}") :].split("###")[1]
    assert 0 < len(touched) <= 3
    assert all(f"`{path}`" in named for path in touched)

    tree = tree_copy(tmp_path / "tree")
    subprocess.run(["git", "apply", str(diff)], cwd=tree, check=True, capture_output=True)
    (tree / "example.yaml").write_text(experiment)
    done = fusebench("run", "example.yaml", "--out", "r.jsonl", "--quiet", cwd=tree)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in (tree / "r.jsonl").read_text().splitlines()]


def test_a_stopping_rule_is_added_in_the_files_the_docs_name(tmp_path: Path):
    experiment = EXPERIMENT.format(name="minimum", trials="minimum", schedule="sequential")
    records = _applied(tmp_path, "stopping-rule.diff", "Adding a stopping rule", experiment)
    header = next(r for r in records if r["kind"] == "run")
    stops = [r for r in records if r["kind"] == "stop"]
    assert header["trials"] == "minimum"
    assert stops and {stop["rounds"] for stop in stops} == {8}  # MIN_PLANNED_ROUNDS


def test_a_schedule_is_added_in_the_files_the_docs_name(tmp_path: Path):
    experiment = EXPERIMENT.format(name="reversed", trials=3, schedule="reversed")
    records = _applied(tmp_path, "reversed-schedule.diff", "Adding a schedule", experiment)
    header = next(r for r in records if r["kind"] == "run")
    stops = [r for r in records if r["kind"] == "stop"]
    timed = [
        (r["round"], r["variant"]) for r in records if r["kind"] == "trial" and not r["warmup"]
    ]
    assert header["schedule_choice"]["schedule"] == "reversed"
    assert stops and {stop["schedule"] for stop in stops} == {"reversed"}
    # sequential runs a, b, then b, a (ABBA); reversed runs each round the other way
    assert timed == [(0, "b"), (0, "a"), (1, "a"), (1, "b"), (2, "b"), (2, "a")]
