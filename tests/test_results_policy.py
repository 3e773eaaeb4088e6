"""results/ as docs/development.md ("What results/ keeps") says: evidence, not an archive. Only
what git tracks is held to it, so a user's own runs written there (the main job's default --out)
never fail the suite."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

RESULTS = ROOT / "results"
LIMIT_BYTES = 20 * 2**20
LARGEST_PLAIN_BYTES = 256 * 2**10  # a console log or a table; raw rounds are compressed
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def tracked() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: which files results/ holds is git's to say")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).exists()]


def test_results_stays_within_its_size():
    size = sum(path.stat().st_size for path in tracked())
    assert size <= LIMIT_BYTES, f"results/ holds {size / 2**20:.1f} MiB, more than 20"


def test_raw_rounds_are_compressed_and_nothing_plain_is_large():
    files = tracked()
    plain_rounds = [p for p in files if p.name.endswith(".jsonl")]
    assert not plain_rounds, f"compress them (gzip -9n): {plain_rounds}"
    large = [p for p in files if p.suffix != ".gz" and p.stat().st_size > LARGEST_PLAIN_BYTES]
    assert not large, f"over 256 kB uncompressed: {large}"


def test_every_entry_has_its_summary_and_the_index_names_it():
    entries = {path.relative_to(RESULTS).parts[0] for path in tracked()}
    index = (RESULTS / "summary.md").read_text()
    folders = [e for e in entries if (RESULTS / e).is_dir()]
    assert [f for f in folders if not (RESULTS / f / "summary.md").exists()] == []
    named = {target.split("/")[0] for target in LINK.findall(index)}
    assert sorted(entries - named - {"summary.md"}) == []


def test_every_link_in_a_summary_resolves():
    broken = []
    for page in (path for path in tracked() if path.suffix == ".md"):
        for target in LINK.findall(page.read_text()):
            path = target.partition("#")[0]
            if path and not re.match(r"^[a-z]+:", path) and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
