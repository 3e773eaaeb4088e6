"""The README and docs/ as a reader follows them: every relative link and anchor resolves, and the
experiment page's key table is the schema's own (core.spec.KEYS), as `run --help` prints it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT

from fusebench.core.spec import schema_text

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", page.read_text())
    heads = re.findall(r"^#+\s+(.*)$", text, re.M)
    return {re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", head.strip().lower())) for head in heads}


def links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(FENCE.sub("", page.read_text()))
        if not re.match(r"^[a-z]+:", target)
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or (
            anchor and where.suffix == ".md" and anchor not in anchors(where)
        ):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    # Prose at the code's line length; tables and real output keep their shape.
    prose = FENCE.sub("", (ROOT / "README.md").read_text()).splitlines()
    assert all(len(line) <= 100 for line in prose if not line.startswith("|"))
    first = FENCE.search((ROOT / "README.md").read_text()).group(0).splitlines()[1:-1]
    assert len(first) == 2  # set up and run the main job; set up and run the tests


def test_the_readme_and_the_manual_stay_within_their_length():
    words = {page.relative_to(ROOT).as_posix(): len(page.read_text().split()) for page in PAGES}
    assert words.pop("README.md") <= 1500
    assert sum(words.values()) <= 18000, words


def test_the_experiment_page_holds_the_schema_as_the_code_declares_it():
    page = (ROOT / "docs" / "experiments.md").read_text()
    assert f"```yaml\n{schema_text()}\n```" in page, "regenerate: .venv/bin/python docs/make.py"


def doc_commands() -> list[tuple[str, str]]:
    """Each `fusebench ...` command in the README's and docs' fenced blocks, as a reader would
    type it: one line, its comment, pipes and redirections cut away."""
    found = []
    for page in PAGES:
        for block in FENCE.findall(page.read_text()):
            for line in block.splitlines()[1:-1]:
                for part in re.split(r"\s(?:&&|;|\|)\s", line.split("  #")[0]):
                    words = part.split(">")[0].strip().removeprefix(".venv/bin/")
                    if words.startswith("fusebench ") and not words.startswith("fusebench:"):
                        found.append((page.relative_to(ROOT).as_posix(), words))
    return found


@pytest.mark.parametrize("page, command", doc_commands())
def test_every_documented_command_is_one_the_cli_accepts(page: str, command: str):
    import shlex

    from fusebench.commands import build_parser

    try:
        build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as exit:
        pytest.fail(f"{page}: `{command}` is refused (exit {exit.code})")
