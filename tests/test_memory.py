"""Peak memory per phase: recorded by every trial, reported with each comparison's change, and read
back by `fusions --confirm` beside the chains' bytes saved."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cell, results_file, trials

from fusebench.analysis.memory import peak_change, phase_peaks
from fusebench.analysis.study import build_study
from fusebench.core.results import read_results
from fusebench.measure.worker import make_prompt, time_trial
from fusebench.models.loading import load_model
from fusebench.present.report import write_report

EXPERIMENT = """\
name: m
models: [{preset: e2b, layers: 2}]
variants:
  baseline: {geglu: unfused}
  compiled: {geglu: compiled}
comparisons: [[baseline, compiled]]
workloads: {prompt_tokens: 128, gen_tokens: 4}
trials: 3
"""
MIB = 2**20


def test_a_trial_records_each_phase_peak_and_the_larger_as_its_own() -> None:
    tiny = load_model("tiny")
    prompt = make_prompt(tiny.args.vocab_size, 1, 12, 0, 0)
    record = time_trial(tiny, prompt, 3, 2048).measured
    assert record.prefill_peak_bytes > 0 and record.gen_peak_bytes > 0
    assert record.peak_memory_bytes == max(record.prefill_peak_bytes, record.gen_peak_bytes)
    alone = time_trial(tiny, prompt, 1, 2048).measured
    assert alone.gen_peak_bytes is None and alone.peak_memory_bytes == alone.prefill_peak_bytes


def peaked(prefill: dict[str, int], gen: dict[str, int]) -> list[dict]:
    records = trials(cell(gen=4), {v: [(100.0, 10.0)] * 3 for v in prefill})
    for record in records:
        record["prefill_peak_bytes"] = prefill[record["variant"]] + record["round"]
        record["gen_peak_bytes"] = gen[record["variant"]]
    return records


def test_the_report_shows_each_phase_peak_and_the_change(tmp_path: Path) -> None:
    records = peaked(
        {"baseline": 400 * MIB, "compiled": 300 * MIB}, {"baseline": 8 * MIB, "compiled": 8 * MIB}
    )
    path = results_file(tmp_path / "r.jsonl", records, experiment=EXPERIMENT)
    study = build_study(read_results([path]))
    peaks = phase_peaks(study.timed)
    base = next(p for p in peaks if p.variant == "baseline" and p.metric == "prefill")
    assert base.bytes == 400 * MIB + 1 and base.trials == 3  # the median of the three trials
    assert peak_change(peaks, base, "compiled") == pytest.approx(-0.25, abs=1e-6)
    out = tmp_path / "report"
    write_report(study, [("baseline", "compiled")], out)
    text = (out / "report.md").read_text()
    assert "## Peak memory" in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()]
    assert ["E2B (2/35 layers)", "prefill", "400 MiB", "300 MiB", "-25.0%"] in rows
    assert ["E2B (2/35 layers)", "decode", "8.00 MiB", "8.00 MiB", "+0.0%"] in rows


def test_runs_before_phase_peaks_show_no_memory_table(tmp_path: Path) -> None:
    records = trials(
        cell(gen=4), {"baseline": [(100.0, 10.0)] * 3, "compiled": [(101.0, 10.0)] * 3}
    )
    path = results_file(tmp_path / "r.jsonl", records, experiment=EXPERIMENT)
    study = build_study(read_results([path]))
    assert phase_peaks(study.timed) == []
    out = tmp_path / "report"
    write_report(study, [("baseline", "compiled")], out)
    assert "Peak memory" not in (out / "report.md").read_text()


def test_runs_closing_table_shows_the_peak_change_beside_each_rows_delta(tmp_path: Path) -> None:
    from fusebench.present.summary import run_summary_table

    records = peaked(
        {"baseline": 400 * MIB, "compiled": 300 * MIB}, {"baseline": 8 * MIB, "compiled": 8 * MIB}
    )
    path = results_file(tmp_path / "r.jsonl", records, experiment=EXPERIMENT)
    study = build_study(read_results([path]))
    (machine,) = study.machines
    (workload,) = set(study.timed["workload"])
    table = run_summary_table(study, machine, workload, [("baseline", "compiled")])
    assert table.columns[-1] == "Peak Δ compiled"
    by_metric = {row[1]: row[-1] for row in table.rows}
    assert by_metric == {"prefill": "-25.0%", "gen": "+0.0%"}
