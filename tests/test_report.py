"""`fusebench report` on synthetic results with known values: no model runs, only JSONL written to
tmp_path."""

from __future__ import annotations

import argparse
import io
import math
import re
import shutil
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from conftest import TEST_ENV, cell, header, results_file, trials, write_records
from matplotlib.figure import Figure
from rich.console import Console

from fusebench.analysis import study as report
from fusebench.analysis.inference import VerdictWord, adjust, paired_estimate
from fusebench.analysis.reference import ReferenceFileError
from fusebench.analysis.study import ComparisonError
from fusebench.commands import main
from fusebench.commands.report import add_arguments
from fusebench.commands.report import main as command
from fusebench.commands.sources import load_reference, load_results
from fusebench.core.fileformat import ResultsError
from fusebench.core.results import read_results
from fusebench.present import plots
from fusebench.present.report import write_report
from fusebench.present.summary import print_summary

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXPERIMENT = """\
name: fusion
models:
  - {preset: e2b, layers: 2}
variants:
  baseline: {geglu: unfused, softcap: unfused}
  compiled: {geglu: compiled, softcap: compiled}
comparisons:
  - [baseline, compiled]
workloads: {prompt_tokens: 128, gen_tokens: 32}
trials: 5
"""
OPS = {
    "baseline": {"geglu": "unfused", "softcap": "unfused", "attention": "manual"},
    "compiled": {"geglu": "compiled", "softcap": "compiled", "attention": "manual"},
    "sdpa": {"geglu": "unfused", "softcap": "unfused", "attention": "sdpa"},
}


# This file's workload is pp128 tg32 b1.
meta = partial(cell, gen=32)


def with_timings(trial: dict[str, Any]) -> dict[str, Any]:
    """A trial as the runner records it: its variant's ops, and its phases' seconds at its tok/s."""
    return {
        "ops": OPS[trial["variant"]],
        "prefill_s": 128 / trial["prefill_tps"],
        "gen_s": None if trial["gen_tps"] is None else 31 / trial["gen_tps"],
        "peak_memory_bytes": 1_000_000,
        "compile_s": None,
        **trial,
    }


def rounds(
    of: dict[str, Any], prefill: dict[str, list[float]], gen: dict[str, list[float]]
) -> list[dict]:
    """Timed trials, one per variant per round, plus a warmup with absurd numbers that must never
    count."""
    warmups = trials(of, {v: [(1.0, 1.0)] for v in prefill}, warmup=True, compile_s=9.0)
    timed = trials(of, {v: list(zip(values, gen[v], strict=True)) for v, values in prefill.items()})
    return [with_timings(t) for t in [*warmups, *timed]]


def write(
    path: Path,
    records: list[dict[str, Any]],
    run_id: str = "run1",
    hostname: str = "vm",
    experiment: str = EXPERIMENT,
    **extra: Any,
) -> Path:
    """One run of this file's experiment on a host."""
    return results_file(
        path,
        records,
        experiment=experiment,
        run_id=run_id,
        env={**TEST_ENV, "hostname": hostname},
        file="x.yaml",
        **extra,
    )


# E2B: prefill medians 18,777 vs 21,901 with every round's ratio exactly 1.1664..., gen 153.8 vs
# 176.9.
E2B_BASE_PREFILL = [18500.0, 18777.0, 18900.0, 18600.0, 19000.0]
E2B_RATIO = 21901.0 / 18777.0
E2B_BASE_GEN = [150.0, 153.8, 155.0, 152.0, 157.0]
GEN_RATIO = 176.9 / 153.8


def full_suite(run_id: str = "run1") -> list[dict[str, Any]]:
    """Sizes recorded out of order (31B, other, E4B, E2B, 26B) to prove the table orders them."""
    e2b, e4b = meta("E2B (2/35 layers)", run_id=run_id), meta("E4B (2/42 layers)", run_id=run_id)
    records: list[dict[str, Any]] = [
        {
            "kind": "skip",
            **meta("31B", run_id=run_id),
            "reason": "needs 62 GB, this machine has 16 GB",
        }
    ]
    records += rounds(
        meta("tiny", run_id=run_id),
        {"baseline": [10.0] * 5, "compiled": [10.0] * 5},
        {"baseline": [1.0] * 5, "compiled": [1.0] * 5},
    )
    e4b_base = [6900.0, 6950.0, 6980.0, 7000.0, 7050.0]
    records += rounds(
        e4b,
        {"baseline": e4b_base, "compiled": [p * 8086 / 6980 for p in e4b_base]},
        {"baseline": [p / 70 for p in e4b_base], "compiled": [p / 70 * 1.116 for p in e4b_base]},
    )
    records += [
        {
            "kind": "correctness",
            **e4b,
            "variant": "compiled",
            "reference": "baseline",
            "max_abs_err": 0.31,
            "max_rel_err": 0.01,
            "tokens_checked": 8,
            "tokens_agree": 6,
            "atol": 0.05,
            "passed": False,
        }
    ]
    records += [
        {
            "kind": "correctness",
            **e2b,
            "variant": v,
            "reference": "baseline",
            "max_abs_err": 0.001,
            "max_rel_err": 1e-5,
            "tokens_checked": 8,
            "tokens_agree": 8,
            "atol": 0.05,
            "passed": True,
        }
        for v in ("baseline", "compiled")
    ]
    records += rounds(
        e2b,
        {"baseline": E2B_BASE_PREFILL, "compiled": [p * E2B_RATIO for p in E2B_BASE_PREFILL]},
        {"baseline": E2B_BASE_GEN, "compiled": [g * GEN_RATIO for g in E2B_BASE_GEN]},
    )
    records.append(
        {"kind": "error", **meta("26B", run_id=run_id), "reason": "worker ran out of memory"}
    )
    return records


def run_report(
    tmp_path: Path, *files: Path, extra: list[str] | None = None
) -> tuple[int, Path, str]:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "report"
    args = parser.parse_args([*map(str, files), "--out", str(out), *(extra or [])])
    buffer = io.StringIO()
    code = command(args, Console(file=buffer, width=200))
    return code, out, buffer.getvalue()


def read_md(path: Path) -> str:
    """report.md with the padding of its table cells collapsed, so rows can be matched as plain
    text."""
    return (
        "\n".join(
            re.sub(r" {2,}", " ", line) if line.startswith("|") else line
            for line in path.read_text().splitlines()
        )
        + "\n"
    )


def md_table_rows(markdown: str, heading_fragment: str) -> list[list[str]]:
    """The body rows of the first table after the heading that contains the fragment (the bottom
    line's headings, which name machines and workloads too but hold sentences, not tables, are
    passed over)."""
    lines = markdown.splitlines()
    start = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("#") and heading_fragment in line and "Bottom line" not in line
    )
    table = next(i for i in range(start, len(lines)) if lines[i].startswith("| Size |"))
    rows = []
    for line in lines[table + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    return write(tmp_path / "results.jsonl", full_suite())


# --- the delta table ------------------------------------------------------------------------------


def test_delta_table_medians_delta_and_order(tmp_path: Path, suite: Path):
    code, out, _ = run_report(tmp_path, suite)
    assert code == 0
    markdown = read_md(out / "report.md")
    assert (
        "| Size | Metric | Baseline | New | Δ | 95% CI (Holm) | ± | Rounds | Verdict |" in markdown
    )
    rows = md_table_rows(markdown, "baseline → compiled")
    assert [(r[0], r[1]) for r in rows] == [
        ("E2B (2/35 layers)", "prefill"),
        ("E2B (2/35 layers)", "gen"),
        ("E4B (2/42 layers)", "prefill"),
        ("E4B (2/42 layers)", "gen"),
        ("26B", "—"),
        ("31B", "—"),
        ("tiny", "prefill"),
        ("tiny", "gen"),
    ]
    e2b_prefill, e2b_gen = rows[0], rows[1]
    # Geometric means over the paired rounds; every round's ratio is exactly the PR's, so the
    # interval is the point.
    base = float(np.exp(np.mean(np.log(E2B_BASE_PREFILL))))
    assert e2b_prefill[2:9] == [
        f"{base:,.0f}",
        f"{base * E2B_RATIO:,.0f}",
        "+16.6%",
        "[+16.6%, +16.6%]",
        "±0.0%",
        "5",
        "faster",
    ]
    assert e2b_gen[4] == "+15.0%"
    # tiny: identical numbers: Δ 0, and an interval of zero width inside the ±2% margin
    assert rows[6][4:9] == ["+0.0%", "[+0.0%, +0.0%]", "±0.0%", "5", "no change"]


def test_every_row_reads_new_over_baseline_as_its_delta(tmp_path: Path, suite: Path):
    _, out, _ = run_report(tmp_path, suite)
    for row in md_table_rows(read_md(out / "report.md"), "baseline → compiled"):
        if row[4] in ("—",):
            continue
        baseline, new = (float(cell.replace(",", "")) for cell in row[2:4])
        assert (new / baseline - 1) * 100 == pytest.approx(float(row[4].rstrip("%")), abs=0.1), row


def test_delta_numbers_match_the_stats_module(tmp_path: Path, suite: Path):
    study = report.build_study(read_results([suite]))
    pair = ("baseline", "compiled")
    table = report.compare_scope(study, study.machines[0], "pp128 tg32 b1", pair, family=[pair])
    e2b = {row.metric: row for row in table if row.size == "E2B (2/35 layers)"}
    expected = paired_estimate(E2B_BASE_PREFILL, [p * E2B_RATIO for p in E2B_BASE_PREFILL])
    assert e2b["prefill"].baseline_gmean == pytest.approx(expected.baseline_gmean)
    assert e2b["prefill"].new_gmean == pytest.approx(expected.new_gmean)
    assert e2b["prefill"].delta_pct == pytest.approx((E2B_RATIO - 1) * 100)
    assert e2b["gen"].n_pairs == 5


def test_skipped_and_errored_rows_show_the_reason(tmp_path: Path, suite: Path):
    _, out, terminal = run_report(tmp_path, suite)
    rows = {r[0]: r for r in md_table_rows(read_md(out / "report.md"), "baseline → compiled")}
    assert rows["31B"][-1] == "skipped: needs 62 GB, this machine has 16 GB"
    assert rows["26B"][-1] == "error: worker ran out of memory"
    assert "skipped: needs 62 GB" in terminal


def test_incorrect_variant_is_flagged_not_a_speedup(tmp_path: Path, suite: Path):
    _, out, _ = run_report(tmp_path, suite)
    markdown = read_md(out / "report.md")
    e4b = [r for r in md_table_rows(markdown, "baseline → compiled") if r[0].startswith("E4B")]
    for row in e4b:
        assert row[4] == "—"
        assert row[-1] == "✗ incorrect"
    assert "compiled failed correctness against baseline" in markdown
    correctness = md_table_rows(markdown, "Correctness")
    failed = [
        "E4B (2/42 layers)",
        "pp128 tg32 b1",
        "compiled",
        "baseline",
        "0.31",
        "0.01",
        "6/8",
        "0.05",
        "✗ failed",
    ]
    assert failed in correctness


def test_context_lines_above_the_table(tmp_path: Path, suite: Path):
    _, out, _ = run_report(tmp_path, suite)
    markdown = read_md(out / "report.md")
    assert "Ops that differ: geglu: unfused → compiled, softcap: unfused → compiled" in markdown
    assert "Workload: pp128 tg32 b1 (prompt 128 tokens, gen 32 tokens, batch 1)" in markdown
    environment = (
        "Environment: device Test CPU · backend cpu · BLAS openblas "
        "on ? of 4 cores · mlx 0.32.4 · commit 0123456 (dirty)"
    )
    assert environment in markdown
    models = (
        "E2B (2/35 layers): float32; E4B (2/42 layers): "
        "float32; 26B: float32; 31B: float32; tiny: float32"
    )
    assert f"Models: {models}" in markdown


def test_holm_is_applied_across_the_rows_of_a_table(suite: Path):
    study = report.build_study(read_results([suite]))
    pair = ("baseline", "compiled")
    table = report.compare_scope(study, study.machines[0], "pp128 tg32 b1", pair, family=[pair])
    tested = [row for row in table if not math.isnan(row.p_value)]
    assert len(tested) == 6  # E2B, E4B, tiny x prefill, gen
    by_size = {f"{row.size.split()[0]} {row.metric}": row for row in tested}
    # Exactly proportional rounds: zero spread, so E2B and E4B are certain (p = 0) and tiny's Δ of 0
    # has p = 1.
    assert [by_size[r].p_value for r in ("E2B prefill", "E2B gen", "E4B prefill", "E4B gen")] == [
        0.0
    ] * 4
    assert [by_size[r].p_value for r in ("tiny prefill", "tiny gen")] == [1.0, 1.0]
    estimates = [paired_estimate([1.0, 1.0], [row.ratio, row.ratio]) for row in tested]
    assert [row.p_holm for row in tested] == pytest.approx([a.p_holm for a in adjust(estimates)])
    assert [by_size[r].verdict.word for r in ("E2B prefill", "E2B gen")] == ["faster", "faster"]
    assert [by_size[r].verdict.word for r in ("tiny prefill", "tiny gen")] == [
        "no change",
        "no change",
    ]


def test_holm_takes_every_comparison_of_the_table_as_one_family(tmp_path: Path):
    # Two comparisons at one machine and workload: the run's table, as the first screen prints it.
    rng = np.random.default_rng(3)
    noisy = {
        v: list(100.0 * np.exp(0.02 * rng.standard_normal(6)))
        for v in ("baseline", "compiled", "sdpa")
    }
    experiment = EXPERIMENT.replace("comparisons:\n  - [baseline, compiled]\n", "").replace(
        "  compiled:", "  sdpa: {attention: sdpa}\n  compiled:"
    )
    path = write(tmp_path / "r.jsonl", rounds(meta("E2B"), noisy, noisy), experiment=experiment)
    study = report.build_study(read_results([path]))
    pairs = report.resolve_comparisons((), study)
    where = (study.machines[0], next(iter(study.timed["workload"])))
    table = [r for pair in pairs for r in report.compare_scope(study, *where, pair, family=pairs)]
    assert len(table) == 4
    # Holm's step-down over the four rows' own p-values
    order = sorted(range(4), key=lambda i: table[i].p_value)
    holm, running = [0.0] * 4, 0.0
    for rank, i in enumerate(order):
        running = max(running, (4 - rank) * table[i].p_value)
        holm[i] = min(1.0, running)
    assert [row.p_holm for row in table] == pytest.approx(holm)
    alone = report.compare_scope(study, *where, pairs[0], family=[pairs[0]])
    assert all(a.p_holm <= b.p_holm for a, b in zip(alone, table, strict=False))


def test_the_prs_own_method_can_say_faster(tmp_path: Path):
    # Four sizes x two metrics, 8 rounds each, every round about 20% faster with 1% noise: Holm over
    # 8 rows still leaves every row "faster". (At the PR's -epochs 5 the anytime-valid interval is
    # still unbounded at Holm's level for 8 rows: looking after every round costs the first few
    # rounds.)
    rng = np.random.default_rng(5)
    records: list[dict[str, Any]] = []
    base = [100.0 + r for r in range(8)]
    for size in ("E2B", "E4B", "26B", "31B"):
        new = [b * 1.2 * rng.lognormal(0, 0.01) for b in base]
        records += rounds(
            meta(size), {"baseline": base, "compiled": new}, {"baseline": base, "compiled": new}
        )
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", records))
    rows = md_table_rows(read_md(out / "report.md"), "baseline → compiled")
    assert {r[-1] for r in rows} == {"faster"}


def test_too_few_rounds_ask_for_more(tmp_path: Path):
    records = [
        *rounds(
            meta("E2B"),
            {"baseline": [100.0, 101.0], "compiled": [120.0, 121.0]},
            {"baseline": [10.0, 10.1], "compiled": [12.0, 12.2]},
        )
    ]
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", records))
    markdown = read_md(out / "report.md")
    assert {r[-1] for r in md_table_rows(markdown, "baseline → compiled")} == {"needs ≥ 3 rounds"}
    assert (
        "too few rounds: baseline → compiled · pp128 tg32 b1: E2B prefill has 2 paired round(s)"
        in markdown
    )


def test_more_rounds_earn_a_faster_verdict(tmp_path: Path):
    cell = meta("E2B")
    base = [100.0 + r for r in range(8)]
    records = [
        *rounds(
            cell,
            {"baseline": base, "compiled": [b * 1.2 for b in base]},
            {"baseline": base, "compiled": [b * 1.1 for b in base]},
        )
    ]
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", records))
    rows = md_table_rows(read_md(out / "report.md"), "baseline → compiled")
    assert [r[-1] for r in rows] == ["faster", "faster"]
    assert [r[4] for r in rows] == ["+20.0%", "+10.0%"]


def test_machines_are_never_pooled(tmp_path: Path):
    a = write(tmp_path / "a.jsonl", full_suite("run-a"), "run-a", "host-a")
    b_records = full_suite("run-b")
    for record in b_records:
        if record["kind"] == "trial":
            record["prefill_tps"] *= 10
    b = write(tmp_path / "b.jsonl", b_records, "run-b", "host-b")
    _, out, _ = run_report(tmp_path, a, b)
    markdown = read_md(out / "report.md")
    headings = [
        line for line in markdown.splitlines() if line.startswith("### baseline → compiled")
    ]
    assert len(headings) == 2
    assert "host-a" in headings[0] and "host-b" in headings[1]
    host_a, host_b = (
        md_table_rows(markdown, "host-a")[0][2],
        md_table_rows(markdown, "host-b")[0][2],
    )
    assert float(host_b.replace(",", "")) == pytest.approx(
        10 * float(host_a.replace(",", "")), abs=10
    )


def test_workloads_get_their_own_tables(tmp_path: Path):
    records: list[dict[str, Any]] = []
    for prompt, level in ((128, 100.0), (512, 50.0)):
        cell = meta("E2B", prompt=prompt)
        records += rounds(
            cell,
            {"baseline": [level] * 4, "compiled": [level * 1.5] * 4},
            {"baseline": [10.0] * 4, "compiled": [10.0] * 4},
        )
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", records))
    markdown = read_md(out / "report.md")
    assert md_table_rows(markdown, "pp128 tg32 b1")[0][2] == "100.0"
    assert md_table_rows(markdown, "pp512 tg32 b1")[0][2] == "50.0"
    assert (out / "prompt-sweep-tg32-b1.png").is_file()


# --- files and plots ------------------------------------------------------------------------------


def test_every_file_is_written_and_pngs_are_valid(tmp_path: Path, suite: Path):
    _, out, terminal = run_report(tmp_path, suite)
    for name in ("report.md", "report.html", "summary.csv"):
        assert (out / name).stat().st_size > 0
    pngs = sorted(out.glob("*.png"))
    assert {p.name.split("-")[0] for p in pngs} >= {"delta", "throughput", "rounds"}
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_SIGNATURE
        assert png.stat().st_size > 10_000
        assert matplotlib.image.imread(png).shape[0] > 300
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == len(pngs)
    assert "<table>" in html and "18,777" in html
    assert "+16.6%" in terminal  # the main table is printed too


def test_summary_csv_rows(tmp_path: Path, suite: Path):
    _, out, _ = run_report(tmp_path, suite)
    csv = pd.read_csv(out / "summary.csv")
    e2b = csv[
        (csv["size"] == "E2B (2/35 layers)")
        & (csv["metric"] == "prefill")
        & (csv["variant"] == "baseline")
    ]
    assert e2b[["n", "median", "iqr"]].iloc[0].tolist() == [5, 18777.0, 300.0]
    assert {
        "machine",
        "workload",
        "cv",
        "q1",
        "q3",
        "prompt_tokens",
        "peak_memory_bytes_median",
    } <= set(csv.columns)
    assert len(csv) == 3 * 2 * 2  # sizes with trials x metrics x variants
    assert list(dict.fromkeys(csv["size"])) == ["E2B (2/35 layers)", "E4B (2/42 layers)", "tiny"]


def depth_records(
    cell: dict[str, Any], steps: int, depths: tuple[int, ...], level: float
) -> list[dict]:
    """Depth records as the runner writes them: the cell's fields, then gen_tokens = the decode
    steps timed per depth (the workload's gen_tokens - 1); compiled decodes 1 tok/s faster at every
    depth, round r r tok/s faster."""
    records = []
    for r in range(3):
        for variant in ("baseline", "compiled"):
            for depth in depths:
                tps = level - depth / 1000 + (variant == "compiled") + r
                records.append(
                    {
                        "kind": "depth",
                        **cell,
                        "variant": variant,
                        "round": r,
                        "depth": depth,
                        "gen_tokens": steps,
                        "gen_s": steps / tps,
                        "gen_tps": tps,
                    }
                )
    return records


def test_depth_section_one_curve_per_model_with_its_decode_steps(tmp_path: Path):
    # Two models, two workloads each; each model's depth curve rides on the cell of its first
    # workload.
    records: list[dict[str, Any]] = []
    for size in ("E2B (2/35 layers)", "26B (2/30 layers)"):
        for prompt in (128, 512):
            records += rounds(
                meta(size, prompt=prompt),
                {"baseline": [100.0] * 3, "compiled": [110.0] * 3},
                {"baseline": [10.0] * 3, "compiled": [11.0] * 3},
            )
        records += depth_records(
            meta(size, prompt=128), 31, (512, 2048, 8192), 30.0 if "E2B" in size else 20.0
        )
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", records))
    markdown = read_md(out / "report.md")
    assert "## Decode speed vs KV depth" in markdown
    assert "Timed at each depth: 31 decode steps (batch 1), in 3 round(s)" in markdown
    rows = md_table_rows(
        markdown.replace("| Size | KV depth |", "| Size |"), "31 decode steps per depth"
    )
    # Medians over rounds 0, 1, 2 (+0, +1, +2): the middle round's value, for each model, depth and
    # variant.
    assert rows[:3] == [
        ["E2B (2/35 layers)", "512", "30.5", "31.5"],
        ["E2B (2/35 layers)", "2,048", "29.0", "30.0"],
        ["E2B (2/35 layers)", "8,192", "22.8", "23.8"],
    ]
    assert [r[0] for r in rows[3:]] == ["26B (2/30 layers)"] * 3
    png = out / "depth-31steps-b1.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert matplotlib.image.imread(png).shape[1] > 900  # a panel per model
    assert "Decode throughput vs KV depth · 31 steps per depth, b1" in markdown


# --- reference numbers ----------------------------------------------------------------------------


def test_reference_column_and_backend_note(tmp_path: Path, suite: Path):
    _, out, _ = run_report(tmp_path, suite, extra=["--reference", "pr15587"])
    markdown = read_md(out / "report.md")
    assert (
        "| Size | Metric | Baseline | New | Δ | Ref Δ | 95% CI (Holm) | ± | Rounds | Verdict |"
        in markdown
    )
    rows = {(r[0], r[1]): r for r in md_table_rows(markdown, "baseline → compiled")}
    assert rows[("E2B (2/35 layers)", "prefill")][5] == "+16.6%"
    assert rows[("E4B (2/42 layers)", "gen")][5] == "+11.6%"
    assert rows[("tiny", "prefill")][5] == "—"
    assert "Reference: Metal (Apple Silicon (chip not stated)), nvfp4, pp2048 tg128" in markdown
    assert "measured: cpu (Test CPU), float32, pp128 tg32 b1" in markdown


def test_reference_is_left_blank_beside_a_comparison_of_other_ops(tmp_path: Path):
    cell = meta("E2B")
    variants = {"baseline": [100.0] * 3, "sdpa": [120.0] * 3}
    records = rounds(cell, variants, variants)
    extra = ["--reference", "pr15587", "--compare", "baseline:sdpa"]
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", records), extra=extra)
    markdown = read_md(out / "report.md")
    assert [r[5] for r in md_table_rows(markdown, "baseline → sdpa")] == ["—", "—"]
    assert "Ref Δ is left blank here: the reference changed geglu: unfused → compiled" in markdown


def test_shipped_reference_holds_the_pr_table():
    ref = load_reference("pr15587")
    assert ref.source == "https://github.com/ollama/ollama/pull/15587"
    assert len(ref.rows) == 8
    assert ref.row("31B", "gen").baseline == 21.4
    assert ref.row("E2B (2/35 layers)", "prefill").delta_pct == 16.6
    assert ref.method.prompt_tokens == 2048 and ref.method.quantize == "nvfp4"


def test_bad_reference(tmp_path: Path):
    with pytest.raises(ReferenceFileError, match="pr15587"):
        load_reference("nope")
    bad = tmp_path / "ref.yaml"
    bad.write_text(
        "name: x\nsource: y\nmethod: {}\nhardware: {}\n"
        "rows: [{size: E2B, metric: tg, baseline: 1, new: 2}]"
    )
    with pytest.raises(ReferenceFileError, match=r"rows\[0\]\.metric"):
        load_reference(str(bad))


# --- bad input ------------------------------------------------------------------------------------


def test_empty_file(tmp_path: Path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ResultsError, match=r"empty\.jsonl"):
        run_report(tmp_path, empty)


def test_missing_file(tmp_path: Path):
    with pytest.raises(ResultsError, match=r"missing\.jsonl"):
        run_report(tmp_path, tmp_path / "missing.jsonl")


def test_corrupt_line_is_skipped_warned_and_counted(tmp_path: Path):
    path = write(tmp_path / "r.jsonl", full_suite())
    lines = path.read_text().splitlines()
    lines.insert(3, '{"kind": "trial", "run_id": tru')
    path.write_text("\n".join(lines) + "\n")
    code, out, terminal = run_report(tmp_path, path)
    assert code == 0
    assert f"{path}: 1 corrupt JSON line skipped (line 4)" in terminal
    markdown = read_md(out / "report.md")
    assert "1 corrupt line(s) skipped" in markdown
    assert f"{path}:4" in markdown


def test_file_with_neither_trials_nor_ops(tmp_path: Path):
    path = write(tmp_path / "skips.jsonl", [{"kind": "skip", **meta("31B"), "reason": "too big"}])
    with pytest.raises(ResultsError, match=r"skips\.jsonl: no timed trial or op records .*1 skip"):
        run_report(tmp_path, path)


def test_op_record_missing_fields(tmp_path: Path):
    record = op_records("geglu", "E2B mlp [1,128,6144]", "unfused", "compiled", [1e-3] * 3, 1.25)[0]
    del record["seconds"]
    with pytest.raises(
        ResultsError,
        match=r"ops\.jsonl: op record \(op geglu, variant unfused, round 0\) lacks "
        r"field\(s\) seconds",
    ):
        run_report(tmp_path, write_records(tmp_path / "ops.jsonl", [ops_header(), record]))


def test_trial_missing_fields(tmp_path: Path):
    record = rounds(meta("E2B"), {"baseline": [1.0]}, {"baseline": [1.0]})[-1]
    del record["prefill_tps"]
    with pytest.raises(ResultsError, match=r"bad\.jsonl: .*lacks field\(s\) prefill_tps"):
        run_report(tmp_path, write(tmp_path / "bad.jsonl", [record]))


def test_unknown_compare_variant_lists_the_real_ones(tmp_path: Path, suite: Path):
    with pytest.raises(ComparisonError, match=r"no variant 'fused'.*variants: baseline, compiled"):
        run_report(tmp_path, suite, extra=["--compare", "baseline:fused"])


@pytest.mark.parametrize("text", ["baseline", "a:b:c", ":compiled", "baseline compiled"])
def test_malformed_compare(tmp_path: Path, suite: Path, text: str, capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(suite), "--out", str(tmp_path / "r"), "--compare", text])
    assert exit_info.value.code == 2 and "BASELINE:NEW" in capsys.readouterr().err


def test_compare_flag_overrides_and_defaults(tmp_path: Path):
    cell = meta("E2B")
    three = {"baseline": [100.0] * 3, "compiled": [110.0] * 3, "sdpa": [120.0] * 3}
    experiment = EXPERIMENT.replace("comparisons:\n  - [baseline, compiled]\n", "").replace(
        "  compiled:", "  sdpa: {attention: sdpa}\n  compiled:"
    )
    path = write(
        tmp_path / "r.jsonl",
        rounds(cell, three, {v: [10.0] * 3 for v in three}),
        experiment=experiment,
    )
    study = report.build_study(read_results([path]))
    assert report.resolve_comparisons((), study) == [("baseline", "sdpa"), ("baseline", "compiled")]
    assert report.resolve_comparisons([("compiled", "sdpa")], study) == [("compiled", "sdpa")]
    _, out, _ = run_report(tmp_path, path, extra=["--compare", "sdpa:compiled"])
    markdown = read_md(out / "report.md")
    assert "### sdpa → compiled" in markdown
    assert (
        "Ops that differ: geglu: unfused → compiled, softcap: "
        "unfused → compiled, attention: sdpa → manual" in (markdown)
    )


def test_warnings_noisy_few_rounds_cold_start(tmp_path: Path):
    cell = meta("E2B")
    records = rounds(
        cell,
        {"baseline": [100.0, 130.0], "compiled": [110.0, 111.0]},
        {"baseline": [10.0, 10.0], "compiled": [11.0, 11.0]},
    )
    # No warmup; compiled's cold first call is a timed round and took 10x a steady trial.
    records = [r for r in records if not r["warmup"]]
    for record in records:
        if record["variant"] == "compiled" and record["round"] == 0:
            record["compile_s"] = 10 * (record["prefill_s"] + record["gen_s"])
    _, out, terminal = run_report(tmp_path, write(tmp_path / "r.jsonl", records))
    markdown = read_md(out / "report.md")
    assert "noisy: E2B pp128 tg32 b1: CV above 5% (baseline prefill 18.4%; 2 rounds)" in markdown
    assert "needs ≥ 3 rounds" in markdown
    assert "slow cold start: E2B pp128 tg32 b1: first call vs steady trial: compiled" in markdown
    assert "it ran as a timed round" in markdown
    assert "noisy" in terminal


def test_a_compiled_variant_on_a_machine_where_mx_compile_fuses_nothing_is_warned(tmp_path: Path):
    records = rounds(
        meta("E2B"),
        {"baseline": [100.0, 101.0, 99.0], "compiled": [100.5, 100.0, 99.5]},
        {"baseline": [10.0, 10.1, 9.9], "compiled": [10.0, 10.0, 10.1]},
    )
    path = results_file(
        tmp_path / "r.jsonl",
        records,
        experiment=EXPERIMENT,
        env={**TEST_ENV, "compiles": False},
        file="x.yaml",
    )
    _, out, terminal = run_report(tmp_path, path)
    said = "mx.compile fused nothing on this machine (no C++ compiler found): geglu, softcap ran"
    assert said in read_md(out / "report.md")
    assert "mx.compile fused nothing" in terminal
    fused = results_file(tmp_path / "f.jsonl", records, experiment=EXPERIMENT, file="x.yaml")
    _, out, _ = run_report(tmp_path, fused)
    assert "mx.compile fused nothing" not in read_md(out / "report.md")


# --- print_summary (the end of `fusebench run`) ---------------------------------------------------


def test_print_summary(suite: Path):
    buffer = io.StringIO()
    print_summary(
        Console(file=buffer, width=220), read_results([suite]), [("baseline", "compiled")]
    )
    text = buffer.getvalue()
    assert "Δ compiled vs baseline" in text
    base = float(np.exp(np.mean(np.log(E2B_BASE_PREFILL))))
    assert f"{base:,.0f}" in text and f"{base * E2B_RATIO:,.0f}" in text
    assert "+16.6% [+16.6%, +16.6%] faster" in text
    assert "✗ incorrect" in text
    assert "skipped: needs 62 GB" in text


def test_print_summary_when_every_cell_was_skipped(tmp_path: Path):
    path = write(tmp_path / "r.jsonl", [{"kind": "skip", **meta("31B"), "reason": "too big"}])
    buffer = io.StringIO()
    print_summary(Console(file=buffer, width=200), read_results([path]))
    assert "skipped: too big" in buffer.getvalue()


def test_a_machine_with_only_skips_beside_one_with_trials(tmp_path: Path):
    skipped = write(
        tmp_path / "a.jsonl",
        [{"kind": "skip", **meta("31B", run_id="run-a"), "reason": "too big"}],
        "run-a",
        "small",
    )
    measured = write(tmp_path / "b.jsonl", full_suite("run-b"), "run-b", "big")
    # The skip-only file alone is refused, but merged with a measured one it shows as its own
    # machine.
    results = load_results([measured])
    results.records += read_results([skipped]).records
    study = report.build_study(results)
    written = write_report(study, [("baseline", "compiled")], tmp_path / "out")
    markdown = read_md(written.files[0])
    assert "skipped: too big" in markdown
    assert len(study.machines) == 2


PEAK = {
    "name": "measured on this machine",
    "fp32_tflops": 0.1172,
    "bf16_tflops": None,
    "memory_gbps": 3.93,
    "source": "fusebench env --probe: 2048x2048 matmul",
    "confidence": "measured",
}


def roofline_suite(peak: dict[str, Any] | None) -> list[dict[str, Any]]:
    """E2B with roofline fields against `peak` (the header's): baseline prefill 0.0177 TFLOP/s
    (15.1%), gen 2.37 GB/s (60.3%); compiled's gen 3.00 GB/s, closer to the roof. With no peak the
    percentages are null, as the runner writes them."""
    records = rounds(
        meta("E2B"),
        {"baseline": [100.0] * 3, "compiled": [100.0] * 3},
        {"baseline": [10.0] * 3, "compiled": [12.0] * 3},
    )
    for record in records:
        gen = 2.37 if record["variant"] == "baseline" else 3.0
        record.update(
            prefill_tflops=0.0177,
            gen_gbps=gen,
            prefill_pct_of_peak=None if peak is None else 100 * 0.0177 / peak["fp32_tflops"],
            gen_pct_of_peak=None if peak is None else 100 * gen / peak["memory_gbps"],
        )
    return records


def test_roofline_section_with_the_peak(tmp_path: Path):
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", roofline_suite(PEAK), peak=PEAK))
    markdown = read_md(out / "report.md")
    assert "## Roofline" in markdown
    assert (
        "Peak: measured on this machine: 0.117 TFLOP/s fp32, 3.93 GB/s memory "
        "(source: fusebench env --probe: 2048x2048 matmul; confidence: measured)"
    ) in markdown
    assert "against the memory-read peak" in markdown and "moves gen toward its roof" in markdown
    lines = markdown.splitlines()
    start = lines.index("| Size | Variant | Prefill TFLOP/s (% of peak) | Gen GB/s (% of peak) |")
    assert lines[start + 2 : start + 4] == [
        "| E2B | baseline | 0.0177 (15.1%) | 2.37 (60.3%) |",
        "| E2B | compiled | 0.0177 (15.1%) | 3.00 (76.3%) |",
    ]
    csv = pd.read_csv(out / "summary.csv")
    assert set(csv["gen_pct_of_peak_median"].round(1)) == {60.3, 76.3}
    assert set(csv["prefill_tflops_median"]) == {0.0177}


def test_roofline_without_a_peak_shows_the_rates_alone(tmp_path: Path):
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", roofline_suite(None), peak=None))
    markdown = read_md(out / "report.md")
    assert "Peak: none known" in markdown
    assert "| E2B | baseline | 0.0177 | 2.37 |" in markdown
    assert pd.read_csv(out / "summary.csv")["gen_pct_of_peak_median"].isna().all()


def test_no_roofline_section_without_roofline_fields(tmp_path: Path, suite: Path):
    _, out, _ = run_report(tmp_path, suite)
    assert "## Roofline" not in read_md(out / "report.md")


# --- op microbenchmarks (`fusebench ops`) ---------------------------------------------------------


def ops_header(run_id: str = "ops1") -> dict[str, Any]:
    # As `fusebench ops` writes it: the experiment is named "ops", its content the experiment the
    # shapes came from, whose variants and comparisons were not run.
    return header(run_id, EXPERIMENT, file="x.yaml", name="ops", rounds=5)


def op_records(
    op: str,
    label: str,
    reference: str,
    variant: str,
    seconds: list[float],
    speedup: float | list[float],
    *,
    run_id: str = "ops1",
    nbytes: int = 8_000_000,
    flops: int | None = 4_000_000,
    note: str | None = None,
) -> list[dict[str, Any]]:
    """Both variants of one op x shape over len(seconds) rounds; the variant takes the reference's
    time / speedup."""
    speedups = speedup if isinstance(speedup, list) else [speedup] * len(seconds)
    records = []
    for round_, (ref_s, up) in enumerate(zip(seconds, speedups, strict=True)):
        for name, s in ((reference, ref_s), (variant, ref_s / up)):
            records.append(
                {
                    "kind": "op",
                    "run_id": run_id,
                    "op": op,
                    "variant": name,
                    "reference": reference,
                    "shape_label": label,
                    "size": label.split()[0],
                    "round": round_,
                    "iterations": 1,
                    "seconds": s,
                    "bytes": nbytes,
                    "flops": flops,
                    "gbps": nbytes / s / 1e9,
                    "gflops": None if flops is None else flops / s / 1e9,
                    "max_abs_err": 0.0 if name == reference else 2.5e-5,
                    "note": note,
                }
            )
    return records


REF_SECONDS = [1.0e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3]  # median 1 ms


def ops_suite() -> list[dict[str, Any]]:
    """geglu 25% faster in every round at both shapes; rope 10% faster or slower by turns (≈), no
    FLOPs."""
    return [
        ops_header(),
        *op_records("geglu", "E2B mlp [1,128,6144]", "unfused", "compiled", REF_SECONDS, 1.25),
        *op_records(
            "geglu",
            "E4B mlp [1,128,10240]",
            "unfused",
            "compiled",
            REF_SECONDS,
            1.25,
            note="the wider MLP",
        ),
        *op_records(
            "rope",
            "E2B sliding [1,8,128,256]",
            "composed",
            "fast",
            REF_SECONDS,
            [1.1, 1 / 1.1] * 2 + [1.0],
            flops=None,
        ),
    ]


def op_rows(markdown: str, op: str) -> list[list[str]]:
    return md_table_rows(markdown.replace("| Shape |", "| Size |"), f"### {op}:")


def test_ops_only_file_renders_the_op_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = write_records(tmp_path / "ops.jsonl", ops_suite())
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    buffer = io.StringIO()
    assert command(parser.parse_args([str(path)]), Console(file=buffer, width=200)) == 0
    out = tmp_path / "reports" / "ops"  # the ops run's experiment name
    markdown = read_md(out / "report.md")
    assert "## Op microbenchmarks" in markdown
    assert "30 op samples (3 shapes of geglu, rope)" in markdown
    geglu = op_rows(markdown, "geglu")
    assert geglu[0] == [
        "E2B mlp [1,128,6144]",
        "unfused",
        "1.00 ms",
        "8.00",
        "4.00",
        "0",
        "—",
        "—",
        "reference",
    ]
    assert geglu[1] == [
        "",
        "compiled",
        "800.0 µs",
        "10.0",
        "5.00",
        "2.5e-05",
        "+25.0%",
        "[+25.0%, +25.0%]",
        "faster",
    ]
    assert [r[0] for r in geglu] == ["E2B mlp [1,128,6144]", "", "E4B mlp [1,128,10240]", ""]
    assert "- E4B mlp [1,128,10240]: the wider MLP" in markdown
    rope = op_rows(markdown, "rope")
    # pure data movement; a CI straddling 0
    assert rope[1][4] == "—" and rope[1][-1].startswith("inconclusive (±")
    # Nothing of the trial report: the header's experiment declares variants, but an ops run never
    # ran them.
    for absent in ("## Δ", "## Throughput", "## Correctness", "## Warnings", "## Method"):
        assert absent not in markdown
    png = out / "op-deltas.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert matplotlib.image.imread(png).shape[0] > 300
    assert (out / "report.html").read_text().count('src="data:image/png;base64,') == 1
    assert "+25.0%" in buffer.getvalue()  # the op tables are printed too


def test_trials_and_ops_in_one_file(tmp_path: Path):
    path = write(tmp_path / "r.jsonl", [*full_suite(), *ops_suite()])
    _, out, _ = run_report(tmp_path, path)
    markdown = read_md(out / "report.md")
    assert md_table_rows(markdown, "baseline → compiled")[0][4] == "+16.6%"
    assert op_rows(markdown, "geglu")[1][6] == "+25.0%"
    study = report.build_study(read_results([path]))
    # same host: one machine, not pooled apart
    assert study.machines == ["vm · Test CPU · cpu · openblas"]
    assert study.variants == ["baseline", "compiled"] and study.name == "fusion+ops"
    assert {"delta", "throughput", "rounds", "op"} <= {
        p.name.split("-")[0] for p in out.glob("*.png")
    }


def test_two_ops_runs_are_kept_apart(tmp_path: Path):
    other = [
        ops_header("ops2"),
        *op_records(
            "geglu", "E2B mlp [1,128,6144]", "unfused", "compiled", REF_SECONDS, 0.5, run_id="ops2"
        ),
    ]
    _, out, _ = run_report(
        tmp_path,
        write_records(tmp_path / "a.jsonl", ops_suite()),
        write_records(tmp_path / "b.jsonl", other),
    )
    markdown = read_md(out / "report.md")
    assert (
        "### geglu: gelu_approx(gate) * up in the MLP, MoE experts and PLE gate · run ops2"
        in markdown
    )
    assert (out / "op-deltas-r1.png").is_file() and (out / "op-deltas-r2.png").is_file()
    assert "-50.0%" in markdown and "+25.0%" in markdown


def test_real_ops_results_file(tmp_path: Path):
    # the committed run
    real = sorted((Path(__file__).parents[1] / "results").glob("ops-*.jsonl.gz"))[-1]
    _, out, _ = run_report(tmp_path, real)
    markdown = read_md(out / "report.md")
    assert "## Op microbenchmarks" in markdown
    for op in ("geglu", "softcap", "attention", "rms_norm", "rope"):
        assert len(op_rows(markdown, op)) >= 2
    assert "· backend cpu · BLAS openblas on " in markdown
    png = out / "op-deltas.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert matplotlib.image.imread(png).shape[0] > 1000  # one bar per op x shape: 35 of them


# --- headless browser -----------------------------------------------------------------------------


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="no chromium or chromium-browser binary")
def test_report_html_renders_in_headless_chromium(tmp_path: Path, suite: Path):
    _, out, _ = run_report(tmp_path, suite, extra=["--reference", "pr15587"])
    shot = tmp_path / "screenshot.png"
    subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            (out / "report.html").as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert shot.read_bytes()[:8] == PNG_SIGNATURE
    assert shot.stat().st_size > 50_000
    assert matplotlib.image.imread(shot).shape[:2] == (2000, 1200)


# --- the defects a new user met -------------------------------------------------------------------


def test_an_ops_files_summary_csv_holds_the_op_rows(tmp_path: Path):
    _, out, _ = run_report(tmp_path, write_records(tmp_path / "ops.jsonl", ops_suite()))
    csv = pd.read_csv(out / "summary.csv")
    assert len(csv) == 6  # 3 shapes x (reference + variant)
    compiled = csv[(csv["shape"] == "E2B mlp [1,128,6144]") & (csv["variant"] == "compiled")].iloc[
        0
    ]
    assert compiled["op"] == "geglu" and compiled["verdict"] == "faster"
    assert compiled["delta_pct"] == pytest.approx(25.0) and compiled["median_s"] == pytest.approx(
        0.8e-3
    )


@pytest.mark.parametrize("again", ["same path", "other spelling", "copy"])
def test_a_file_given_twice_counts_once(tmp_path: Path, suite: Path, again: str):
    second = {
        "same path": suite,
        "other spelling": tmp_path / "." / suite.name,
        "copy": Path(shutil.copy(suite, tmp_path / "copy.jsonl")),
    }[again]
    assert len(read_results([suite, second]).records) == len(read_results([suite]).records)
    _, out, _ = run_report(tmp_path, suite, second)
    csv = pd.read_csv(out / "summary.csv")
    assert set(csv["n"]) == {5}  # every cell's rounds once, not 10


def test_tok_s_axes_start_at_zero_unless_they_span_decades():
    close = Figure().add_subplot()
    close.plot([1, 2], [2.9, 3.02])  # pr18809's decode: a 4% gap that autoscaling drew as a cliff
    plots._tps_axis(close, pd.Series([2.9, 3.02]))
    assert close.get_ylim()[0] == 0 and close.get_ylim()[1] >= 3.02
    wide = Figure().add_subplot()
    wide.bar([0, 1], [500.0, 20000.0])
    plots._tps_axis(wide, pd.Series([500.0, 20000.0]))
    assert wide.get_yscale() == "log"


# --- stalls ---------------------------------------------------------------------------------------


def test_a_variant_that_stalls_is_named_and_its_delta_uses_every_round(tmp_path: Path):
    # 40 rounds, compiled 20% faster with 1% noise, except 6 rounds where it loses 40%: a re-trace,
    # say.
    rng = np.random.default_rng(16)
    base = list(100.0 * rng.lognormal(0, 0.01, 40))
    compiled = [
        b * 1.2 * rng.lognormal(0, 0.01) * (0.6 if r in (3, 9, 15, 22, 30, 37) else 1.0)
        for r, b in enumerate(base)
    ]
    records = [
        *rounds(
            meta("E2B"),
            {"baseline": base, "compiled": compiled},
            {"baseline": base, "compiled": [b * 1.1 for b in base]},
        )
    ]
    _, out, _ = run_report(tmp_path, write(tmp_path / "r.jsonl", records))
    markdown = read_md(out / "report.md")
    prefill = md_table_rows(markdown, "baseline → compiled")[0]
    # the same inference, for the figures the table must show
    every = paired_estimate(base, compiled)
    assert every.stalls == "new" and every.trimmed is not None
    assert prefill[4] == f"{every.delta_pct:+.1f}% (trimmed {every.trimmed.delta_pct:+.1f}%)"
    assert every.delta_pct < every.trimmed.low_pct
    assert prefill[7] == "40 (compiled stalls in 6)"
    warning = next(line for line in markdown.splitlines() if "compiled stalls:" in line)
    assert "E2B prefill: 6 of 40 rounds excluded against it" in warning
    assert f"Δ over all rounds {every.delta_pct:+.1f}% [" in warning
    assert f"without them {every.trimmed.delta_pct:+.1f}% [" in warning


def test_the_report_opens_with_a_bottom_line_per_comparison(suite: Path, tmp_path: Path):
    _, out, _ = run_report(tmp_path, suite)
    lines = [line for line in read_md(out / "report.md").splitlines() if line.strip()]
    assert lines[1].startswith("## Bottom line: ")
    assert lines[2].startswith("compiled vs baseline (geglu compiled, softcap compiled): ")


def test_a_bottom_line_names_the_rows_that_differ_and_what_would_settle_them():
    from fusebench.present.bottom_line import _Row, _sentence

    rows = [
        _Row(f"{size} {metric}", VerdictWord.NO_CHANGE, 0.5, 1.5, 10)
        for size in ("E2B", "E4B")
        for metric in ("a", "b")
    ]
    rows += [
        _Row("31B gen", VerdictWord.INCONCLUSIVE, -3.2, 4.8, 6, settle_rounds=24, settle_s=540.0),
        _Row("26B prefill", VerdictWord.FASTER, 6.1, 2.0, 12),
    ]
    assert _sentence(rows, 5.0) == (
        "no change within ±5% on 4 of 6 rows; 31B gen inconclusive (±4.8% after 6 rounds; "
        "about 24 rounds (9 min more) would settle it at this noise); 26B prefill faster +6.1%"
    )
    assert _sentence(rows[:4], 5.0) == "no change within ±5% on all 4 rows"


def test_a_bottom_line_names_the_depth_where_one_size_ran_at_several():
    from fusebench.present.bottom_line import _short_sizes

    assert _short_sizes(["E2B (2/35 layers)", "E2B (2/35 layers)", "E4B (2/42 layers)"]) == [
        "E2B",
        "E2B",
        "E4B",
    ]
    assert _short_sizes(["E2B (2/35 layers)", "E2B (6/35 layers)", "E4B (2/42 layers)"]) == [
        "E2B (2/35 layers)",
        "E2B (6/35 layers)",
        "E4B",
    ]
