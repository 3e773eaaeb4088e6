"""Reports of committed results files, byte for byte as the release before records were declared
once (core.header) wrote them: how records are declared, written and read may change; what a report
says of a file may not, unless on purpose (then rewrite tests/fixtures/report-digests.json with
`python tests/golden_reports.py FILE...`, and say why in the commit: changed since, on purpose,
results/default-duet-cpu-20261202's "Rounds:" lines, which name the size that ran sequentially).

The files cover every record kind and header part: formats 1-3 and an ops run, a duet on the CPU
clock with its load samples, two environments (run --against-env), an mlx-lm model from the hub
with its kernel facts and switched names. Every committed results file was compared once, when
the declarations changed (tests/golden_reports.py over results/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden_reports import report_digests

from fusebench.analysis.study import build_study, resolve_comparisons
from fusebench.commands.sources import load_results
from fusebench.present.report import write_report

ROOT = Path(__file__).resolve().parent.parent
DIGESTS = json.loads((ROOT / "tests" / "fixtures" / "report-digests.json").read_text())


@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_a_committed_file_reports_as_it_did(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # the report names its sources as given: relative to the checkout
    assert report_digests(Path(name)) == DIGESTS[name]


# Committed reports and the compressed results files they were written from (reports/<name>/):
# `fusebench report` of the raw rounds, as results/ keeps them, writes the page as committed.
COMMITTED_REPORTS = {
    "pr18809": ["results/pr18809-20261130-2137.jsonl.gz"],
    "mlx-0.32.4-vs-0.31.2": ["results/mlx-0.32.4-vs-0.31.2.jsonl.gz"],
}


@pytest.mark.parametrize("name", sorted(COMMITTED_REPORTS))
def test_a_committed_report_is_what_report_writes_from_its_compressed_results(
    name, tmp_path, monkeypatch
):
    monkeypatch.chdir(ROOT)  # the page names its sources as given: relative to the checkout
    sources = [Path(source) for source in COMMITTED_REPORTS[name]]
    study = build_study(load_results(sources))
    write_report(study, resolve_comparisons([], study), tmp_path, sources=sources)
    committed = ROOT / "reports" / name / "report.md"
    assert (tmp_path / "report.md").read_bytes() == committed.read_bytes()
