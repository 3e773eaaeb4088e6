"""Every script times its own tree (issue 77, item 5): benchmarks/ and docs/make.py import the
fusebench of the checkout they stand in (benchmarks/own_tree.py), never the one the venv
installed, and start children through its launcher. Shown from a second checkout whose code
differs: its scripts fail on its own change, where the venv's fusebench would not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARK = "the second checkout's fusebench"


@pytest.fixture(scope="module")
def second_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout's code whose fusebench stops at import with MARK."""
    copy = tmp_path_factory.mktemp("second") / "checkout"
    for part in ("bench", "models", "benchmarks", "experiments", "docs"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
    init = copy / "bench" / "__init__.py"
    init.write_text(init.read_text() + f"\nraise SystemExit({MARK!r})\n")
    return copy


@pytest.mark.parametrize(
    "script", ["benchmarks/schedule_weighing.py", "benchmarks/clock_spread.py", "docs/make.py"]
)
def test_a_script_imports_the_fusebench_of_the_checkout_it_stands_in(second_checkout, script):
    ran = subprocess.run(
        [sys.executable, str(second_checkout / script), "--help"],
        cwd=ROOT,  # run from the first checkout: its folder must not decide either
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode != 0 and MARK in ran.stderr


def test_the_same_script_in_this_checkout_runs():
    ran = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "schedule_weighing.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0 and "usage:" in ran.stdout


def test_no_script_decides_its_fusebench_by_sys_path():
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("benchmarks", "docs")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "sys.path.insert" in line
    ]
    assert found == []
