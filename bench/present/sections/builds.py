"""`run --against`: the current build against the reference build, variant by variant, paired round by round."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...analysis import stats
from ...analysis.study import Study, cell_labels, on, ordered_cells, ordered_workloads
from .. import plots
from ..document import Block, Bullets, Figure, Heading, Table
from ..format import format_tps
from .context import machine_suffix, plot_caption, slug
from .delta import delta_cells, stall_warnings

BUILD_COLUMNS = ("Size", "Metric", "Variant", "Reference", "Current", "Δ", "95% CI (Holm)", "±", "Rounds", "Verdict")


def builds_section(study: Study, out_dir: Path) -> list[Block]:
    if study.build_trials.empty:
        return []
    builds = next(iter(study.results.runs.values())).get("builds") or {}
    commits = [build_line(name, b) for name, b in builds.items()]
    blocks: list[Block] = [Heading("Current build vs reference build"), Bullets((
        *commits,
        "Both builds ran every round back to back on the same prompt and weights (trials interleaved, order "
        "reversed each round), so Δ is paired; Holm across all rows of a table.",
        f"{stats.ALL_VARIANTS}: per round, the geometric mean of the variants' current/reference ratios (tok/s "
        "columns: the geometric mean over variants). A change to shared code moves every variant alike, and pooling "
        "averages their independent trial noise, so it is seen with fewer rounds than any one variant's row.",
    ))]
    for machine in study.machines:
        trials = on(study.build_trials, machine)
        for workload in ordered_workloads([trials]):
            table = stats.compare_builds(on(trials, machine, workload), margin_pct=study.margin_pct)
            labels = cell_labels(ordered_cells([table]))
            rows = tuple(
                (labels[(r.model_key, r.size)], r.metric, r.variant, format_tps(r.baseline_gmean),
                 format_tps(r.new_gmean), *delta_cells(r, [], "current"))
                for r in table.itertuples()
            )
            where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
            blocks += [Heading(where, 3), Table(BUILD_COLUMNS, rows, frozenset(range(3, 9)))]
            if stalls := stall_warnings(table, where):  # the arm is "current" or "reference": the build that stalls
                blocks.append(Bullets(tuple(stalls)))
            blocks.append(_figure(study, machine, workload, table, labels, out_dir))
    return blocks


def build_line(name: str, build: dict) -> str:
    """"reference: mlx 0.31.2 (/path/python), commit abc": a build of another environment is named by it."""
    commit = f"commit {str(build.get('commit') or '?')[:12]}" + (" (uncommitted changes)" if build.get("dirty") else "")
    if not build.get("packages"):
        return f"{name}: {commit}"
    versions = ", ".join(f"{n} {v}" for n, v in build["packages"].items())
    return f"{name}: {build.get('label') or versions} ({versions}; {build.get('python')}), {commit}"


def _figure(study: Study, machine: str, workload: str, table: pd.DataFrame, labels: dict, out_dir: Path) -> Figure:
    points = pd.DataFrame({
        "size": [f"{labels[(k, s)]} · {v}" for k, s, v in zip(table["model_key"], table["size"], table["variant"],
                                                            strict=True)],
        "metric": table["metric"], "delta_pct": table["delta_pct"], "verdict": table["verdict"],
        "low_pct": (table["adj_low"] - 1) * 100, "high_pct": (table["adj_high"] - 1) * 100,
        "incorrect": False, "ref_delta_pct": float("nan"),
    })
    title = f"Δ throughput, current vs reference build · {workload}"
    name = f"builds-{slug(workload)}{machine_suffix(study, machine)}.png"
    sizes = list(dict.fromkeys(points["size"]))
    path = plots.delta_plot(points, sizes, title=title, caption=plot_caption(study, machine), path=out_dir / name)
    return Figure(path, f"{title}: paired per-round log ratios, with Holm-adjusted 95% CIs")
