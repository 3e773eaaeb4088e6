"""The study: everything a report or a check is built from, out of one or more results files.

It also knows how cells are named and ordered (E2B before 26B; a model key added only when two share
a size label), so tables, plots and the gate label a cell the same way.

Why one long module: every view reads the same study (cells named and ordered once, the runs'
headers, trials, correctness, kernels, ops and shares as typed rows); the gate and the report must
not build two of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.cell import CURRENT_BUILD, CorrectnessRecord
from ..core.errors import SpecError, UserError
from ..core.experiment import Experiment
from ..core.fileformat import (
    CELL_FIELDS,
    REQUIRED_FIELDS,
    ROOFLINE_FIELDS,
    Column,
    KernelRecord,
    SiteRecord,
)
from ..core.fusion import ConfirmRecord, FusionRecord, ReplayRecord, StepRecord, VariantRecord
from ..core.header import Env, LoadSummary, RunHeader, TimeSpent
from ..core.results import Results
from ..core.spec import parse_experiment
from ..core.typed import from_mapping
from . import stats
from .fusions import FUSION_OP, FusionEstimate, VariantEstimate, estimates, variant_estimates
from .opstats import VariantSummary, summarize_ops
from .reference import matches_size

SIZE_ORDER = ("E2B", "E4B", "26B", "31B")


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
    runs: dict[str, RunHeader]  # every run header, by run id
    loads: list[LoadSummary]  # what else ran on the machine while each run measured
    times: list[TimeSpent]  # where each run's time went (runs from before 2026-12-04: none)
    # per run x op x shape x variant statistics (analysis.opstats)
    op_summaries: list[VariantSummary]
    # "no change" means within ± this (the experiments' margin_pct)
    margin_pct: float = stats.DEFAULT_MARGIN_PCT
    # which kernels ran (kind "kernel"), the build under test's
    kernels: list[KernelRecord] = dataclasses.field(default_factory=list)
    # the names an mlx-lm model's ops were switched at (fusebench.models.switched), the build under
    # test's
    sites: list[SiteRecord] = dataclasses.field(default_factory=list)
    # every build's trials, warmups included, when a run measured two builds (run --against); else
    # empty
    build_trials: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    # why a run's stored experiment was left unread (today's parser rejects it): its trials still
    # report
    unread_experiments: list[str] = dataclasses.field(default_factory=list)
    # `fusebench fusions`: each model's chains, ranked, and how its step's replay went
    fusions: list[FusionEstimate] = dataclasses.field(default_factory=list)
    replays: list[ReplayRecord] = dataclasses.field(default_factory=list)
    fusion_variants: list[VariantEstimate] = dataclasses.field(default_factory=list)

    @property
    def has_trials(self) -> bool:
        """Whether there is anything for the trial sections (an ops-only file has none)."""
        return not (self.timed.empty and self.closed.empty)

    def run_env(self, run_id: str | None) -> Env:
        run = self.runs.get(run_id or "")
        return run.env if run else Env()

    def envs(self, machine: str) -> list[Env]:
        """The environment of each run on a machine (at least one: a machine no run header names
        reads as "?")."""
        return [run.env for run in self.runs.values() if run.machine == machine] or [Env()]


def current_build(frame: pd.DataFrame) -> pd.DataFrame:
    """The records of the build under test; a run of two builds (run --against) holds the
    reference's too."""
    if frame.empty or Column.BUILD not in frame:
        return frame
    return frame[frame[Column.BUILD].fillna(CURRENT_BUILD) == CURRENT_BUILD]


def build_study(results: Results) -> Study:
    all_trials = results.frame("trial")
    trials = current_build(all_trials)
    op_records = results.frame("op")
    # An ops run's header stores the experiment it took its shapes from; its variants and
    # comparisons were not run.
    op_runs = set(op_records[Column.RUN_ID]) if not op_records.empty else set()
    unread: list[str] = []
    runs = results.headers
    experiments = [
        stored_experiment(run, unread) for run in runs.values() if run.run_id not in op_runs
    ]
    declared = {
        name: assignment for exp in experiments if exp for name, assignment in exp.variants.items()
    }
    seen = list(trials[Column.VARIANT]) if not trials.empty else []
    variants = list(dict.fromkeys([*declared, *seen]))
    ops = {name: dict(assignment) for name, assignment in declared.items()}
    if not trials.empty and Column.OPS in trials:
        # The trial's ops are the full assignment (the YAML may omit ops left at their default).
        ops.update(
            {
                v: o
                for v, o in zip(trials[Column.VARIANT], trials[Column.OPS], strict=True)
                if isinstance(o, dict)
            }
        )
    closed = pd.concat([results.frame("skip"), results.frame("error")], ignore_index=True)
    timed = stats.timed_trials(trials)
    names = list(dict.fromkeys(run.experiment.name for run in runs.values() if run.experiment))
    return Study(
        name="+".join(n for n in names if n) or "results",
        results=results,
        trials=trials,
        timed=timed,
        closed=closed,
        correctness=current_build(results.frame("correctness")),
        depth=current_build(results.frame("depth")),
        variants=variants,
        ops=ops,
        planned=list(
            dict.fromkeys(
                (c.baseline, c.new) for exp in experiments if exp for c in exp.comparisons
            )
        ),
        machines=list(
            dict.fromkeys(
                m for f in (timed, closed, op_records) if not f.empty for m in f[Column.MACHINE]
            )
        ),
        runs=runs,
        loads=results.loads(),
        times=results.time_spent(),
        op_summaries=summarize_ops(r for r in results.op_records() if r.op != FUSION_OP),
        margin_pct=max(
            (exp.margin_pct for exp in experiments if exp), default=stats.DEFAULT_MARGIN_PCT
        ),
        kernels=[k for k in results.kernel_records() if k.build == CURRENT_BUILD],
        sites=[s for s in results.site_records() if s.build == CURRENT_BUILD],
        build_trials=all_trials if len(all_trials) != len(trials) else pd.DataFrame(),
        unread_experiments=unread,
        fusions=fusion_estimates(results),
        replays=[from_mapping(ReplayRecord, r) for r in results.of_kind(ReplayRecord.KIND)],
        fusion_variants=variant_estimates(
            [from_mapping(VariantRecord, r) for r in results.of_kind(VariantRecord.KIND)],
            [from_mapping(StepRecord, r) for r in results.of_kind(StepRecord.KIND)],
        ),
    )


def fusion_estimates(results: Results) -> list[FusionEstimate]:
    """`fusebench fusions` records read back: every model's chains with their expected Δ."""
    samples = [r for r in results.op_records() if r.op == FUSION_OP]
    return estimates(
        [from_mapping(FusionRecord, r) for r in results.of_kind(FusionRecord.KIND)],
        samples,
        [from_mapping(StepRecord, r) for r in results.of_kind(StepRecord.KIND)],
        summarize_ops(samples),
        [from_mapping(ConfirmRecord, r) for r in results.of_kind(ConfirmRecord.KIND)],
    )


def stored_experiment(run: RunHeader, unread: list[str]) -> Experiment | None:
    """The experiment a run header stores, read by the one spec parser (none for a header without
    one).

    An experiment that today's parser rejects (written for an older schema) is left out, its error
    added to `unread`: the trials carry their variants' ops, so the run still reports, with the
    first variant against each other one in place of its declared comparisons."""
    experiment = run.experiment
    if not experiment or not experiment.content:
        return None
    where = f"{run.run_id} (run header: {experiment.file or 'experiment'})"
    try:
        return parse_experiment(experiment.content, where, stored=True)
    except SpecError as err:
        unread.append(
            f"stored experiment not read by this fusebench ({err}): its comparisons, margin and "
            "declared variants are not used"
        )
        return None


class ComparisonError(UserError):
    """A comparison naming a variant that the results do not hold."""


def resolve_comparisons(
    requested: Sequence[tuple[str, str]], study: Study
) -> list[tuple[str, str]]:
    """The requested (baseline, new) pairs if any, else the experiments' comparisons, else the first
    variant against each other one."""
    if requested:
        pairs = list(requested)
        for pair in pairs:
            unknown = [name for name in pair if name not in study.variants]
            if unknown:
                raise ComparisonError(
                    f"--compare {pair[0]}:{pair[1]}: no variant {unknown[0]!r} in the results; "
                    "variants: "
                    f"{', '.join(study.variants) or 'none (these results hold no trials)'}"
                )
        return pairs
    if study.planned:
        return study.planned
    if not study.variants:
        return []
    first, *others = study.variants
    return [(first, other) for other in others]


def size_rank(label: str) -> int:
    """E2B, E4B, 26B, 31B first (a truncated "E2B (2/35 layers)" counts as E2B), then everything
    else."""
    return next(
        (i for i, size in enumerate(SIZE_ORDER) if matches_size(label, size)), len(SIZE_ORDER)
    )


def ordered_cells(frames: Sequence[pd.DataFrame]) -> list[tuple[str, str]]:
    """The (model_key, size) of every cell in the frames, in size order, then first appearance."""
    cells = (
        cell
        for frame in frames
        if not frame.empty
        for cell in zip(frame[Column.MODEL_KEY], frame[Column.SIZE], strict=True)
    )
    return size_order(cells)


def size_order(cells: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(model_key, size) pairs once each, in size order, then first appearance."""
    seen: dict[tuple[str, str], int] = {}
    for cell in cells:
        seen.setdefault(cell, len(seen))
    return sorted(seen, key=lambda cell: (size_rank(cell[1]), seen[cell]))


def cell_labels(cells: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The size label, unless two models share it (say float32 and bfloat16 E2B): then the model key
    is added."""
    counts = Counter(size for _, size in cells)
    return {(key, size): size if counts[size] == 1 else f"{size} · {key}" for key, size in cells}


def ordered_workloads(frames: Sequence[pd.DataFrame]) -> list[str]:
    """The workloads in the frames, by prompt, gen and batch size."""
    present = [
        f[[Column.WORKLOAD, Column.PROMPT_TOKENS, Column.GEN_TOKENS, Column.BATCH]]
        for f in frames
        if not f.empty
    ]
    if not present:
        return []
    rows = pd.concat(present)
    rows = rows.drop_duplicates("workload").sort_values(
        ["prompt_tokens", "gen_tokens", "batch"], kind="stable"
    )
    return list(rows[Column.WORKLOAD])


def on(frame: pd.DataFrame, machine: str, workload: str | None = None) -> pd.DataFrame:
    if frame.empty:
        return frame
    keep = frame[Column.MACHINE] == machine
    if workload is not None:
        keep &= frame[Column.WORKLOAD] == workload
    return frame[keep]


def compare_scope(
    study: Study,
    machine: str,
    workload: str,
    pair: tuple[str, str],
    *,
    family: Sequence[tuple[str, str]],
) -> list[stats.ComparisonRow]:
    """One comparison's rows of one machine and workload. The Holm family is the table the run
    shows: every comparison in `family` (the report's comparisons) at that machine and workload."""
    return stats.compare_table(
        on(study.timed, machine, workload),
        [*family, pair],
        stats.METRICS,
        margin_pct=study.margin_pct,
    )[pair]


@dataclass(frozen=True)
class CorrectnessCheck:
    """One variant's logits against the reference variant's on one cell (a `correctness` record): it
    passed when max |Δlogit| <= atol and every decisive greedy token agreed."""

    machine: str
    model_key: str
    size: str
    workload: str
    variant: str
    reference: str
    max_abs_err: float
    max_rel_err: float
    tokens_agree: int
    tokens_checked: int
    atol: float
    passed: bool


def correctness_checks(records: pd.DataFrame) -> list[CorrectnessCheck]:
    """The correctness records of a frame (Results.frame("correctness")), in its order; a field the
    records lack (the gate reads files the report's field check has not seen) reads NaN."""
    if records.empty:
        return []
    rows = records.reindex(columns=[Column.MACHINE, *REQUIRED_FIELDS[CorrectnessRecord.KIND]])
    return [
        CorrectnessCheck(
            r.machine,
            r.model_key,
            r.size,
            r.workload,
            r.variant,
            r.reference,
            float(r.max_abs_err),
            float(r.max_rel_err),
            int(r.tokens_agree),
            int(r.tokens_checked),
            float(r.atol),
            bool(r.passed),
        )
        for r in rows.itertuples()
    ]


def failed_correctness(
    study: Study, machine: str, workload: str
) -> dict[tuple[str, str], CorrectnessCheck]:
    """(model_key, variant) -> the failing correctness check, for one machine and workload."""
    return {
        (c.model_key, c.variant): c
        for c in correctness_checks(on(study.correctness, machine, workload))
        if not c.passed
    }


@dataclass(frozen=True)
class CellInfo:
    """What describes a cell beside its measurements (core.fileformat.CELL_FIELDS)."""

    model_key: str
    size: str
    workload: str
    prompt_tokens: int
    gen_tokens: int
    batch: int
    dtype: str  # "?" where the records lack it
    quantize: str | None


def cell_infos(frames: Sequence[pd.DataFrame]) -> list[CellInfo]:
    """Each cell of the frames once (as its first record describes it), in the frames' order."""
    present = [f for f in frames if not f.empty]
    if not present:
        return []
    rows = (
        pd.concat(present)
        .drop_duplicates([Column.MODEL_KEY, Column.SIZE, Column.WORKLOAD])
        .reindex(columns=list(CELL_FIELDS))
    )
    return [
        CellInfo(
            r.model_key,
            r.size,
            r.workload,
            r.prompt_tokens,
            r.gen_tokens,
            r.batch,
            "?" if pd.isna(r.dtype) else str(r.dtype),
            r.quantize if isinstance(r.quantize, str) else None,
        )
        for r in rows.itertuples()
    ]


def closed_reason(closed: pd.DataFrame, model_key: str) -> str | None:
    """ "skipped: ..." / "error: ..." for a cell, or None."""
    if closed.empty:
        return None
    rows = closed[closed[Column.MODEL_KEY] == model_key]
    reasons = [
        f"{'skipped' if r['kind'] == 'skip' else 'error'}: {r['reason']}"
        for r in rows.to_dict("records")
    ]
    return "; ".join(dict.fromkeys(reasons)) or None


def ops_changes(study: Study, baseline: str, new: str) -> dict[str, tuple[str, str]]:
    """op -> (baseline implementation, new implementation), for the ops the two variants set
    differently."""
    a, b = study.ops.get(baseline, {}), study.ops.get(new, {})
    ops = dict.fromkeys([*a, *b])
    return {
        op: (a.get(op, "default"), b.get(op, "default")) for op in ops if a.get(op) != b.get(op)
    }


def describe_changes(changes: dict[str, tuple[str, str]]) -> str:
    return ", ".join(f"{op}: {a} → {b}" for op, (a, b) in changes.items())


def ops_difference(study: Study, baseline: str, new: str) -> str:
    changes = ops_changes(study, baseline, new)
    if baseline == new or not changes:
        return "none: both sides run the same ops (an A/A test of the noise)"
    return describe_changes(changes)


def variants_in(study: Study, frame: pd.DataFrame) -> list[str]:
    present = set(frame[Column.VARIANT])
    return [v for v in study.variants if v in present]


def trial_medians(timed: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Per machine x cell x variant, the median of each column (None counts as missing)."""
    keys = ["machine", "model_key", "workload", "variant"]
    values = timed[list(columns)].apply(pd.to_numeric, errors="coerce")
    return values.groupby([timed[k] for k in keys]).median().reset_index()


def optional_medians(timed: pd.DataFrame, column: str) -> dict[tuple[str, str], float]:
    """(model_key, variant) -> the median of an optional trial column, for one machine and
    workload's trials; only the pairs whose trials carry it (records from before the column existed
    lack it)."""
    if timed.empty or column not in timed:
        return {}
    medians = trial_medians(timed, [column]).dropna(subset=[column])
    return {
        (key, variant): float(value)
        for key, variant, value in zip(
            medians[Column.MODEL_KEY], medians[Column.VARIANT], medians[column], strict=True
        )
    }


def prompt_sweeps(timed: pd.DataFrame) -> list[tuple[int, int, pd.DataFrame]]:
    """(gen_tokens, batch, trials) for each gen and batch setting at which some model was measured
    at several prompt lengths: the trials of those models."""
    sweeps = []
    for (gen, batch), rows in timed.groupby([Column.GEN_TOKENS, Column.BATCH], sort=True):
        swept = rows[rows.groupby(Column.MODEL_KEY)[Column.PROMPT_TOKENS].transform("nunique") > 1]
        if not swept.empty:
            sweeps.append((int(gen), int(batch), swept))
    return sweeps


@dataclass(frozen=True)
class DepthSample:
    """Decode tok/s at one KV depth, in one round (a `depth` record)."""

    model_key: str
    size: str
    variant: str
    depth: int
    round: int
    gen_tps: float


@dataclass(frozen=True)
class DepthGroup:
    """A machine's depth records that share a batch and a number of decode steps timed at each depth
    (a depth record's gen_tokens): one table and one plot."""

    batch: int
    steps: int
    cells: list[tuple[str, str]]  # ordered_cells
    variants: list[str]  # in the study's order
    samples: list[DepthSample]

    def depths(self, model_key: str) -> list[int]:
        return sorted({s.depth for s in self.samples if s.model_key == model_key})

    def median(self, model_key: str, depth: int, variant: str) -> float:
        values = [
            s.gen_tps
            for s in self.samples
            if (s.model_key, s.depth, s.variant) == (model_key, depth, variant)
        ]
        return float(np.median(values)) if values else math.nan

    @property
    def rounds(self) -> int:
        """The most rounds any model and variant ran."""
        rounds: dict[tuple[str, str], set[int]] = {}
        for s in self.samples:
            rounds.setdefault((s.model_key, s.variant), set()).add(s.round)
        return max(map(len, rounds.values()))


def depth_groups(study: Study, machine: str) -> list[DepthGroup]:
    depth = on(study.depth, machine)
    if depth.empty:
        return []
    return [
        DepthGroup(
            int(batch),
            int(steps),
            ordered_cells([rows]),
            variants_in(study, rows),
            [
                DepthSample(
                    r.model_key, r.size, r.variant, int(r.depth), int(r.round), float(r.gen_tps)
                )
                for r in rows.itertuples()
            ],
        )
        for (batch, steps), rows in depth.groupby([Column.BATCH, Column.GEN_TOKENS], sort=True)
    ]


@dataclass(frozen=True)
class AchievedRates:
    """A cell and variant's median achieved rates over its timed trials and their share of the
    machine's peak (NaN where no trial has one)."""

    prefill_tflops: float
    prefill_pct_of_peak: float
    gen_gbps: float
    gen_pct_of_peak: float
    # the metrics some trial achieved above the peak (the peak was underestimated)
    above_peak: frozenset[str]


def has_roofline(timed: pd.DataFrame) -> bool:
    return (
        not timed.empty
        and Column.PREFILL_TFLOPS in timed
        and not timed[Column.PREFILL_TFLOPS].isna().all()
    )


def rooflines(timed: pd.DataFrame) -> dict[tuple[str, str], AchievedRates]:
    """(model_key, variant) -> its AchievedRates, for one machine and workload's timed trials."""
    # Trials from before the roofline (results format 1) lack its fields: their medians read NaN.
    medians = trial_medians(
        timed.assign(**{f: math.nan for f in ROOFLINE_FIELDS if f not in timed}), ROOFLINE_FIELDS
    )
    above: dict[tuple[str, str], set[str]] = {}
    if Column.ABOVE_PEAK in timed:
        for key, variant, metrics in zip(
            timed[Column.MODEL_KEY], timed[Column.VARIANT], timed[Column.ABOVE_PEAK], strict=True
        ):
            if isinstance(metrics, list):
                above.setdefault((key, variant), set()).update(metrics)
    return {
        (r.model_key, r.variant): AchievedRates(
            r.prefill_tflops,
            r.prefill_pct_of_peak,
            r.gen_gbps,
            r.gen_pct_of_peak,
            frozenset(above.get((r.model_key, r.variant), ())),
        )
        for r in medians.itertuples()
    }


@dataclass(frozen=True)
class ColdStart:
    """A variant's first, cold call on a cell (the trial that carries compile_s) against its steady
    trials."""

    machine: str
    cell: str
    size: str
    workload: str
    variant: str
    compile_s: float
    steady_s: float  # the median timed trial's prefill + gen; NaN without any
    timed: bool  # the cold call ran as a timed round (no warmup absorbed it)


def cold_starts(study: Study) -> list[ColdStart]:
    trials = study.trials
    if trials.empty or not {"compile_s", "prefill_s", "gen_s"} <= set(trials.columns):
        return []
    steady = (
        study.timed.assign(
            total=study.timed[Column.PREFILL_S] + study.timed[Column.GEN_S].fillna(0.0)
        )
        .groupby([Column.MACHINE, Column.CELL, Column.VARIANT])["total"]
        .median()
    )
    return [
        ColdStart(
            r.machine,
            r.cell,
            r.size,
            r.workload,
            r.variant,
            float(r.compile_s),
            float(steady.get((r.machine, r.cell, r.variant), math.nan)),
            not r.warmup,
        )
        for r in trials[trials[Column.COMPILE_S].notna()].itertuples()
    ]
