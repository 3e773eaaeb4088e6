"""Honest warnings, as hyperfine gives them: what makes a number shaky, said next to it."""

from __future__ import annotations

from ...analysis import stats
from ...analysis.study import ColdStart, Study, cold_starts
from ..document import Block, Bullets, Heading, Paragraph
from . import ReportContext
from .context import cell_where

NOISY_CV = 0.05  # hyperfine's rule of thumb: beyond this the machine is too busy to trust small Δs

COLD_FACTOR = 2.0  # warn when the cold first call takes this many times a steady trial

# other processes' CPU, in cores, above which a timing shares its machine noticeably
BUSY_CORES = 0.25
STEAL_CORES = 0.05  # hypervisor steal, in cores, above which the VM's neighbours took real time


def warnings_section(context: ReportContext) -> list[Block]:
    """The warnings the sections above raised, then the trials' own: noise, cold starts, a busy
    machine."""
    study = context.study
    context.warnings += noisy_warnings(study) + cold_start_warnings(study) + load_warnings(study)
    if context.warnings:
        return [Heading("Warnings"), Bullets(tuple(context.warnings))]
    if not study.has_trials:
        return []  # an ops-only report has no cells to vouch for
    return [Heading("Warnings"), Paragraph("None: every cell is quiet, paired and warmed up.")]


def noisy_warnings(study: Study) -> list[str]:
    """One line per cell whose rounds scatter by more than NOISY_CV, naming each noisy variant and
    metric."""
    noisy: dict[tuple[str, str, str], list[stats.CellSummary]] = {}
    for s in stats.summaries(study.timed):
        if s.summary.cv > NOISY_CV:
            noisy.setdefault((s.machine, s.model_key, s.workload), []).append(s)
    warnings = []
    for rows in noisy.values():
        spread = ", ".join(f"{s.variant} {s.metric} {s.summary.cv:.1%}" for s in rows)
        first = rows[0]
        warnings.append(
            f"noisy: {cell_where(study, first.size, first.workload, first.machine)}: "
            f"CV above {NOISY_CV:.0%} ({spread}; {max(s.summary.n for s in rows)} rounds); "
            "close other programs, fix the clock, or add trials before trusting a small Δ"
        )
    return warnings


def cold_start_warnings(study: Study) -> list[str]:
    """A cold first call far slower than steady state: kernels compiled on first use."""
    by_cell: dict[tuple[str, str], list[ColdStart]] = {}
    for cold in cold_starts(study):
        by_cell.setdefault((cold.machine, cold.cell), []).append(cold)
    warnings = []
    for colds in by_cell.values():
        slow = [c for c in colds if c.steady_s > 0 and c.compile_s > COLD_FACTOR * c.steady_s]
        if not slow:
            continue
        consequence = (
            "it ran as a timed round, so it is in the statistics: set warmup to 1 or more"
            if any(c.timed for c in slow)
            else "a warmup round absorbed it"
        )
        facts = "; ".join(
            f"{c.variant} {c.compile_s:.2f} s vs {c.steady_s:.2f} "
            f"s ({c.compile_s / c.steady_s:.1f}×)"
            for c in slow
        )
        first = colds[0]
        warnings.append(
            f"slow cold start: {cell_where(study, first.size, first.workload, first.machine)}: "
            f"first call vs steady trial: {facts}; kernels compile on first use, and {consequence}"
        )
    return warnings


def load_warnings(study: Study) -> list[str]:
    """What else ran on the machine, before (preflight) and during (the load sampler) each run."""
    warnings = []
    for run in study.runs.values():
        if run.preflight and run.preflight.other_cores > BUSY_CORES:
            warnings.append(
                f"busy machine: run {run.run_id}: before it started, other processes used "
                f"{run.preflight.other_cores:.2f} cores (load average "
                f"{run.preflight.loadavg_1m:.2f})"
            )
    for during in study.loads:
        if during.other_cores_mean > BUSY_CORES or during.steal_cores_mean > STEAL_CORES:
            warnings.append(
                f"shared machine: run {during.run_id}: while it measured, other processes used "
                f"{during.other_cores_mean:.2f} cores on average (at most "
                f"{during.other_cores_max:.2f}) and the hypervisor stole "
                f"{during.steal_cores_mean:.2f}; its rounds scatter more than a quiet machine's"
            )
    return warnings
