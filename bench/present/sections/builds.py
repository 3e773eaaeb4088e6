"""`run --against`: the current build against the reference build, variant by variant, paired round
by round."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...analysis import stats
from ...analysis.study import Study, cell_labels, on, ordered_workloads
from ...core.header import BuildFields
from .. import plots
from ..document import Block, Bullets, Figure, Heading, Table
from ..format import format_tps
from . import ReportContext
from .context import machine_suffix, plot_caption, slug
from .delta import delta_cells, stall_warnings

BUILD_COLUMNS = (
    "Size",
    "Metric",
    "Variant",
    "Reference",
    "Current",
    "Δ",
    "95% CI (Holm)",
    "±",
    "Rounds",
    "Verdict",
)


def builds_section(context: ReportContext) -> list[Block]:
    study = context.study
    if study.build_trials.empty:
        return []
    builds = next(iter(study.runs.values())).builds
    commits = [build_line(name, build) for name, build in builds.items()]
    blocks: list[Block] = [
        Heading("Current build vs reference build"),
        Bullets(
            (
                *commits,
                "Both builds ran every round back to back on the same prompt and weights (trials "
                "interleaved, order reversed each round), so Δ is paired; Holm across all rows of "
                "a table.",
                f"{stats.ALL_VARIANTS}: per round, the geometric mean of the variants' "
                "current/reference ratios (tok/s columns: the geometric mean over variants). A "
                "change to shared code moves every variant alike, and pooling averages their "
                "independent trial noise, so it is seen with fewer rounds than any one variant's "
                "row.",
            )
        ),
    ]
    for machine in study.machines:
        trials = on(study.build_trials, machine)
        for workload in ordered_workloads([trials]):
            table = stats.compare_builds(on(trials, machine, workload), margin_pct=study.margin_pct)
            labels = cell_labels(list(dict.fromkeys((r.model_key, r.size) for r in table)))
            rows = tuple(
                (
                    labels[(r.model_key, r.size)],
                    r.metric,
                    r.variant,
                    format_tps(r.baseline_gmean),
                    format_tps(r.new_gmean),
                    *delta_cells(r, [], "current"),
                )
                for r in table
            )
            where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
            blocks += [Heading(where, 3), Table(BUILD_COLUMNS, rows, frozenset(range(3, 9)))]
            # the arm is "current" or "reference": the build that stalls
            if stalls := stall_warnings(table, where):
                blocks.append(Bullets(tuple(stalls)))
            blocks.append(_figure(study, machine, workload, table, labels, context.out_dir))
    return blocks


def build_line(name: str, build: BuildFields) -> str:
    """ "reference: mlx 0.31.2 (/path/python), commit abc": a build of another environment is named
    by it."""
    commit = f"commit {build.short_commit}" + (" (uncommitted changes)" if build.dirty else "")
    if not build.packages:
        return f"{name}: {commit}"
    versions = ", ".join(f"{package} {version}" for package, version in build.packages.items())
    return f"{name}: {build.label or versions} ({versions}; {build.python}), {commit}"


def _figure(
    study: Study,
    machine: str,
    workload: str,
    table: Sequence[stats.ComparisonRow],
    labels: dict[tuple[str, str], str],
    out_dir: Path,
) -> Figure:
    bars = [
        plots.DeltaBar(
            f"{labels[(r.model_key, r.size)]} · {r.variant}",
            r.metric,
            r.delta_pct,
            (r.adj_low - 1) * 100,
            (r.adj_high - 1) * 100,
            decided=bool(r.verdict and r.verdict.decided),
        )
        for r in table
    ]
    title = f"Δ throughput, current vs reference build · {workload}"
    name = f"builds-{slug(workload)}{machine_suffix(study, machine)}.png"
    sizes = list(dict.fromkeys(bar.size for bar in bars))
    path = plots.delta_plot(
        bars, sizes, title=title, caption=plot_caption(study, machine), path=out_dir / name
    )
    return Figure(path, f"{title}: paired per-round log ratios, with Holm-adjusted 95% CIs")
