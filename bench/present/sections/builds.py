"""`run --against`: the current build against the reference build, variant by variant, paired round
by round."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...analysis import stats
from ...analysis.placement import PlacementSummary, summarize_placement
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
                "interleaved, variants in ABBA order), so Δ is paired; Holm across all rows of a "
                "table.",
                *placement_lines(summarize_placement(study.results.worker_records())),
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
            rows = _rows(table, labels, "current")
            where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
            blocks += [Heading(where, 3), Table(BUILD_COLUMNS, rows, frozenset(range(3, 9)))]
            # the arm is "current" or "reference": the build that stalls
            if stalls := stall_warnings(table, where):
                blocks.append(Bullets(tuple(stalls)))
            blocks.append(_figure(study, machine, workload, table, labels, context.out_dir))
    return blocks + control_section(context)


def placement_lines(summary: PlacementSummary | None) -> list[str]:
    """Where the builds' workers ran: alike but for their trees' places, which rotated, or every
    field in which they differed."""
    if summary is None:
        return [
            "Placement: not recorded (a run from before 2026-12-07, whose builds kept their "
            "places and their order in a round)."
        ]
    slots = "; ".join(
        f"{build} " + ", ".join(f"{slot or '-'} ×{n}" for slot, n in taken.items())
        for build, taken in summary.slots.items()
    )
    if summary.alike:
        return [
            "Placement: every build's workers started alike (interpreter, launcher, environment, "
            "filesystem, path length, CPUs) but for their trees' places, which rotated from one "
            "worker pair to the next, as did the builds' order in a round and at the start: "
            f"{slots}."
        ]
    return [
        f"Placement differed between the builds in {len(summary.differences)} field(s), so a Δ "
        f"may be the place's, not the code's (slots: {slots}):",
        *(
            f"{d.field}: "
            + "; ".join(f"{build} {', '.join(v)[:120]}" for build, v in d.by_build.items())
            for d in summary.differences
        ),
    ]


def control_section(context: ReportContext) -> list[Block]:
    """The control arm: the reference's code in a place of its own, against the reference."""
    study = context.study
    if study.build_trials.empty:
        return []
    table = stats.compare_control(study.build_trials, margin_pct=study.margin_pct)
    if not table:
        return []
    labels = cell_labels(list(dict.fromkeys((r.model_key, r.size) for r in table)))
    rows = _rows(table, labels, "control")
    columns = (*BUILD_COLUMNS[:3], "Reference", "Control", *BUILD_COLUMNS[5:])
    return [
        Heading("Control: identical builds in two places", 3),
        Bullets(
            (
                "The reference build's code ran a third time, in a place of its own, interleaved "
                "with both builds: what this setup reads between identical builds. An interval "
                "that excludes 0 makes check say 'cannot tell' whatever the builds' rows say.",
            )
        ),
        Table(columns, rows, frozenset(range(3, 9))),
    ]


def _rows(
    table: Sequence[stats.ComparisonRow], labels: dict[tuple[str, str], str], new: str
) -> tuple[tuple[str, ...], ...]:
    """A builds table's rows: size, metric, variant, both builds' tok/s, Δ and verdict."""
    return tuple(
        (
            labels[(r.model_key, r.size)],
            r.metric,
            r.variant,
            format_tps(r.baseline_gmean),
            format_tps(r.new_gmean),
            *delta_cells(r, [], new),
        )
        for r in table
    )


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
