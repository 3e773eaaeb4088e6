"""The experiment, parsed: the types a run carries from the file to its workers and results
(`Experiment`, its `Cell`s, `ModelSpec`, `Workload`, `Comparison`, `Correctness`, `Expectation`),
its stopping rules and schedules, and the defaults its keys take. core.spec reads a file into
them; core.flags makes and changes one from the command line.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache
from pathlib import Path

from fusebench.models.config import load_preset, min_layers

from .errors import SpecError

NO_QUANTIZE = "none"

DEFAULT_DTYPE = "float32"
AUTO = "auto"
# trials: plan gives a cell none or at least this many: a t interval on fewer heavy-tailed rounds is
# slightly liberal (docs/statistics.md)
MIN_PLANNED_ROUNDS = 8
DEFAULT_MAX_ROUNDS = 30
# trials: auto never stops before this many rounds: the first verdict should not rest on a handful
# of rounds, and at a table's Bonferroni level (α/8) the confidence sequence is unbounded below 6
# (analysis.sequential).
MIN_AUTO_ROUNDS = 6
DEFAULT_PREFILL_STEP_SIZE = 2048
DEFAULT_MARGIN_PCT = 2.0


class Trials(StrEnum):
    """The stopping rule, the experiment's `trials:`, under this one name wherever it goes (the
    run's header records it as `trials`): how a cell's timed rounds are decided, and so which
    interval is exact for them (analysis.inference).

    FIXED (`trials: N`): N rounds. BUDGET: as many as the run's budget_s holds at the warm-up's
    pace, fixed before the first timed round. PLAN: the rounds that maximise the rows the budget is
    expected to decide, from the cells' measured costs and spreads (analysis.planner), fixed before
    each cell's first. AUTO: rounds added until every row is decided, none is in reach, or the
    budget is spent (analysis.stopping): the only rule whose round count follows the data, so its
    intervals are confidence sequences."""

    FIXED = "fixed"
    AUTO = "auto"
    BUDGET = "budget"
    PLAN = "plan"

    @property
    def adaptive(self) -> bool:
        """Whether a cell's round count follows its data (the fixed-n interval would not hold)."""
        return self is Trials.AUTO


# The rules that spend a budget, and the keys only they take (max_rounds, budget_s, precision).
BUDGETED = (Trials.AUTO, Trials.BUDGET, Trials.PLAN)


class Schedule(StrEnum):
    """How a round's trials are laid out in time (the experiment's `schedule`; each but `auto` a
    measure.run.schedules.RoundSchedule)."""

    AUTO = "auto"  # measured on the machine (measure.run.pilot)
    DUET = "duet"  # a pair's two trials at the same moment, each on its own core
    SEQUENTIAL = "sequential"  # one trial after another, in ABBA order


@cache
def preset_facts(name: str) -> tuple[str, int, int]:
    """The preset's size label, its layers, and the fewest it can be truncated to."""
    config = load_preset(name)
    return str(config.get("size", name)), int(config["num_hidden_layers"]), min_layers(config)


@dataclass(frozen=True)
class ModelSpec:
    """A model to run, the one type for it from the experiment file to the worker: a bundled preset
    (all its layers, or the first `layers`), a checkpoint directory (`path`) or a Hugging Face repo
    (`repo`, whose snapshot folder becomes its `path`), exactly one of them, at a dtype and
    quantization. `size` is the label tables show; a worker's job carries everything but it and
    the repo (see measure.job)."""

    preset: str | None
    path: str | None
    size: str
    layers: int | None
    dtype: str
    quantize: str | None
    # fusebench's Gemma 4 decoder or mlx-lm's classes (fusebench.models.config.IMPLEMENTATIONS);
    # None: the model's own (fusebench's for Gemma 4, mlx-lm's for the rest)
    implementation: str | None = None
    # A Hugging Face repo id as written (`org/name[@revision]`); once measure.hub has found it,
    # `path` is its snapshot folder and `commit` the snapshot's commit hash.
    repo: str | None = None
    commit: str | None = None

    def __post_init__(self) -> None:
        if self.repo is None and (self.preset is None) == (self.path is None):
            raise ValueError(
                "a model is a preset, a path or a repo, exactly one (preset "
                f"{self.preset!r}, path {self.path!r})"
            )

    @property
    def source(self) -> str:
        """What the model is built from, as fusebench.models.loading.load_model takes it: the
        preset's name or the path (a repo's snapshot folder once found; the repo id before)."""
        if self.preset is not None:
            return self.preset
        return str(self.path) if self.path is not None else str(self.repo)

    @property
    def key(self) -> str:
        """Stable identity across runs: the label is left out, since renaming a model does not
        change it; a repo's is its id, wherever its cache lies."""
        layers = "all" if self.layers is None else str(self.layers)
        ident = self.repo or self.source
        key = f"{ident}:layers={layers}:{self.dtype}:{self.quantize or NO_QUANTIZE}"
        return key + (f":{self.implementation}" if self.implementation else "")

    @property
    def label(self) -> str:
        """`E2B`, or `E2B (2/35 layers)` for a truncated preset: never passed off as the real
        model."""
        notes = [self.implementation] if self.implementation else []
        if self.preset and self.layers:
            full = preset_facts(self.preset)[1]
            if self.layers != full:
                notes.append(f"{self.layers}/{full} layers")
        return f"{self.size} ({', '.join(notes)})" if notes else self.size


def model_spec(
    *,
    preset: str | None = None,
    path: str | None = None,
    size: str | None = None,
    layers: int | None = None,
    dtype: str = DEFAULT_DTYPE,
    quantize: str | None = None,
    implementation: str | None = None,
    repo: str | None = None,
) -> ModelSpec:
    """A ModelSpec, labelled `size` or by default the preset's size, the repo's name, or the
    checkpoint directory's name."""
    if size is None:
        # abspath, not resolve: the label should be the name the user wrote, not a symlink's target.
        if preset is not None:
            size = preset_facts(preset)[0]
        elif repo is not None:
            size = repo.partition("@")[0].split("/")[-1]
        else:
            size = Path(os.path.abspath(str(path))).name
    return ModelSpec(preset, path, size, layers, dtype, quantize, implementation, repo)


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int
    gen_tokens: int
    batch: int

    @property
    def label(self) -> str:
        return f"pp{self.prompt_tokens} tg{self.gen_tokens} b{self.batch}"


@dataclass(frozen=True)
class Comparison:
    baseline: str
    new: str


@dataclass(frozen=True)
class Expectation:
    kind: str  # "slowdown" or "all_correct"
    comparison: Comparison | None = None
    metric: str | None = None
    max_slowdown_pct: float | None = None


@dataclass(frozen=True)
class Correctness:
    reference: str
    atol: float | None  # None: the tolerance that suits each model's dtype
    tokens: int


@dataclass(frozen=True)
class Cell:
    """One worker job: a model at one workload, with every variant run interleaved inside it."""

    model: ModelSpec
    workload: Workload

    @property
    def key(self) -> str:
        return f"{self.model.key}|{self.workload.label}"


@dataclass(frozen=True)
class Experiment:
    """A parsed experiment file: the values of its keys (`KEYS`), and the file they came from."""

    name: str
    description: str
    file: str
    content: str
    sha256: str
    models: tuple[ModelSpec, ...]
    variants: dict[str, dict[str, str]]
    comparisons: tuple[Comparison, ...]
    workloads: tuple[Workload, ...]
    depths: tuple[int, ...]
    shares: int  # rounds of the op-share timing; 0: none
    trials: Trials  # the stopping rule
    rounds: int  # timed rounds a cell gets: exactly these (trials: N), or at most (max_rounds)
    warmup: int
    prefill_step_size: int
    seed: int
    timeout_s: float
    correctness: Correctness
    expect: tuple[Expectation, ...]
    # Python files that register more op variants, as absolute paths (written relative to the
    # experiment file).
    plugins: tuple[str, ...]
    margin_pct: float  # "no change" means the whole CI lies within ± this
    target_pct: float | None  # trials: auto, optional: each decided row narrowed to ± this
    budget_s: float | None  # the whole run's seconds: trials: auto (optional), budget, plan
    # BLAS threads on CPU backends; None: auto (measured on the machine: measure.machine.threads)
    threads: int | None
    # with a reference build, rounds a pair of workers runs before a fresh pair; 0: one; None
    # (auto): chosen by the cell where its rounds are fixed from the budget (analysis.allocation)
    worker_rounds: int | None
    schedule: Schedule
    # variant -> op -> (line of the op's name, line of its implementation), so that op names checked
    # later, once the registry and any plugins are loaded, are still reported at their place in the
    # file.
    variant_lines: dict[str, dict[str, tuple[int, int]]] = dataclasses.field(
        compare=False, repr=False
    )

    def rounds_text(self) -> str:
        """What the experiment's stopping rule (`trials:`) will do, in words."""
        match self.trials:
            case Trials.FIXED:
                return f"{self.rounds} timed rounds"
            case Trials.BUDGET:
                return (
                    f"as many rounds as the whole run's {self.budget_s:g} s holds, at most "
                    f"{self.rounds}, fixed from the warm-up's pace before the first timed round "
                    "(the fixed-n interval)"
                )
            case Trials.PLAN:
                return (
                    f"each size's rounds the fewest expected to decide its rows, the whole run "
                    f"within {self.budget_s:g} s (none, or {MIN_PLANNED_ROUNDS} to {self.rounds}), "
                    "fixed before its first timed round (the fixed-n interval)"
                )
        target = f", each interval within ±{self.target_pct:g}%" if self.target_pct else ""
        budget = f", the whole run within {self.budget_s:g} s" if self.budget_s else ""
        return (
            "rounds until every row is decided (faster, slower, or no change within "
            f"±{self.margin_pct:g}%{target}; at least {MIN_AUTO_ROUNDS}, "
            f"at most {self.rounds}{budget})"
        )

    def cells(self) -> list[Cell]:
        return [Cell(model, workload) for model in self.models for workload in self.workloads]

    def trial_count(self, cells: int | None = None, builds: int = 1) -> int:
        """Trials of `cells` cells (default: all of them) at most, warm-ups included, each
        build's."""
        count = len(self.cells()) if cells is None else cells
        return count * builds * len(self.variants) * (self.rounds + self.warmup)


def resolve_ops(exp: Experiment, ops: Mapping[str, tuple[Sequence[str], str]]) -> Experiment:
    """The experiment with every variant's op names checked and its omitted ops at their default.

    `ops` maps each op to (its implementations, its default), as the registry holds them once
    plugins are loaded; the spec itself stays free of the model code. A name the registry lacks is a
    SpecError at its line.
    """
    completed = {}
    for name, assignment in exp.variants.items():
        for op, impl in assignment.items():
            op_line, impl_line = exp.variant_lines.get(name, {}).get(op, (0, 0))
            where = f"variants.{name}.{op}"
            if op not in ops:
                raise SpecError(
                    exp.file,
                    op_line,
                    where,
                    f"unknown op {op!r}; choose from {', '.join(ops)}",
                )
            if impl not in ops[op][0]:
                choices = ", ".join(ops[op][0])
                raise SpecError(
                    exp.file,
                    impl_line,
                    where,
                    f"unknown {op} variant {impl!r}; choose from {choices}",
                )
        completed[name] = {op: assignment.get(op, default) for op, (_, default) in ops.items()}
    return replace(exp, variants=completed)


def fresh_pairs_in(rounds: int, every: int) -> int:
    """The fresh worker pairs a cell of several workers starts during its first `rounds` timed
    rounds with a fresh pair every `every` (0: none): one before round every + 1, 2 · every + 1,
    ..."""
    return (rounds - 1) // every if every > 0 and rounds > 0 else 0
