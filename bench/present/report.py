"""`fusebench report`: the report built once as blocks, then written as report.md, report.html and summary.csv with
its plots, into `reports/<experiment>/`.

Results files merge (shards of a suite, or one suite on several machines); one table is drawn per machine x
comparison x workload, so machines and workloads are never pooled into one median. Every number comes from
bench.analysis, which `fusebench check` uses too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..analysis import stats
from ..analysis.reference import Reference
from ..analysis.study import Study, on, ordered_workloads, size_rank, trial_medians
from ..core.fingerprint import machine_label
from ..core.records import CELL_FIELDS, ROOFLINE_FIELDS, TTFT_FIELDS
from .bottom_line import bottom_lines
from .document import Block, Figure, Heading, Paragraph, to_html, to_markdown
from .sections.builds import builds_section
from .sections.correctness import correctness_section
from .sections.delta import delta_sections, method_section
from .sections.depth import depth_section
from .sections.kernels import kernel_section
from .sections.latency import latency_section
from .sections.ops import op_section
from .sections.roofline import roofline_section
from .sections.throughput import rounds_section, throughput_section
from .sections.warnings import cold_start_warnings, load_warnings, noisy_warnings, warnings_section


def summary_frame(study: Study) -> pd.DataFrame:
    """One row per machine x size x workload x metric x variant: median, quartiles, IQR, CV, n.

    Peak memory is added as its median, and so are the TTFT and roofline fields (TTFT_FIELDS, ROOFLINE_FIELDS) of
    trials that carry them.
    """
    timed = study.timed
    summary = stats.summary_table(timed)
    if summary.empty:
        return summary
    keys = ["machine", "model_key", "workload"]
    cells = timed[[*keys, *(f for f in CELL_FIELDS if f in timed and f not in keys)]].drop_duplicates(keys)
    summary = summary.merge(cells.drop(columns="size"), on=keys, how="left")
    extra = [c for c in ("peak_memory_bytes", *TTFT_FIELDS, *ROOFLINE_FIELDS) if c in timed.columns]
    if extra:
        medians = trial_medians(timed, extra).rename(columns={c: f"{c}_median" for c in extra})
        summary = summary.merge(medians, on=[*keys, "variant"], how="left")
    machine_rank = {m: i for i, m in enumerate(study.machines)}
    variant_rank = {v: i for i, v in enumerate(study.variants)}
    summary = summary.assign(
        _m=summary["machine"].map(machine_rank), _s=summary["size"].map(size_rank),
        _metric=summary["metric"].map(stats.METRICS.index), _v=summary["variant"].map(variant_rank),
    ).sort_values(["_m", "_s", "size", "prompt_tokens", "gen_tokens", "batch", "_metric", "_v"], kind="stable")
    return summary.drop(columns=["_m", "_s", "_metric", "_v"]).reset_index(drop=True)


def op_summary_frame(study: Study) -> pd.DataFrame:
    """One row per `fusebench ops` run x op x shape x variant: the op table's figures (median time, GB/s, GFLOP/s,
    max abs err, and the Holm-adjusted Δ speed against the op's reference variant), so that an ops file's
    summary.csv holds its measurements rather than a header alone."""
    machines = {run_id: machine_label(h.get("env", {})) for run_id, h in study.results.runs.items()}
    return pd.DataFrame([{
        "machine": machines.get(s.run_id, "unknown machine"), "run_id": s.run_id, "op": s.op, "shape": s.shape_label,
        "variant": s.variant, "reference": s.reference, "median_s": s.median_s, "gbps": s.gbps, "gflops": s.gflops,
        "max_abs_err": s.max_abs_err, "n": s.speed.n if s.speed else None,
        "delta_pct": s.speed.delta_pct if s.speed else None, "ci_low_pct": s.speed.low_pct if s.speed else None,
        "ci_high_pct": s.speed.high_pct if s.speed else None, "verdict": s.verdict,
    } for s in study.op_summaries])


def summary_csv(study: Study) -> pd.DataFrame:
    """summary.csv: the trial rows, then the op rows (an ops file has only those; the columns are their union)."""
    frames = [f for f in (summary_frame(study), op_summary_frame(study)) if not f.empty]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else (frames[0] if frames else summary_frame(study))


@dataclass
class Report:
    terminal_blocks: list[Block]  # what the terminal shows: the delta and op tables
    warnings: list[str]
    files: list[Path]


def write_report(
    study: Study, comparisons: Sequence[tuple[str, str]], out_dir: Path, reference: Reference | None = None,
    sources: Sequence[str | Path] = (),
) -> Report:
    """Write report.md, report.html, summary.csv and the PNGs into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    corrupt = study.results.corrupt_lines
    warnings = [f"{len(corrupt)} corrupt line(s) skipped: {', '.join(corrupt)}"] if corrupt else []
    delta_blocks, delta_warnings = delta_sections(study, comparisons, reference, out_dir)
    warnings += study.unread_experiments + delta_warnings + noisy_warnings(study) + cold_start_warnings(study)
    warnings += load_warnings(study)
    op_blocks = op_section(study, out_dir)
    answer = _bottom_line(study, comparisons)
    blocks: list[Block] = [
        Heading(f"fusebench report: {study.name}", 1),
        *answer,
        Paragraph(_overview(study, sources)),
        *delta_blocks,
        *builds_section(study, out_dir),
        *warnings_section(study, warnings),
        *(correctness_section(study) if study.has_trials else []),
        *(throughput_section(study, out_dir) if study.has_trials else []),
        *(rounds_section(study, out_dir) if study.has_trials else []),
        *latency_section(study),
        *kernel_section(study, list(comparisons)),
        *roofline_section(study),
        *depth_section(study, out_dir),
        *op_blocks,
        *(method_section(study.margin_pct) if study.has_trials else []),
    ]
    files = [out_dir / "report.md", out_dir / "report.html", out_dir / "summary.csv"]
    files[0].write_text(to_markdown(blocks, out_dir), encoding="utf-8")
    files[1].write_text(to_html(blocks, f"fusebench report: {study.name}"), encoding="utf-8")
    summary_csv(study).to_csv(files[2], index=False)
    files += [b.path for b in blocks if isinstance(b, Figure)]
    return Report([*answer, *delta_blocks, *op_blocks], warnings, files)


def _bottom_line(study: Study, comparisons: Sequence[tuple[str, str]]) -> list[Block]:
    """The answer, before anything else: a sentence per comparison, machine and workload."""
    blocks: list[Block] = []
    for machine in study.machines:
        for workload in ordered_workloads([on(study.timed, machine)]):
            lines = bottom_lines(study, machine, workload, comparisons)
            if lines:
                blocks += [Heading(f"Bottom line: {workload} on {machine}", 2), *map(Paragraph, lines)]
    return blocks


def _overview(study: Study, sources: Sequence[str | Path]) -> str:
    runs = study.results.runs
    measured = [f"{len(study.timed)} timed trials"] if study.has_trials else []
    if study.op_summaries:
        cases = {(s.run_id, s.op, s.shape_label) for s in study.op_summaries}
        ops = dict.fromkeys(s.op for s in study.op_summaries)
        measured.append(f"{len(study.results.of_kind('op'))} op samples ({len(cases)} shapes of {', '.join(ops)})")
    text = (f"From {len(sources) or '?'} results file(s) ({', '.join(str(s) for s in sources) or 'in memory'}): "
            f"{len(runs)} run(s) on {len(study.machines)} machine(s), {', '.join(measured)}")
    text += f", variants {', '.join(study.variants)}." if study.variants else "."
    if study.results.corrupt_lines:
        text += f" {len(study.results.corrupt_lines)} corrupt line(s) were skipped (see Warnings)."
    return text
