"""Honest warnings, as hyperfine gives them: what makes a number shaky, said next to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...analysis import stats
from ...analysis.study import Study
from ..document import Block, Bullets, Heading, Paragraph
from .context import cell_where

NOISY_CV = 0.05  # hyperfine's rule of thumb: beyond this the machine is too busy to trust small Δs

COLD_FACTOR = 2.0  # warn when the cold first call takes this many times a steady trial


def noisy_warnings(study: Study) -> list[str]:
    """One line per cell whose rounds scatter by more than NOISY_CV, naming each noisy variant and metric."""
    summary = stats.summary_table(study.timed)
    noisy = summary[summary["cv"] > NOISY_CV]
    warnings = []
    for _, rows in noisy.groupby(["machine", "model_key", "workload"], sort=False):
        spread = ", ".join(f"{r['variant']} {r['metric']} {r['cv']:.1%}" for r in rows.to_dict("records"))
        warnings.append(
            f"noisy: {cell_where(study, rows.iloc[0])}: CV above {NOISY_CV:.0%} ({spread}; {rows['n'].max()} rounds); "
            "close other programs, fix the clock, or add trials before trusting a small Δ"
        )
    return warnings


def cold_start_warnings(study: Study) -> list[str]:
    """A cold first call far slower than steady state: kernels compiled on first use."""
    trials = study.trials
    if trials.empty or not {"compile_s", "prefill_s", "gen_s"} <= set(trials.columns):
        return []
    steady = (
        study.timed.assign(total=study.timed["prefill_s"] + study.timed["gen_s"].fillna(0.0))
        .groupby(["machine", "cell", "variant"])["total"].median()
    )
    warnings = []
    cold = trials[trials["compile_s"].notna()]
    for _, rows in cold.groupby(["machine", "cell"], sort=False):
        slow, counted = [], False
        for r in rows.itertuples():
            typical = steady.get((r.machine, r.cell, r.variant), math.nan)
            if typical > 0 and r.compile_s > COLD_FACTOR * typical:
                slow.append(f"{r.variant} {r.compile_s:.2f} s vs {typical:.2f} s ({r.compile_s / typical:.1f}×)")
                counted |= not r.warmup
        if slow:
            consequence = ("it ran as a timed round, so it is in the statistics: set warmup to 1 or more" if counted
                           else "a warmup round absorbed it")
            warnings.append(f"slow cold start: {cell_where(study, rows.iloc[0])}: first call vs steady trial: "
                            f"{'; '.join(slow)}; kernels compile on first use, and {consequence}")
    return warnings


def warnings_section(study: Study, warnings: Sequence[str]) -> list[Block]:
    if warnings:
        return [Heading("Warnings"), Bullets(tuple(warnings))]
    if not study.has_trials:
        return []  # an ops-only report has no cells to vouch for
    return [Heading("Warnings"), Paragraph("None: every cell is quiet, paired and warmed up.")]


BUSY_CORES = 0.25  # other processes' CPU, in cores, above which a timing shares its machine noticeably
STEAL_CORES = 0.05  # hypervisor steal, in cores, above which the VM's neighbours took real time


def load_warnings(study: Study) -> list[str]:
    """What else ran on the machine, before (preflight) and during (the load sampler) each run."""
    warnings = []
    for run_id, header in study.results.runs.items():
        before = header.get("preflight") or {}
        if before.get("other_cores", 0.0) > BUSY_CORES:
            warnings.append(f"busy machine: run {run_id}: before it started, other processes used "
                            f"{before['other_cores']:.2f} cores (load average {before.get('loadavg_1m', 0):.2f})")
    for during in study.results.of_kind("load"):
        if not during.get("samples"):
            continue
        busy, steal = during.get("other_cores_mean", 0.0), during.get("steal_cores_mean", 0.0)
        if busy > BUSY_CORES or steal > STEAL_CORES:
            warnings.append(
                f"shared machine: run {during.get('run_id')}: while it measured, other processes used {busy:.2f} "
                f"cores on average (at most {during.get('other_cores_max', 0.0):.2f}) and the hypervisor stole "
                f"{steal:.2f}; its rounds scatter more than a quiet machine's"
            )
    return warnings
