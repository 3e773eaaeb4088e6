"""`fusebench report`: PR-style delta tables with confidence intervals, plots, and a report folder.

    fusebench report RESULTS.jsonl [MORE.jsonl ...] [--out DIR] [--compare BASELINE:NEW] [--reference FILE]

writes report.md, report.html (self-contained), summary.csv and the PNG plots to `reports/<experiment>/`, and prints
the delta tables. Results files merge (shards of a suite, or one suite on several machines); one table is drawn per
machine x comparison x workload, so machines and workloads are never pooled into one median. Every number comes
from bench.stats, the module `fusebench check` uses too. Alongside: the roofline (achieved rates against the
machine's peak), decode speed against KV depth, and `fusebench ops` records (whose statistics come from
bench.opbench), alone (reports/ops/) or merged with trials.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from rich.console import Console
from rich.text import Text

from models.ops import REGISTRY

from . import plots, stats
from .document import Block, Bullets, Figure, Heading, Paragraph, Table, to_console, to_html, to_markdown
from .opbench import VariantSummary, format_seconds, summarize_ops
from .reference import Reference, load_reference, matches_size
from .results import Results, ResultsError, blas_name, machine_label, read_results

SIZE_ORDER = ("E2B", "E4B", "26B", "31B")
DELTA_COLUMNS = ("Size", "Metric", "Baseline", "New", "Δ", "95% CI", "Verdict")
REF_COLUMN = "Ref Δ"
SEED = 0  # bootstrap seed: a report rebuilt from the same results shows the same CIs
ALPHA = 0.05
NOISY_CV = 0.05  # hyperfine's rule of thumb: beyond this the machine is too busy to trust small Δs
MIN_PAIRS_FOR_CI = 3
COLD_FACTOR = 2.0  # warn when the cold first call takes this many times a steady trial
INCORRECT = "✗ incorrect"
TRIAL_FIELDS = (
    "run_id", "cell", "model_key", "size", "workload", "prompt_tokens", "gen_tokens", "batch", "variant", "round",
    "warmup", "prefill_tps", "gen_tps",
)
# What the depth and op sections read from their records; a record lacking one is bad input, not a traceback.
DEPTH_FIELDS = ("run_id", "model_key", "size", "batch", "variant", "round", "depth", "gen_tokens", "gen_tps")
OP_FIELDS = ("run_id", "op", "variant", "reference", "shape_label", "round", "seconds", "bytes", "flops", "max_abs_err")
REQUIRED_FIELDS = {"trial": TRIAL_FIELDS, "depth": DEPTH_FIELDS, "op": OP_FIELDS}
# bench.roofline's achieved() and percent_of_peak() fields: carried into summary.csv whenever trial records hold them.
ROOFLINE_FIELDS = ("prefill_tflops", "gen_gbps", "prefill_pct_of_peak", "gen_pct_of_peak")
CELL_FIELDS = ("model_key", "size", "workload", "prompt_tokens", "gen_tokens", "batch", "dtype", "quantize")


class ReportError(ValueError):
    """Bad input to the report (a comparison, a reference); the message is one line."""


# --- loading ---------------------------------------------------------------------------------------


def load_results(paths: Sequence[str | Path], warn: Callable[[str], None] | None = None) -> Results:
    """Read and merge results files. Each must hold timed trials or op records (`fusebench ops`), all well formed;
    otherwise the error names the file."""
    merged = Results()
    for path in paths:
        one = read_results([path], warn=warn)
        for kind, fields in REQUIRED_FIELDS.items():
            _require_fields(path, one.of_kind(kind), kind, fields)
        if not any(not r["warmup"] for r in one.of_kind("trial")) and not one.of_kind("op"):
            found = ", ".join(f"{n} {kind}" for kind, n in Counter(r["kind"] for r in one.records).items())
            raise ResultsError(f"{path}: no timed trial or op records to report (found {found})")
        merged.records.extend(one.records)
        merged.corrupt_lines.extend(one.corrupt_lines)
    return merged


def _require_fields(path: str | Path, records: list[dict[str, Any]], kind: str, fields: Sequence[str]) -> None:
    for record in records:
        missing = [f for f in fields if f not in record]
        if missing:
            where = ", ".join(f"{key} {record[key]}" for key in ("op", "variant", "round") if key in record)
            raise ResultsError(f"{path}: {kind} record ({where or '?'}) lacks field(s) {', '.join(missing)}")


@dataclass
class Study:
    """Everything the report draws from, out of the merged results."""

    name: str
    results: Results
    trials: pd.DataFrame  # every trial, warmups included: the cold one carries compile_s
    timed: pd.DataFrame  # the trials that count
    closed: pd.DataFrame  # skip and error records
    correctness: pd.DataFrame
    depth: pd.DataFrame
    variants: list[str]
    ops: dict[str, dict[str, str]]
    planned: list[tuple[str, str]]  # the experiments' comparisons
    machines: list[str]
    envs: dict[str, list[dict[str, Any]]]  # the environment of each run, by machine
    op_summaries: list[VariantSummary]  # bench.opbench's per run x op x shape x variant statistics

    @property
    def has_trials(self) -> bool:
        """Whether there is anything for the trial sections (an ops-only file has none)."""
        return not (self.timed.empty and self.closed.empty)


def build_study(results: Results) -> Study:
    trials = results.frame("trial")
    op_records = results.frame("op")
    # An ops run's header stores the experiment it took its shapes from; its variants and comparisons were not run.
    op_runs = set(op_records["run_id"]) if not op_records.empty else set()
    experiments = [_experiment(h) for run_id, h in results.runs.items() if run_id not in op_runs]
    declared = {name: assignment for exp in experiments for name, assignment in _declared_variants(exp).items()}
    seen = list(trials["variant"]) if not trials.empty else []
    variants = list(dict.fromkeys([*declared, *seen]))
    ops = {name: dict(assignment) for name, assignment in declared.items() if isinstance(assignment, dict)}
    if not trials.empty and "ops" in trials:
        # The trial's ops are the full assignment (the YAML may omit ops left at their default).
        ops.update({v: o for v, o in zip(trials["variant"], trials["ops"], strict=True) if isinstance(o, dict)})
    closed = pd.concat([results.frame("skip"), results.frame("error")], ignore_index=True)
    timed = stats.timed_trials(trials)
    names = list(dict.fromkeys(str(h.get("experiment", {}).get("name", "")) for h in results.runs.values()))
    envs: dict[str, list[dict[str, Any]]] = {}
    for header in results.runs.values():
        envs.setdefault(machine_label(header.get("env", {})), []).append(header.get("env", {}))
    return Study(
        name="+".join(n for n in names if n) or "results",
        results=results,
        trials=trials,
        timed=timed,
        closed=closed,
        correctness=results.frame("correctness"),
        depth=results.frame("depth"),
        variants=variants,
        ops=ops,
        planned=list(dict.fromkeys(pair for exp in experiments for pair in _planned_comparisons(exp))),
        machines=list(dict.fromkeys(m for f in (timed, closed, op_records) if not f.empty for m in f["machine"])),
        envs=envs,
        op_summaries=summarize_ops(results.of_kind("op")),
    )


def _experiment(header: dict[str, Any]) -> dict[str, Any]:
    """The experiment YAML stored in a run header (already validated by the runner; tolerate anything)."""
    try:
        data = yaml.safe_load(header.get("experiment", {}).get("content") or "")
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _declared_variants(experiment: dict[str, Any]) -> dict[str, Any]:
    variants = experiment.get("variants")
    return variants if isinstance(variants, dict) else {}


def _planned_comparisons(experiment: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    for item in experiment.get("comparisons") or []:
        if isinstance(item, dict) and {"baseline", "new"} <= item.keys():
            pairs.append((str(item["baseline"]), str(item["new"])))
        elif isinstance(item, list) and len(item) == 2:
            pairs.append((str(item[0]), str(item[1])))
    return pairs


def parse_compare(text: str) -> tuple[str, str]:
    match = re.fullmatch(r"\s*([^:\s]+)\s*:\s*([^:\s]+)\s*", text)
    if not match:
        raise ReportError(f"--compare: expected BASELINE:NEW (two variant names joined by ':'), got {text!r}")
    return match.group(1), match.group(2)


def resolve_comparisons(requested: Sequence[str] | None, study: Study) -> list[tuple[str, str]]:
    """--compare pairs if given, else the experiments' comparisons, else the first variant against each other one."""
    if requested:
        pairs = [parse_compare(text) for text in requested]
        for pair in pairs:
            unknown = [name for name in pair if name not in study.variants]
            if unknown:
                raise ReportError(
                    f"--compare {pair[0]}:{pair[1]}: no variant {unknown[0]!r} in the results; "
                    f"variants: {', '.join(study.variants) or 'none (these results hold no trials)'}"
                )
        return pairs
    if study.planned:
        return study.planned
    if not study.variants:
        return []
    first, *others = study.variants
    return [(first, other) for other in others]


# --- ordering and labels ---------------------------------------------------------------------------


def size_rank(label: str) -> int:
    """E2B, E4B, 26B, 31B first (a truncated "E2B (2/35 layers)" counts as E2B), then everything else."""
    return next((i for i, size in enumerate(SIZE_ORDER) if matches_size(label, size)), len(SIZE_ORDER))


def ordered_cells(frames: Sequence[pd.DataFrame]) -> list[tuple[str, str]]:
    """The (model_key, size) of every cell in the frames, in size order, then first appearance."""
    seen: dict[tuple[str, str], int] = {}
    for frame in frames:
        if not frame.empty:
            for cell in zip(frame["model_key"], frame["size"], strict=True):
                seen.setdefault(cell, len(seen))
    return sorted(seen, key=lambda cell: (size_rank(cell[1]), seen[cell]))


def cell_labels(cells: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The size label, unless two models share it (say float32 and bfloat16 E2B): then the model key is added."""
    counts = Counter(size for _, size in cells)
    return {(key, size): size if counts[size] == 1 else f"{size} · {key}" for key, size in cells}


def ordered_workloads(frames: Sequence[pd.DataFrame]) -> list[str]:
    """The workloads in the frames, by prompt, gen and batch size."""
    present = [f[["workload", "prompt_tokens", "gen_tokens", "batch"]] for f in frames if not f.empty]
    if not present:
        return []
    rows = pd.concat(present)
    rows = rows.drop_duplicates("workload").sort_values(["prompt_tokens", "gen_tokens", "batch"], kind="stable")
    return list(rows["workload"])


def _on(frame: pd.DataFrame, machine: str, workload: str | None = None) -> pd.DataFrame:
    if frame.empty:
        return frame
    keep = frame["machine"] == machine
    if workload is not None:
        keep &= frame["workload"] == workload
    return frame[keep]


def _labelled(frame: pd.DataFrame, labels: dict[tuple[str, str], str]) -> pd.DataFrame:
    """The frame with its size column replaced by the table's row label, for the plots."""
    return frame.assign(size=[labels[cell] for cell in zip(frame["model_key"], frame["size"], strict=True)])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()


# --- environment -----------------------------------------------------------------------------------


def environment_line(envs: Sequence[dict[str, Any]]) -> str:
    """device, backend, BLAS, mlx version and commit; values that differ between runs are all listed."""

    def values(render: Callable[[dict[str, Any]], str]) -> str:
        return " / ".join(dict.fromkeys(render(env) for env in envs)) or "?"

    def commit(env: dict[str, Any]) -> str:
        return str(env.get("git_commit") or "?")[:7] + (" (dirty)" if env.get("git_dirty") else "")

    return (
        f"device {values(lambda e: str(e.get('device', '?')))} · backend {values(lambda e: str(e.get('backend', '?')))}"
        f" · BLAS {values(blas_name)} · mlx {values(lambda e: str(e.get('mlx', '?')))} · commit {values(commit)}"
    )


def plot_caption(study: Study, machine: str) -> str:
    return envs_caption(study.envs.get(machine) or [{}])


def envs_caption(envs: Sequence[dict[str, Any]]) -> str:
    return f"Measured on {envs[0].get('hostname', '?')}: {environment_line(envs)}"


# --- the delta tables ------------------------------------------------------------------------------


@dataclass
class DeltaSection:
    """One machine x comparison x workload, rendered, with what to warn about."""

    blocks: list[Block]
    warnings: list[str]


def compare_scope(study: Study, machine: str, workload: str, pair: tuple[str, str]) -> pd.DataFrame:
    """stats.compare over exactly the rows of one table, which is therefore the Holm family."""
    return stats.compare(_on(study.timed, machine, workload), *pair, stats.METRICS, seed=SEED, alpha=ALPHA)


def failed_correctness(study: Study, machine: str, workload: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(model_key, variant) -> the failing correctness record, for one machine and workload."""
    records = _on(study.correctness, machine, workload)
    if records.empty:
        return {}
    failing = records[~records["passed"].astype(bool)]
    return {(r["model_key"], r["variant"]): r for r in failing.to_dict("records")}


def closed_reason(closed: pd.DataFrame, model_key: str) -> str | None:
    """"skipped: ..." / "error: ..." for a cell, or None."""
    if closed.empty:
        return None
    rows = closed[closed["model_key"] == model_key]
    reasons = [f"{'skipped' if r['kind'] == 'skip' else 'error'}: {r['reason']}" for r in rows.to_dict("records")]
    return "; ".join(dict.fromkeys(reasons)) or None


def delta_cells(row: Any, failed: Sequence[str], new: str) -> tuple[str, str, str]:
    """(Δ, CI, verdict) of one compare() row; a variant that failed correctness is never shown as a speed-up."""
    if failed:
        return "—", "—", INCORRECT if new in failed else f"{INCORRECT} (baseline)"
    if row.n_pairs == 0:
        return "—", "—", "no paired rounds"
    ci = stats.RatioCI(ratio=row.ratio, low=row.low, high=row.high, n=row.n_pairs)
    interval = stats.format_ci(ci) if row.n_pairs >= MIN_PAIRS_FOR_CI else f"n/a (n={row.n_pairs})"
    return stats.format_delta(ci), interval, row.verdict


def delta_table(
    study: Study, machine: str, workload: str, pair: tuple[str, str], reference: Reference | None
) -> tuple[Table, pd.DataFrame, list[str]]:
    """The PR-style table for one machine x comparison x workload, its stats, and notes for under it."""
    new = pair[1]
    timed, closed = _on(study.timed, machine, workload), _on(study.closed, machine, workload)
    comparison = compare_scope(study, machine, workload, pair)
    failing = failed_correctness(study, machine, workload)
    fitting = reference if reference and reference_fits(reference, study, pair) else None
    cells = ordered_cells([timed, closed])
    labels = cell_labels(cells)
    rows, notes = [], []
    for cell in cells:
        label, reason = labels[cell], closed_reason(closed, cell[0])
        cell_rows = comparison[comparison["model_key"] == cell[0]]
        if cell_rows.empty or (reason and (cell_rows["n_pairs"] == 0).all()):
            rows.append(_reason_row(label, reason or "no trials", reference))
            continue
        if reason:
            notes.append(f"{label}: {reason} (the row uses the {cell_rows['n_pairs'].max()} rounds recorded before it)")
        failed = [v for v in dict.fromkeys(pair) if (cell[0], v) in failing]
        notes.extend(_incorrect_note(label, failing[(cell[0], v)], cell_rows) for v in failed)
        for row in cell_rows.itertuples():
            delta, interval, verdict = delta_cells(row, failed, new)
            medians = stats.format_tps(row.baseline_median), stats.format_tps(row.new_median)
            ref = [_ref_delta(fitting, cell[1], row.metric)] if reference else []
            rows.append((label, row.metric, *medians, delta, *ref, interval, verdict))
    columns = (*DELTA_COLUMNS[:5], *([REF_COLUMN] if reference else []), *DELTA_COLUMNS[5:])
    numeric = frozenset(range(2, len(columns) - 1))
    return Table(columns, tuple(rows), numeric), comparison, notes


def _reason_row(label: str, reason: str, reference: Reference | None) -> tuple[str, ...]:
    return (label, "—", "—", "—", "—", *(["—"] if reference else []), "—", reason)


def _ref_delta(reference: Reference | None, size: str, metric: str) -> str:
    row = reference.row(size, metric) if reference else None
    return "—" if row is None else f"{row.delta_pct:+.1f}%"


def _incorrect_note(label: str, record: dict[str, Any], cell_rows: pd.DataFrame) -> str:
    measured = ", ".join(
        f"{r.metric} {r.delta_pct:+.1f}%" for r in cell_rows.itertuples() if not math.isnan(r.delta_pct)
    )
    return (
        f"{label}: {record['variant']} failed correctness against {record['reference']}: max |Δlogit| "
        f"{record['max_abs_err']:.3g} > atol {record['atol']:.3g} or greedy tokens {record['tokens_agree']}"
        f"/{record['tokens_checked']}; its timing ({measured or 'none'}) is not a speed-up until it computes the same "
        "logits"
    )


def ops_changes(study: Study, baseline: str, new: str) -> dict[str, tuple[str, str]]:
    """op -> (baseline implementation, new implementation), for the ops the two variants set differently."""
    a, b = study.ops.get(baseline, {}), study.ops.get(new, {})
    ops = dict.fromkeys([*a, *b])
    return {op: (a.get(op, "default"), b.get(op, "default")) for op in ops if a.get(op) != b.get(op)}


def _describe_changes(changes: dict[str, tuple[str, str]]) -> str:
    return ", ".join(f"{op}: {a} → {b}" for op, (a, b) in changes.items())


def ops_difference(study: Study, baseline: str, new: str) -> str:
    changes = ops_changes(study, baseline, new)
    if baseline == new or not changes:
        return "none: both sides run the same ops (an A/A test of the noise)"
    return _describe_changes(changes)


def reference_fits(reference: Reference, study: Study, pair: tuple[str, str]) -> bool:
    """A reference's figures belong beside a comparison only when both change the same ops the same way."""
    return not reference.ops or reference.ops == ops_changes(study, *pair)


def _workload_line(frames: Sequence[pd.DataFrame]) -> str:
    row = next(f.iloc[0] for f in frames if not f.empty)
    return f"prompt {row['prompt_tokens']} tokens, gen {row['gen_tokens']} tokens, batch {row['batch']}"


def _models_line(frames: Sequence[pd.DataFrame], labels: dict[tuple[str, str], str]) -> str:
    """Each row label with its precision, in table order: "E2B (2/35 layers): float32; 26B: bfloat16, nvfp4"."""
    rows = pd.concat([f for f in frames if not f.empty]).drop_duplicates(["model_key", "size"])
    precision = {}
    for row in rows.to_dict("records"):
        quantize = row.get("quantize")
        precision[(row["model_key"], row["size"])] = str(row.get("dtype", "?")) + (
            f", {quantize}" if isinstance(quantize, str) else ""
        )
    return "; ".join(f"{label}: {precision[cell]}" for cell, label in labels.items())


def reference_note(
    reference: Reference, study: Study, machine: str, frames: Sequence[pd.DataFrame], pair: tuple[str, str]
) -> str:
    """Where the reference and this table were measured, side by side, so the difference is in plain view."""
    envs = study.envs.get(machine) or [{}]
    rows = pd.concat([f for f in frames if not f.empty])
    precision = ", ".join(dict.fromkeys(
        str(q) if isinstance(q, str) else str(d) for d, q in zip(rows["dtype"], rows["quantize"], strict=True)
    ))
    measured = f"{envs[0].get('backend', '?')} ({envs[0].get('device', '?')}), {precision}, {rows['workload'].iloc[0]}"
    note = (
        f"{REF_COLUMN}: {reference.title} ({reference.source}). Reference: {reference.describe()}; "
        f"measured: {measured}. Hardware, backend and precision all change the size of a Δ: compare the "
        "direction and rough size, not the digits."
    )
    if not reference_fits(reference, study, pair):
        note += (f" {REF_COLUMN} is left blank here: the reference changed {_describe_changes(reference.ops)}, "
                 f"this comparison changes {ops_difference(study, *pair)}.")
    return note


def delta_section(
    study: Study, pair: tuple[str, str], machine: str, workload: str, reference: Reference | None, out_dir: Path
) -> DeltaSection:
    """Heading, context lines, the table, notes and the Δ plot for one machine x comparison x workload."""
    timed, closed = _on(study.timed, machine, workload), _on(study.closed, machine, workload)
    table, comparison, notes = delta_table(study, machine, workload, pair, reference)
    labels = cell_labels(ordered_cells([timed, closed]))
    ops = ops_difference(study, *pair)
    context = [
        f"Ops that differ: {ops}",
        f"Workload: {workload} ({_workload_line([timed, closed])})",
        f"Environment: {environment_line(study.envs.get(machine) or [{}])}",
        f"Models: {_models_line([timed, closed], labels)}",
    ]
    if reference:
        context.append(reference_note(reference, study, machine, [timed, closed], pair))
    where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
    blocks: list[Block] = [Heading(f"{pair[0]} → {pair[1]} · {where}", 3), Bullets(tuple(context)), table]
    if notes:
        blocks.append(Bullets(tuple(notes)))
    plotted = comparison[comparison["n_pairs"] > 0]
    if not plotted.empty:
        blocks.append(_delta_figure(study, pair, machine, workload, plotted, labels, table, reference, out_dir))
    return DeltaSection(blocks, _table_warnings(comparison, f"{pair[0]} → {pair[1]} · {where}"))


def _delta_figure(
    study: Study, pair: tuple[str, str], machine: str, workload: str, comparison: pd.DataFrame,
    labels: dict[tuple[str, str], str], table: Table, reference: Reference | None, out_dir: Path,
) -> Figure:
    incorrect = {(r[0], r[1]) for r in table.rows if r[-1].startswith(INCORRECT)}
    points = pd.DataFrame({
        "size": [labels[c] for c in zip(comparison["model_key"], comparison["size"], strict=True)],
        "metric": comparison["metric"],
        "delta_pct": comparison["delta_pct"],
        "low_pct": (comparison["low"] - 1) * 100,
        "high_pct": (comparison["high"] - 1) * 100,
    })
    points["incorrect"] = [(s, m) in incorrect for s, m in zip(points["size"], points["metric"], strict=True)]
    fitting = reference if reference and reference_fits(reference, study, pair) else None
    points["ref_delta_pct"] = [
        row.delta_pct if fitting and (row := fitting.row(size, metric)) else math.nan
        for size, metric in zip(comparison["size"], comparison["metric"], strict=True)
    ]
    sizes = [label for label in labels.values() if label in set(points["size"])]
    name = f"delta-{_slug(pair[0])}-vs-{_slug(pair[1])}-{_slug(workload)}{_machine_suffix(study, machine)}.png"
    title = f"Δ throughput, {pair[1]} vs {pair[0]} · {workload}"
    path = plots.delta_plot(points, sizes, title=title, caption=plot_caption(study, machine), path=out_dir / name)
    return Figure(path, f"{title}: median of the paired per-round ratios, with its 95% bootstrap CI")


def _machine_suffix(study: Study, machine: str) -> str:
    return "" if len(study.machines) == 1 else f"-m{study.machines.index(machine) + 1}"


# --- warnings (hyperfine-style: say what makes a number shaky) -------------------------------------


def _table_warnings(comparison: pd.DataFrame, where: str) -> list[str]:
    warnings = [
        f"too few rounds for a CI: {where}: {r.size} {r.metric} has {r.n_pairs} paired round(s); "
        f"a CI needs at least {MIN_PAIRS_FOR_CI}"
        for r in comparison.itertuples() if 0 < r.n_pairs < MIN_PAIRS_FOR_CI
    ]
    tested = comparison[comparison["p_value"].notna()]
    if not tested.empty:
        m = len(tested)
        best = min(stats.mann_whitney_min_p(a, b) for a, b in zip(tested["n_baseline"], tested["n_new"], strict=True))
        if best * m >= ALPHA:
            needed = next(n for n in range(2, 100) if stats.mann_whitney_min_p(n, n) * m < ALPHA)
            warnings.append(
                f"too few rounds for a verdict: {where}: Mann-Whitney's smallest possible p with these rounds is "
                f"{best:.4f}, and Holm over {m} rows needs p < {ALPHA / m:.4f}, so every verdict stays ≈ whatever "
                f"the CI says; run at least {needed} trials"
            )
    return warnings


def noisy_warnings(study: Study) -> list[str]:
    """One line per cell whose rounds scatter by more than NOISY_CV, naming each noisy variant and metric."""
    summary = stats.summary_table(study.timed)
    noisy = summary[summary["cv"] > NOISY_CV]
    warnings = []
    for _, rows in noisy.groupby(["machine", "model_key", "workload"], sort=False):
        spread = ", ".join(f"{r['variant']} {r['metric']} {r['cv']:.1%}" for r in rows.to_dict("records"))
        warnings.append(
            f"noisy: {_where(study, rows.iloc[0])}: CV above {NOISY_CV:.0%} ({spread}; {rows['n'].max()} rounds); "
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
            warnings.append(f"slow cold start: {_where(study, rows.iloc[0])}: first call vs steady trial: "
                            f"{'; '.join(slow)}; kernels compile on first use, and {consequence}")
    return warnings


def _where(study: Study, row: Any) -> str:
    return f"{row['size']} {row['workload']}" + ("" if len(study.machines) == 1 else f" on {row['machine']}")


# --- the other sections ----------------------------------------------------------------------------


def correctness_section(study: Study) -> list[Block]:
    blocks: list[Block] = [Heading("Correctness")]
    if study.correctness.empty:
        return [*blocks, Paragraph("No correctness records in these results.")]
    blocks.append(Paragraph(
        "Each variant's logits against the reference variant's on the same prompt, teacher-forced along the "
        "reference's greedy tokens. A variant passes when max |Δlogit| ≤ atol and every decisive greedy token agrees."
    ))
    columns = ("Size", "Workload", "Variant", "Reference", "max |Δlogit|", "max rel", "Greedy agreement", "atol",
               "Result")
    for machine in study.machines:
        records = _on(study.correctness, machine)
        if records.empty:
            continue
        labels = cell_labels(ordered_cells([records]))
        order = {cell: i for i, cell in enumerate(labels)}
        workloads = ordered_workloads([records])
        variant_rank = {v: i for i, v in enumerate(study.variants)}
        records = records.assign(
            _cell=[order[c] for c in zip(records["model_key"], records["size"], strict=True)],
            _workload=[workloads.index(w) for w in records["workload"]],
            _variant=[variant_rank.get(v, len(variant_rank)) for v in records["variant"]],
        ).sort_values(["_cell", "_workload", "_variant"], kind="stable")
        rows = tuple(_correctness_row(r, labels) for r in records.to_dict("records"))
        if len(study.machines) > 1:
            blocks.append(Heading(machine, 3))
        blocks.append(Table(columns, rows, frozenset({4, 5, 6, 7})))
    return blocks


def _correctness_row(r: dict[str, Any], labels: dict[tuple[str, str], str]) -> tuple[str, ...]:
    return (
        labels[(r["model_key"], r["size"])], r["workload"], r["variant"], r["reference"], f"{r['max_abs_err']:.3g}",
        f"{r['max_rel_err']:.3g}", f"{r['tokens_agree']}/{r['tokens_checked']}", f"{r['atol']:.3g}",
        "✓ passed" if r["passed"] else "✗ failed",
    )


def medians_table(study: Study, machine: str, workload: str) -> Table:
    """Median tok/s per size x metric x variant, with the CV."""
    timed, closed = _on(study.timed, machine, workload), _on(study.closed, machine, workload)
    summary = stats.summary_table(timed)
    cells = ordered_cells([timed, closed])
    labels = cell_labels(cells)
    variants = [v for v in study.variants if v in set(timed["variant"])] if not timed.empty else []
    rows = []
    for cell in cells:
        cell_summary = summary[summary["model_key"] == cell[0]]
        if cell_summary.empty:
            # The reason sits in the Metric column, so it shows even when no variant has a column.
            rows.append((labels[cell], closed_reason(closed, cell[0]) or "no trials", *(["—"] * len(variants))))
            continue
        for metric in stats.METRICS:
            by_variant = cell_summary[cell_summary["metric"] == metric].set_index("variant")
            if by_variant.empty:
                continue
            rows.append((labels[cell], metric, *(
                f"{stats.format_tps(by_variant.at[v, 'median'])} (CV {by_variant.at[v, 'cv']:.1%})"
                if v in by_variant.index else "—" for v in variants
            )))
    return Table(("Size", "Metric", *variants), tuple(rows), frozenset(range(2, 2 + len(variants))))


def throughput_section(study: Study, out_dir: Path) -> list[Block]:
    blocks: list[Block] = [Heading("Throughput"), Paragraph(
        "Median tokens/s of the timed rounds (warmups excluded) with the coefficient of variation; summary.csv "
        "holds the quartiles and n."
    )]
    for machine in study.machines:
        for workload in ordered_workloads([_on(study.timed, machine), _on(study.closed, machine)]):
            timed = _on(study.timed, machine, workload)
            where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
            blocks += [Heading(where, 3), medians_table(study, machine, workload)]
            if timed.empty:
                continue
            labels = cell_labels(ordered_cells([timed]))
            summary = _labelled(stats.summary_table(timed), labels)
            name = f"throughput-{_slug(workload)}{_machine_suffix(study, machine)}.png"
            title = f"Throughput per variant · {workload}"
            path = plots.throughput_plot(summary, list(labels.values()), _variants_in(study, timed), title=title,
                                         caption=plot_caption(study, machine), path=out_dir / name)
            blocks.append(Figure(path, f"{title} (median, IQR whiskers)"))
        blocks += _prompt_sweep(study, machine, out_dir)
    return blocks


def _prompt_sweep(study: Study, machine: str, out_dir: Path) -> list[Block]:
    """tok/s against prompt length, for each gen/batch setting whose prompt length the experiment sweeps."""
    timed = _on(study.timed, machine)
    blocks: list[Block] = []
    for (gen, batch), rows in timed.groupby(["gen_tokens", "batch"], sort=True):
        # Only the models measured at several prompt lengths make a line.
        swept = rows.groupby("model_key")["prompt_tokens"].transform("nunique") > 1
        rows = rows[swept]
        if rows.empty:
            continue
        labels = cell_labels(ordered_cells([rows]))
        summary = stats.summary_table(rows).merge(
            rows[["machine", "model_key", "workload", "prompt_tokens"]].drop_duplicates(),
            on=["machine", "model_key", "workload"],
        )
        name = f"prompt-sweep-tg{gen}-b{batch}{_machine_suffix(study, machine)}.png"
        title = f"Throughput vs prompt length · tg{gen} b{batch}"
        path = plots.prompt_sweep_plot(_labelled(summary, labels), list(labels.values()), _variants_in(study, rows),
                                       title=title, caption=plot_caption(study, machine), path=out_dir / name)
        blocks.append(Figure(path, f"{title} (median, IQR bars)"))
    return blocks


def rounds_section(study: Study, out_dir: Path) -> list[Block]:
    blocks: list[Block] = [Heading("Round by round"), Paragraph(
        "Every timed trial in round order: a trend is drift (thermal, background load), scatter is noise. Variants "
        "alternate order each round (ABBA), so drift lands on each alike."
    )]
    for machine in study.machines:
        for workload in ordered_workloads([_on(study.timed, machine)]):
            timed = _on(study.timed, machine, workload)
            labels = cell_labels(ordered_cells([timed]))
            name = f"rounds-{_slug(workload)}{_machine_suffix(study, machine)}.png"
            title = f"Per-trial throughput in round order · {workload}"
            path = plots.rounds_plot(_labelled(timed, labels), list(labels.values()), _variants_in(study, timed),
                                     title=title, caption=plot_caption(study, machine), path=out_dir / name)
            blocks.append(Figure(path, title))
    return blocks


ROOFLINE_MEANING = (
    "% of peak: prefill TFLOP/s (2 FLOPs per active parameter and prompt token, plus attention) against the "
    "matmul peak (fp32; bf16 for 16-bit models), gen GB/s (the bytes each decode step must move: active weights "
    "and KV cache) against the memory-read peak, so a fusion that saves memory traffic moves gen toward its roof."
)


def roofline_section(study: Study) -> list[Block]:
    """Achieved prefill TFLOP/s and gen GB/s per cell and variant, with their share of the machine's peak."""
    if study.timed.empty or "prefill_tflops" not in study.timed or study.timed["prefill_tflops"].isna().all():
        return []
    blocks: list[Block] = [Heading("Roofline"), Paragraph(f"Medians of the timed trials. {ROOFLINE_MEANING}")]
    for machine in study.machines:
        timed = _on(study.timed, machine)
        if timed.empty:
            continue
        suffix = "" if len(study.machines) == 1 else f" · {machine}"
        blocks.append(Bullets(tuple(f"Peak{suffix}: {describe_peak(peak)}" for peak in _peaks(study, timed))))
        for workload in ordered_workloads([timed]):
            blocks += [Heading(f"{workload}{suffix}", 3), roofline_table(study, _on(timed, machine, workload))]
    return blocks


def _peaks(study: Study, timed: pd.DataFrame) -> list[dict[str, Any] | None]:
    """The distinct peaks the runs of these trials were held against (one, unless runs measured it apart)."""
    runs = study.results.runs
    peaks = [runs.get(run_id, {}).get("peak") for run_id in dict.fromkeys(timed["run_id"])]
    return list({repr(peak): peak for peak in peaks}.values())


def describe_peak(peak: dict[str, Any] | None) -> str:
    if not peak:
        return ("none known (a CPU run without a probe, or a device missing from the chip table): achieved rates "
                "only, no percentages")
    figures = [f"{_rate(peak[key])} {unit}" for key, unit in (
        ("fp32_tflops", "TFLOP/s fp32"), ("bf16_tflops", "TFLOP/s bf16"), ("memory_gbps", "GB/s memory")
    ) if peak.get(key)]
    return (f"{peak.get('name', '?')}: {', '.join(figures) or 'no figures'} (source: {peak.get('source', '?')}; "
            f"confidence: {peak.get('confidence', '?')})")


def roofline_table(study: Study, timed: pd.DataFrame) -> Table:
    """Size | Variant | prefill TFLOP/s (% of peak) | gen GB/s (% of peak), for one machine and workload."""
    labels = cell_labels(ordered_cells([timed]))
    fields = [f for f in ROOFLINE_FIELDS if f in timed]
    medians = _trial_medians(timed, fields).set_index(["model_key", "variant"])
    rows = []
    for cell, label in labels.items():
        for variant in _variants_in(study, timed[timed["model_key"] == cell[0]]):
            row = medians.loc[(cell[0], variant)]
            rows.append((label, variant, _with_percent(row, "prefill_tflops", "prefill_pct_of_peak"),
                         _with_percent(row, "gen_gbps", "gen_pct_of_peak")))
    return Table(("Size", "Variant", "Prefill TFLOP/s (% of peak)", "Gen GB/s (% of peak)"), tuple(rows),
                 frozenset({2, 3}))


def _with_percent(row: pd.Series, rate: str, percent: str) -> str:
    value, share = row.get(rate, math.nan), row.get(percent, math.nan)
    if pd.isna(value):
        return "—"
    return _rate(value) if pd.isna(share) else f"{_rate(value)} ({share:.1f}%)"


def _rate(value: float) -> str:
    """Three significant digits, and whole numbers from 100: 0.0177, 2.30, 52.1, 3,350."""
    short = f"{value:#.3g}"
    # Decide on the rounded value, so 99.96 prints "100", not "100." ('#' keeps the point).
    return f"{value:,.0f}" if abs(float(short)) >= 100 else short


def _trial_medians(timed: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Per machine x cell x variant, the median of each column (None counts as missing)."""
    keys = ["machine", "model_key", "workload", "variant"]
    values = timed[list(columns)].apply(pd.to_numeric, errors="coerce")
    return values.groupby([timed[k] for k in keys]).median().reset_index()


def depth_section(study: Study, out_dir: Path) -> list[Block]:
    if study.depth.empty:
        return []
    blocks: list[Block] = [Heading("Decode speed vs KV depth"), Paragraph(
        "Each round prefills one long prompt, stopping at every KV depth to time the decode steps that follow "
        "there: median decode tokens/s over rounds, IQR shaded. Each model has one curve, recorded with its first "
        "workload: the KV depth, not the workload's prompt, sets the context here."
    )]
    for machine in study.machines:
        depth = _on(study.depth, machine)
        if depth.empty:
            continue
        # gen_tokens of a depth record is the decode steps timed at each depth (the workload's gen_tokens - 1).
        for (batch, steps), rows in depth.groupby(["batch", "gen_tokens"], sort=True):
            blocks += _depth_group(study, machine, rows, int(batch), int(steps), out_dir)
    return blocks


def _depth_group(study: Study, machine: str, rows: pd.DataFrame, batch: int, steps: int, out_dir: Path) -> list[Block]:
    """The medians table and the curves of the depth records sharing a batch and a number of decode steps."""
    labels = cell_labels(ordered_cells([rows]))
    variants = _variants_in(study, rows)
    where = f"{steps} decode steps per depth, batch {batch}"
    where += "" if len(study.machines) == 1 else f" · {machine}"
    medians = rows.groupby(["model_key", "depth", "variant"])["gen_tps"].median()
    table_rows = tuple(
        (label, f"{depth:,}", *(stats.format_tps(medians.get((cell[0], depth, v), math.nan)) for v in variants))
        for cell, label in labels.items()
        for depth in sorted(rows.loc[rows["model_key"] == cell[0], "depth"].unique())
    )
    rounds = rows.groupby(["model_key", "variant"])["round"].nunique().max()
    name = f"depth-{steps}steps-b{batch}{_machine_suffix(study, machine)}.png"
    title = f"Decode throughput vs KV depth · {steps} steps per depth, b{batch}"
    path = plots.depth_plot(_labelled(rows, labels), list(labels.values()), variants, title=title,
                            caption=plot_caption(study, machine), path=out_dir / name)
    return [
        Heading(where, 3),
        Paragraph(f"Timed at each depth: {steps} decode steps (batch {batch}), in {rounds} round(s); median tokens/s."),
        Table(("Size", "KV depth", *variants), table_rows, frozenset(range(1, 2 + len(variants)))),
        Figure(path, f"{title} (median over rounds, IQR band)"),
    ]


OP_COLUMNS = ("Shape", "Variant", "Median time", "GB/s", "GFLOP/s", "max abs err", "Δ speed", "95% CI", "Verdict")


def op_section(study: Study, out_dir: Path) -> list[Block]:
    """`fusebench ops` records: per op a table of every shape and variant, and per run one plot of the Δs."""
    if not study.op_summaries:
        return []
    blocks: list[Block] = [Heading("Op microbenchmarks"), Paragraph(
        "Each op variant timed on its own at the exact shapes each size produces (fusebench ops), in rounds "
        "interleaved ABBA: median time per call; GB/s counts the bytes read and written, GFLOP/s the arithmetic "
        "(— for pure data movement); max abs err is the output's largest deviation from the reference variant's. Δ "
        "speed is the median of the paired per-round speed ratios against the op's reference variant, with its "
        "95% bootstrap CI; faster or slower when the CI excludes 0, otherwise ≈."
    )]
    runs = list(dict.fromkeys(s.run_id for s in study.op_summaries))
    notes = {r["shape_label"]: r["note"] for r in study.results.of_kind("op") if r.get("note")}
    for index, run_id in enumerate(runs):
        summaries = [s for s in study.op_summaries if s.run_id == run_id]
        blocks += _op_run(study, run_id, summaries, notes, "" if len(runs) == 1 else f"-r{index + 1}", out_dir)
    return blocks


def _op_run(study: Study, run_id: str | None, summaries: list[VariantSummary], notes: dict[str, str], suffix: str,
            out_dir: Path) -> list[Block]:
    env = study.results.runs.get(run_id, {}).get("env", {})
    rounds = len({r["round"] for r in study.results.of_kind("op") if r.get("run_id") == run_id})
    where = "" if not suffix else f" · run {run_id}"
    blocks: list[Block] = [Paragraph(f"Run {run_id}, {rounds} rounds; environment: {environment_line([env])}")]
    for op in dict.fromkeys(s.op for s in summaries):
        rows = [s for s in summaries if s.op == op]
        title = f"{op}: {REGISTRY[op].doc}" if op in REGISTRY else op
        blocks += [Heading(f"{title}{where}", 3), op_table(rows)]
        shape_notes = [f"{label}: {notes[label]}" for label in dict.fromkeys(s.shape_label for s in rows)
                       if label in notes]
        if shape_notes:
            blocks.append(Bullets(tuple(shape_notes)))
    compared = [s for s in summaries if s.speed is not None]
    if compared:
        blocks.append(_op_figure(compared, envs_caption([env]), where, out_dir / f"op-deltas{suffix}.png"))
    return blocks


def op_table(summaries: Sequence[VariantSummary]) -> Table:
    """One op's shapes, the reference variant first in each, the shape named once per group."""
    rows = []
    for label in dict.fromkeys(s.shape_label for s in summaries):
        group = sorted((s for s in summaries if s.shape_label == label), key=lambda s: s.variant != s.reference)
        for i, s in enumerate(group):
            delta, interval = ("—", "—") if s.speed is None else (stats.format_delta(s.speed),
                                                                  stats.format_ci(s.speed))
            rows.append((label if i == 0 else "", s.variant, format_seconds(s.median_s), _rate(s.gbps),
                         "—" if s.gflops is None else _rate(s.gflops), f"{s.max_abs_err:.2g}", delta, interval,
                         s.verdict))
    return Table(OP_COLUMNS, tuple(rows), frozenset(range(2, 8)))


def _op_figure(summaries: Sequence[VariantSummary], caption: str, where: str, path: Path) -> Figure:
    # A variant is named on its bar only where its op has several besides the reference.
    variants_per_op = Counter(op for op, _ in {(s.op, s.variant) for s in summaries})
    several = {op for op, n in variants_per_op.items() if n > 1}
    points = pd.DataFrame({
        "label": [s.shape_label + (f" · {s.variant}" if s.op in several else "") for s in summaries],
        "op": [s.op for s in summaries],
        "ratio": [s.speed.ratio for s in summaries],
        "low": [s.speed.low for s in summaries],
        "high": [s.speed.high for s in summaries],
        "verdict": [s.verdict for s in summaries],
    })
    title = f"Op microbenchmarks: speed vs each op's reference variant{where}"
    plots.op_delta_plot(points, title=title, caption=caption, path=path)
    return Figure(path, f"{title}: median of the paired per-round speed ratios, with its 95% bootstrap CI; faint "
                        "bars: the CI includes 0")


def _variants_in(study: Study, frame: pd.DataFrame) -> list[str]:
    present = set(frame["variant"])
    return [v for v in study.variants if v in present]


def method_section() -> list[Block]:
    return [Heading("Method"), Bullets((
        "Warmup trials are excluded from every statistic.",
        "Baseline and New are the medians of each variant's timed rounds; tok/s with a thousands separator from "
        "1,000 and one decimal below.",
        "Δ is the median of the per-round paired ratios new/baseline minus 1 (variants share each round's prompt and "
        "run in alternating order), so drift common to a round cancels.",
        f"95% CI: percentile bootstrap of that median (10,000 resamples, seed {SEED}); n/a below "
        f"{MIN_PAIRS_FOR_CI} paired rounds.",
        f"Verdict: faster or slower only when the CI excludes 0 and the two-sided Mann-Whitney p-value, Holm-corrected "
        f"across the rows of its table, is below {ALPHA}; otherwise ≈. A variant that failed its correctness check "
        f"shows {INCORRECT} instead of a Δ.",
        "Machines and workloads are never pooled: each has its own table.",
    ))]


# --- summary.csv -----------------------------------------------------------------------------------


def summary_frame(study: Study) -> pd.DataFrame:
    """One row per machine x size x workload x metric x variant: median, quartiles, IQR, CV, n.

    Peak memory is added as its median, and so are the roofline fields (ROOFLINE_FIELDS) of trials that carry them.
    """
    timed = study.timed
    summary = stats.summary_table(timed)
    if summary.empty:
        return summary
    keys = ["machine", "model_key", "workload"]
    cells = timed[[*keys, *(f for f in CELL_FIELDS if f in timed and f not in keys)]].drop_duplicates(keys)
    summary = summary.merge(cells.drop(columns="size"), on=keys, how="left")
    extra = [c for c in ("peak_memory_bytes", *ROOFLINE_FIELDS) if c in timed.columns]
    if extra:
        medians = _trial_medians(timed, extra).rename(columns={c: f"{c}_median" for c in extra})
        summary = summary.merge(medians, on=[*keys, "variant"], how="left")
    machine_rank = {m: i for i, m in enumerate(study.machines)}
    variant_rank = {v: i for i, v in enumerate(study.variants)}
    summary = summary.assign(
        _m=summary["machine"].map(machine_rank), _s=summary["size"].map(size_rank),
        _metric=summary["metric"].map(stats.METRICS.index), _v=summary["variant"].map(variant_rank),
    ).sort_values(["_m", "_s", "size", "prompt_tokens", "gen_tokens", "batch", "_metric", "_v"], kind="stable")
    return summary.drop(columns=["_m", "_s", "_metric", "_v"]).reset_index(drop=True)


# --- assembling and writing ------------------------------------------------------------------------


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
    warnings += delta_warnings + noisy_warnings(study) + cold_start_warnings(study)
    op_blocks = op_section(study, out_dir)
    blocks: list[Block] = [
        Heading(f"fusebench report: {study.name}", 1),
        Paragraph(_overview(study, sources)),
        *delta_blocks,
        *warnings_section(study, warnings),
        *(correctness_section(study) if study.has_trials else []),
        *(throughput_section(study, out_dir) if study.has_trials else []),
        *(rounds_section(study, out_dir) if study.has_trials else []),
        *roofline_section(study),
        *depth_section(study, out_dir),
        *op_blocks,
        *(method_section() if study.has_trials else []),
    ]
    files = [out_dir / "report.md", out_dir / "report.html", out_dir / "summary.csv"]
    files[0].write_text(to_markdown(blocks, out_dir), encoding="utf-8")
    files[1].write_text(to_html(blocks, f"fusebench report: {study.name}"), encoding="utf-8")
    summary_frame(study).to_csv(files[2], index=False)
    files += [b.path for b in blocks if isinstance(b, Figure)]
    return Report([*delta_blocks, *op_blocks], warnings, files)


def delta_sections(
    study: Study, comparisons: Sequence[tuple[str, str]], reference: Reference | None, out_dir: Path
) -> tuple[list[Block], list[str]]:
    """Every comparison's tables, one per machine x workload, and their warnings."""
    blocks: list[Block] = []
    warnings: list[str] = []
    for pair in comparisons:
        blocks.append(Heading(f"Δ {pair[0]} → {pair[1]}"))
        for machine in study.machines:
            for workload in ordered_workloads([_on(study.timed, machine), _on(study.closed, machine)]):
                section = delta_section(study, pair, machine, workload, reference, out_dir)
                blocks += section.blocks
                warnings += section.warnings
    return blocks, warnings


def warnings_section(study: Study, warnings: Sequence[str]) -> list[Block]:
    if warnings:
        return [Heading("Warnings"), Bullets(tuple(warnings))]
    if not study.has_trials:
        return []  # an ops-only report has no cells to vouch for
    return [Heading("Warnings"), Paragraph("None: every cell is quiet, paired and warmed up.")]


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


# --- command line ----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS.jsonl",
                        help="results files to merge (shards of a suite, or one suite on several machines)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: reports/<experiment name>/)")
    parser.add_argument("--compare", action="append", metavar="BASELINE:NEW",
                        help="variants to compare, repeatable (default: the experiment's comparisons, else the first "
                             "variant against each other one)")
    parser.add_argument("--reference", metavar="FILE",
                        help="published figures to show beside the measured Δ: a YAML file, or a shipped name "
                             "(pr15587)")


def command(args: argparse.Namespace, console: Console) -> int:
    """Run `fusebench report`; bad input raises ResultsError, ReportError or ReferenceFileError (all ValueError)."""
    reference = load_reference(args.reference) if args.reference else None
    results = load_results(args.results, warn=lambda message: _warn(console, message))
    study = build_study(results)
    comparisons = resolve_comparisons(args.compare, study)
    # Experiment names are already path-safe; the substitution only guards hand-written headers.
    out_dir = args.out or Path("reports") / re.sub(r"[^\w.+-]", "-", study.name)
    report = write_report(study, comparisons, out_dir, reference, sources=args.results)
    to_console([b for b in report.terminal_blocks if not isinstance(b, Figure)], console)
    for warning in report.warnings:
        _warn(console, warning)
    console.print(f"wrote {len(report.files)} files to {out_dir}/: report.md, report.html, summary.csv and "
                  f"{len(report.files) - 3} plots")
    return 0


def _warn(console: Console, message: str) -> None:
    # Text, not markup: a path or a CI in the message may contain brackets.
    console.print(Text.assemble(("warning: ", "yellow"), message))


def print_summary(console: Console, results: Results, comparisons: list[tuple[str, str]] | None = None) -> None:
    """A compact table for the end of `fusebench run`: medians per size x metric x variant, then each comparison's
    Δ with its CI and verdict (the same numbers the report shows)."""
    study = build_study(results)
    if study.timed.empty and study.closed.empty:
        console.print("no trials recorded")
        return
    pairs = list(comparisons) if comparisons else (resolve_comparisons(None, study) if study.variants else [])
    for machine in study.machines:
        for workload in ordered_workloads([_on(study.timed, machine), _on(study.closed, machine)]):
            where = workload if len(study.machines) == 1 else f"{workload} · {machine}"
            to_console([Heading(where, 3), run_summary_table(study, machine, workload, pairs)], console)


def run_summary_table(study: Study, machine: str, workload: str, pairs: Sequence[tuple[str, str]]) -> Table:
    medians = medians_table(study, machine, workload)
    variants = list(medians.columns[2:])
    failing = failed_correctness(study, machine, workload)
    scoped = {pair: compare_scope(study, machine, workload, pair) for pair in pairs}
    labels = cell_labels(ordered_cells([_on(study.timed, machine, workload), _on(study.closed, machine, workload)]))
    by_label = {label: cell for cell, label in labels.items()}
    rows = []
    for row in medians.rows:
        cell, metric = by_label[row[0]], row[1]
        deltas = []
        for (baseline, new), comparison in scoped.items():
            match = comparison[(comparison["model_key"] == cell[0]) & (comparison["metric"] == metric)]
            if match.empty:
                deltas.append("—")
                continue
            failed = [v for v in dict.fromkeys((baseline, new)) if (cell[0], v) in failing]
            delta, interval, verdict = delta_cells(next(match.itertuples()), failed, new)
            deltas.append(" ".join(part for part in (delta, interval, verdict) if part != "—"))
        rows.append((*row[:2], *(v.split(" (CV")[0] for v in row[2:]), *deltas))
    columns = ("Size", "Metric", *variants, *(f"Δ {new} vs {baseline}" for baseline, new in pairs))
    return Table(columns, tuple(rows), frozenset(range(2, 2 + len(variants))))
