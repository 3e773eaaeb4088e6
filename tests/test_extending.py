"""What it takes to add a stopping rule, checked by adding one: docs/examples/stopping-rule.diff
(`trials: minimum`, the fewest rounds a t interval is trusted at) applied to a throwaway copy of
the tree, which then parses, runs and records it. docs/architecture.md lists the files it touches;
the diff is held to them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from conftest import ROOT, fusebench, tree_copy

EXAMPLE = ROOT / "docs" / "examples" / "stopping-rule.diff"
EXPERIMENT = """\
name: minimum
models: [{preset: tiny}]
variants: {a: {}, b: {geglu: compiled}}
comparisons: [[a, b]]
workloads: {prompt_tokens: 8, gen_tokens: 2}
trials: minimum
shares: 0
schedule: sequential
threads: 1
"""


def test_a_stopping_rule_is_added_in_the_files_the_docs_name(tmp_path: Path):
    touched = re.findall(r"^\+\+\+ b/(\S+)", EXAMPLE.read_text(), re.MULTILINE)
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    section = architecture[architecture.index("### Adding a stopping rule") :]
    assert len(touched) <= 3
    assert all(f"`{path}`" in section.split("###")[1] for path in touched)

    tree = tree_copy(tmp_path / "tree")
    subprocess.run(["git", "apply", str(EXAMPLE)], cwd=tree, check=True, capture_output=True)
    (tree / "minimum.yaml").write_text(EXPERIMENT)
    done = fusebench("run", "minimum.yaml", "--out", "r.jsonl", "--quiet", cwd=tree)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tree / "r.jsonl").read_text().splitlines()]
    header = next(r for r in records if r["kind"] == "run")
    stops = [r for r in records if r["kind"] == "stop"]
    assert header["trials"] == "minimum"
    assert stops and {stop["rounds"] for stop in stops} == {8}  # MIN_PLANNED_ROUNDS
