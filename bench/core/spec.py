"""Experiment files: parse and validate the YAML, and expand it into the matrix of cells a run
executes.

Every error is a `SpecError` that names the file, the 1-based line, the field and what would be
valid, so a typo in a long sweep is found before any model is built, not an hour into the run.

The file's top-level keys are declared once, in `KEYS`: each with its line in the schema, its reader
and its default. `TOP_KEYS`, the schema text (`schema_text()`, which `fusebench run --help` prints)
and the parser all derive from that table. Unknown keys at any level are errors; an optional key
left empty, `key:`, takes its default.

Validation works on the `yaml.compose` node tree rather than on loaded Python values, because only
the nodes know their line numbers, and only they can tell a duplicate key (which `yaml.safe_load`
silently drops) or the bool `yes` from the int `1`.

Why one long module: it is one thing, the experiment schema: the `KEYS` table, each key's reader
on the node tree and the rules between keys (a budget a rule needs, the keys only some rules
take). Split, a key's reader would sit apart from its line in the schema and the rules that read it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cache, partial
from pathlib import Path
from typing import NoReturn, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fusebench.models.config import (
    DTYPES,
    IMPLEMENTATIONS,
    QUANTIZE_MODES,
    load_preset,
    min_layers,
    preset_names,
)

from .errors import UserError
from .fileformat import METRICS

T = TypeVar("T")

_NAME = re.compile(r"[A-Za-z0-9._-]+")
_TAG = "tag:yaml.org,2002:"
_NULL, _BOOL, _INT, _FLOAT, _STR = (_TAG + kind for kind in ("null", "bool", "int", "float", "str"))

MODEL_KEYS = ("preset", "path", "repo", "size", "layers", "dtype", "quantize", "implementation")
# A Hugging Face repo id, `org/name` or `org/name@revision` (measure.hub resolves it).
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?")
WORKLOAD_KEYS = ("prompt_tokens", "gen_tokens", "batch")
COMPARISON_KEYS = ("baseline", "new")
CORRECTNESS_KEYS = ("reference", "atol", "tokens")
SLOWDOWN_KEYS = ("comparison", "metric", "max_slowdown_pct")
EXPECT_KEYS = (*SLOWDOWN_KEYS, "all_correct")
NO_QUANTIZE = "none"

DEFAULT_DTYPE = "float32"
DEFAULT_BATCH = 1
DEFAULT_TRIALS = 5
AUTO = "auto"
# trials: plan gives a cell none or at least this many: a t interval on fewer heavy-tailed rounds is
# slightly liberal (docs/statistics.md)
MIN_PLANNED_ROUNDS = 8
DEFAULT_MAX_ROUNDS = 30
# trials: auto never stops before this many rounds: the first verdict should not rest on a handful
# of rounds, and at a table's Bonferroni level (α/8) the confidence sequence is unbounded below 6
# (analysis.sequential).
MIN_AUTO_ROUNDS = 6
DEFAULT_WARMUP = 1
# run --against: each pair of worker processes runs a pilot's worth of rounds, then a fresh pair
# takes over, so the interval sees the spread between processes (analysis.inference, "Between
# processes").
DEFAULT_WORKER_ROUNDS = MIN_AUTO_ROUNDS
DEFAULT_PREFILL_STEP_SIZE = 2048
DEFAULT_SEED = 0
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_CHECK_TOKENS = 8
# Rounds of the op-share timing (measure.ops.shares): 5 give a t interval of the expected Δ at ~10 s
# per cell here.
DEFAULT_SHARE_ROUNDS = 5
DEFAULT_MARGIN_PCT = 2.0

SHARD_FORM = "I/N with 1 <= I <= N"


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


# The rules written by name (`trials: plan`), not as a number of rounds.
NAMED_RULES = tuple(rule for rule in Trials if rule is not Trials.FIXED)
# The rules that spend a budget, and the keys only they take (max_rounds, budget_s, precision).
BUDGETED = (Trials.AUTO, Trials.BUDGET, Trials.PLAN)


class Schedule(StrEnum):
    """How a round's trials are laid out in time (the experiment's `schedule`; each but `auto` a
    measure.run.schedules.RoundSchedule)."""

    AUTO = "auto"  # measured on the machine (measure.run.pilot)
    DUET = "duet"  # a pair's two trials at the same moment, each on its own core
    SEQUENTIAL = "sequential"  # one trial after another, in ABBA order


class SpecError(UserError):
    """An experiment file that cannot be run. `str(err)` is one line:
    `FILE:LINE: FIELD: MESSAGE`."""

    def __init__(self, file: str, line: int, field: str, message: str) -> None:
        self.file, self.line, self.field = file, line, field
        self.message = " ".join(message.split())  # one line, whatever the YAML library produced
        super().__init__(f"{file}:{line}: {field}: {self.message}")

    def __reduce__(self) -> tuple[type[SpecError], tuple[str, int, str, str]]:
        # Rebuilt from its parts, so the error survives the trip back from a worker process.
        return SpecError, (self.file, self.line, self.field, self.message)


# --- the parsed experiment -----------------------------------------------------------------------


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
            full = _preset_facts(self.preset)[1]
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
            size = _preset_facts(preset)[0]
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
    # with a reference build (or a duet), rounds a pair of workers runs before a fresh pair; 0: one
    worker_rounds: int
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
            f"±{self.margin_pct:g}%{target}; a pilot of {MIN_AUTO_ROUNDS}, "
            f"at most {self.rounds}{budget})"
        )

    def fresh_pairs(self, rounds: int) -> int:
        """The fresh worker pairs a cell of several workers starts during its first `rounds` timed
        rounds: one before round worker_rounds + 1, 2 · worker_rounds + 1, ..."""
        every = self.worker_rounds
        return (rounds - 1) // every if every > 0 and rounds > 0 else 0

    def cells(self) -> list[Cell]:
        return [Cell(model, workload) for model in self.models for workload in self.workloads]

    def trial_count(self, cells: int | None = None, builds: int = 1) -> int:
        """Trials of `cells` cells (default: all of them) at most, warm-ups included, each
        build's."""
        count = len(self.cells()) if cells is None else cells
        return count * builds * len(self.variants) * (self.rounds + self.warmup)


# --- entry points --------------------------------------------------------------------------------


# The experiments that ship with fusebench: the checkout's experiments/, installed as
# bench/experiments.
SHIPPED_EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def shipped_experiments() -> dict[str, Path]:
    """The shipped experiments by name (the file's stem): `fusebench run ci` works from any
    folder."""
    return {path.stem: path for path in sorted(SHIPPED_EXPERIMENTS.glob("*.yaml"))}


def experiment_path(given: str | Path) -> Path:
    """The experiment file `given` names: a path to a file, or the name of a shipped experiment."""
    path = Path(given)
    if path.is_file():
        return path
    shipped = shipped_experiments()
    if os.sep not in str(given) and path.stem in shipped:
        found = shipped[path.stem].resolve()
        return found.relative_to(Path.cwd()) if found.is_relative_to(Path.cwd()) else found
    names = ", ".join(shipped)
    raise SpecError(
        str(given),
        0,
        "file",
        f"no such file, nor a shipped experiment of that name; give a path to "
        f"a YAML file or one of: {names} (fusebench run --list)",
    )


def load_experiment(path: str | Path) -> Experiment:
    path = experiment_path(path)
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise SpecError(file, 0, "file", f"cannot read: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise SpecError(
            file, line, "file", f"not UTF-8 text ({err.reason} at byte {err.start})"
        ) from None
    return _parse(text, file, hashlib.sha256(raw).hexdigest())


def parse_experiment(text: str, file: str = "<string>", *, stored: bool = False) -> Experiment:
    """`stored`: the text comes from a run header, maybe from another machine, so its checkpoint
    paths are not looked for here."""
    return _parse(
        text, file, hashlib.sha256(text.encode("utf-8")).hexdigest(), check_paths=not stored
    )


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
            where = _join(_join("variants", name), op)
            if op not in ops:
                raise SpecError(
                    exp.file,
                    op_line,
                    where,
                    f"unknown op {op!r}; choose from {_choices(list(ops))}",
                )
            if impl not in ops[op][0]:
                choices = _choices(list(ops[op][0]))
                raise SpecError(
                    exp.file,
                    impl_line,
                    where,
                    f"unknown {op} variant {impl!r}; choose from {choices}",
                )
        completed[name] = {op: assignment.get(op, default) for op, (_, default) in ops.items()}
    return replace(exp, variants=completed)


# What an experiment from `run --model ... --op ...` takes that an experiment file would spell out:
# rounds until decided, with a budget that suits one model (the pilot's first word comes within a
# minute or two of a 2-layer model on a slow 2-core VM).
FLAGS_BUDGET_S_PER_MODEL = 150
FLAGS_MARGIN_PCT = 5.0


def experiment_from_flags(
    models: Sequence[Mapping[str, object]],
    ops: Sequence[tuple[str, Sequence[str]]],
    prompt_tokens: int,
    gen_tokens: int,
) -> str:
    """The experiment file `run --model M --op OP=A,B ...` stands for, as YAML text. Several --op
    flags form a matrix: every combination of their values is a variant, the first values together
    the baseline, compared with each other variant. One --op names its variants by its values
    (`unfused`, `compiled`); several by op and value (`geglu-compiled_softcap-unfused`)."""
    combinations = list(itertools.product(*(values for _, values in ops)))
    names = [op for op, _ in ops]

    def variant_name(values: tuple[str, ...]) -> str:
        if len(values) == 1:
            return values[0]
        return "_".join(f"{op}-{value}" for op, value in zip(names, values, strict=True))

    variants = {
        variant_name(values): dict(zip(names, values, strict=True)) for values in combinations
    }
    return quick_experiment(models, variants, "-".join(names), prompt_tokens, gen_tokens)


def quick_experiment(
    models: Sequence[Mapping[str, object]],
    variants: Mapping[str, Mapping[str, str]],
    label: str,
    prompt_tokens: int,
    gen_tokens: int,
    *,
    plugins: Sequence[str] = (),
    description: str = "made by fusebench run from flags",
    budget_s: float | None = None,
) -> str:
    """An experiment that compares the first variant with each other one, with the rules a run
    from flags takes (rounds until decided; by default a budget that suits one model per model),
    as YAML."""
    baseline, *others = variants
    head = models[0]
    first = head.get("preset") or str(head.get("repo") or head.get("path")).split("/")[-1]
    document = {
        "name": re.sub(r"[^A-Za-z0-9._-]+", "-", f"{first}-{label}"),
        "description": description,
        "models": [dict(model) for model in models],
        **({"plugins": list(plugins)} if plugins else {}),
        "variants": {name: dict(ops) for name, ops in variants.items()},
        "comparisons": [[baseline, other] for other in others],
        "workloads": {"prompt_tokens": prompt_tokens, "gen_tokens": gen_tokens, "batch": 1},
        "trials": AUTO,
        "max_rounds": DEFAULT_MAX_ROUNDS * 2,
        "budget_s": budget_s or FLAGS_BUDGET_S_PER_MODEL * len(models),
        "margin_pct": FLAGS_MARGIN_PCT,
        "correctness": {"reference": baseline, "tokens": 2},
    }
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)


def with_trials(exp: Experiment, rounds: int) -> Experiment:
    """`run --trials N`: exactly N timed rounds per cell. Another rule is turned off: kept, it
    would take N for its max_rounds and might stop before N."""
    return replace(exp, trials=Trials.FIXED, rounds=rounds, target_pct=None, budget_s=None)


def with_budget(exp: Experiment, budget_s: float) -> Experiment:
    """`run --budget`: the experiment's budget_s replaced; only where a rule spends one."""
    if exp.trials not in BUDGETED:
        raise UserError(
            f"--budget: {exp.file} has trials: {exp.rounds} (rounds fixed in the file); a budget "
            f"needs trials: plan, {Trials.AUTO} or budget"
        )
    return replace(exp, budget_s=budget_s)


def select_models(
    exp: Experiment, names: Sequence[str] | None, option: str = "--only"
) -> Experiment:
    """Keep the models whose size label or preset is named (case-insensitive), e.g.
    `--only E2B,26b`."""
    if not names:
        return exp
    wanted = {name.lower() for name in names}
    known = {m.size.lower() for m in exp.models} | {(m.preset or "").lower() for m in exp.models}
    unknown = sorted(wanted - known)
    if unknown:
        choices = ", ".join(sorted({m.size for m in exp.models}))
        raise UserError(f"{option}: {', '.join(unknown)} not in {exp.file}; choose from {choices}")
    models = tuple(
        m for m in exp.models if m.size.lower() in wanted or (m.preset or "").lower() in wanted
    )
    return replace(exp, models=models)


def shard_cells(cells: list[Cell], index: int, count: int) -> list[Cell]:
    """Shard `index` of `count` (1-based). Round-robin, so each shard gets a mix of models and
    sizes."""
    _check_shard(index, count, f"{index}/{count}")
    return cells[index - 1 :: count]


def _check_shard(index: int, count: int, text: str) -> None:
    if not 1 <= index <= count:
        raise UserError(f"bad shard {text!r}: expected {SHARD_FORM}, e.g. 2/4")


# --- errors on nodes -----------------------------------------------------------------------------


class _Invalid(Exception):
    """Raised deep in validation, where the file name is not known; `_parse` turns it into a
    SpecError."""

    def __init__(self, line: int, field: str, message: str) -> None:
        super().__init__(message)
        self.line, self.field, self.message = line, field, message


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _fail(node: Node, field: str, message: str) -> NoReturn:
    raise _Invalid(_line(node), field, message)


def _join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def _choices(names: Sequence[str]) -> str:
    return ", ".join(names)


def _describe(node: Node) -> str:
    """What the user wrote, in words, for 'expected X, got Y' messages."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    value = node.value if len(node.value) <= 40 else node.value[:37] + "..."
    kinds = {
        _NULL: "nothing (null)",
        _BOOL: f"a boolean ({value})",
        _INT: f"an integer ({value})",
        _FLOAT: f"a float ({value})",
        _STR: f"a string ({value!r})",
    }
    return kinds.get(node.tag, f"a value tagged {node.tag}")


# --- node readers --------------------------------------------------------------------------------

_Items = dict[str, tuple[Node, Node]]  # key -> (key node, value node), in document order
_SCALARS = yaml.constructor.SafeConstructor()


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _NULL


def _mapping(node: Node, field: str, valid: Sequence[str] | None, what: str = "key") -> _Items:
    if not isinstance(node, MappingNode):
        _fail(node, field, f"expected a mapping, got {_describe(node)}")
    items: _Items = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, ScalarNode) or _is_null(key_node):
            _fail(
                key_node,
                field or "experiment",
                f"expected a name as {what}, got {_describe(key_node)}",
            )
        key = key_node.value
        if key in items:
            first = _line(items[key][0])
            _fail(
                key_node,
                _join(field, key),
                f"duplicate {what} {key!r} (first defined on line {first})",
            )
        if valid is not None and key not in valid:
            _fail(
                key_node, _join(field, key), f"unknown key {key!r}; valid keys: {_choices(valid)}"
            )
        items[key] = (key_node, value_node)
    return items


def _required(items: _Items, key: str, parent: Node, field: str) -> Node:
    if key not in items:
        _fail(parent, _join(field, key), "required key is missing")
    return items[key][1]


def _optional(items: _Items, key: str, field: str, read: Callable[[Node, str], T], default: T) -> T:
    """An absent key, or one left empty, takes its default."""
    if key not in items or _is_null(items[key][1]):
        return default
    return read(items[key][1], _join(field, key))


def _sequence(node: Node, field: str) -> list[Node]:
    if not isinstance(node, SequenceNode):
        _fail(node, field, f"expected a list, got {_describe(node)}")
    return node.value


def _text(node: Node, field: str, allow_empty: bool = False) -> str:
    # Any plain scalar is text, so `1: {}` defines variant "1" and `[1, 2]` refers to it.
    if not isinstance(node, ScalarNode) or _is_null(node) or (node.value == "" and not allow_empty):
        _fail(node, field, f"expected a string, got {_describe(node)}")
    return node.value


def _name(node: Node, field: str) -> str:
    # Names end up in file names and on command lines.
    name = _text(node, field)
    if not _NAME.fullmatch(name) or set(name) == {"."}:
        _fail(node, field, f"bad name {name!r}; use letters, digits, '-', '_' and '.'")
    return name


def _choice(node: Node, field: str, choices: Sequence[str], what: str) -> str:
    value = _text(node, field)
    if value not in choices:
        _fail(node, field, f"unknown {what} {value!r}; choose from {_choices(choices)}")
    return value


def _int(node: Node, field: str, minimum: int | None = None) -> int:
    # Only the int tag: `true` and `2.0` are not counts, even though Python would accept them as
    # such.
    if not isinstance(node, ScalarNode) or node.tag != _INT:
        _fail(node, field, f"expected an integer, got {_describe(node)}")
    value = _SCALARS.construct_yaml_int(node)
    if minimum is not None and value < minimum:
        _fail(node, field, f"must be >= {minimum}, got {value}")
    return value


def _number(node: Node, field: str, minimum: float, exclusive: bool = False) -> float:
    if not isinstance(node, ScalarNode) or node.tag not in (_INT, _FLOAT):
        _fail(node, field, f"expected a number, got {_describe(node)}")
    reader = _SCALARS.construct_yaml_int if node.tag == _INT else _SCALARS.construct_yaml_float
    value = float(reader(node))
    if not math.isfinite(value):
        _fail(node, field, f"must be a finite number, got {node.value}")
    if value < minimum or (exclusive and value == minimum):
        _fail(node, field, f"must be {'>' if exclusive else '>='} {minimum:g}, got {value:g}")
    return value


def _int_values(
    node: Node, field: str, read: Callable[[Node, str], int], allow_empty: bool
) -> tuple[int, ...]:
    """An int or a list of distinct ints, each checked by `read`: repeats would give cells with the
    same key."""
    if isinstance(node, ScalarNode):
        return (read(node, field),)
    items = _sequence(node, field)
    if not items and not allow_empty:
        _fail(node, field, "empty list; give at least one value, or the matrix is empty")
    values: list[int] = []
    for i, item in enumerate(items):
        value = read(item, f"{field}[{i}]")
        if value in values:
            _fail(item, f"{field}[{i}]", f"duplicate value {value}")
        values.append(value)
    return tuple(values)


def _counts(node: Node, field: str, allow_empty: bool = False) -> tuple[int, ...]:
    """An int >= 1 or a list of distinct ones."""
    return _int_values(node, field, partial(_int, minimum=1), allow_empty)


# --- sections ------------------------------------------------------------------------------------


@cache
def _preset_facts(name: str) -> tuple[str, int, int]:
    """The preset's size label, its layers, and the fewest it can be truncated to."""
    config = load_preset(name)
    return str(config.get("size", name)), int(config["num_hidden_layers"]), min_layers(config)


def _model(node: Node, field: str, check_paths: bool) -> list[ModelSpec]:
    """One model entry: one model, or one per depth when `layers` lists several."""
    items = _mapping(node, field, MODEL_KEYS)
    given = [key for key in ("preset", "path", "repo") if key in items]
    if len(given) > 1:
        second = max((items[key][0] for key in given), key=lambda key: key.start_mark.index)
        _fail(second, field, "give one of a preset, a path or a repo, not several")
    repo = None
    if "preset" in items:
        preset = _choice(items["preset"][1], _join(field, "preset"), preset_names(), "preset")
        path, depths = None, _preset_layers(items, field, preset)
    elif "path" in items:
        preset, path, depths = None, _checkpoint(items, field, check_paths), (None,)
    elif "repo" in items:
        preset, path, depths = None, None, (None,)
        repo = _repo(items, field)
    else:
        _fail(
            node,
            field,
            f"give a preset (one of {_choices(preset_names())}), a path to a checkpoint "
            "directory, or a Hugging Face repo id (repo: org/name)",
        )
    size = _optional(items, "size", field, _text, None)
    dtype = _optional(
        items, "dtype", field, partial(_choice, choices=list(DTYPES), what="dtype"), DEFAULT_DTYPE
    )
    quantize = _optional(items, "quantize", field, _quantize, None)
    implementation = _optional(items, "implementation", field, _implementation, None)
    return [
        model_spec(
            preset=preset,
            path=path,
            size=size,
            layers=layers,
            dtype=dtype,
            quantize=quantize,
            implementation=implementation,
            repo=repo,
        )
        for layers in depths
    ]


def _preset_layers(items: _Items, field: str, preset: str) -> tuple[int | None, ...]:
    """`layers`: a depth or a list of distinct depths, each 1..the preset's layers; absent, all of
    them (None)."""
    _, max_layers, fewest = _preset_facts(preset)

    def depth(node: Node, where: str) -> int:
        layers = _int(node, where)
        if not fewest <= layers <= max_layers:
            _fail(
                node,
                where,
                f"{layers} is out of range; choose {fewest}..{max_layers} "
                f"({preset} has {max_layers})",
            )
        return layers

    return _optional(
        items, "layers", field, partial(_int_values, read=depth, allow_empty=False), (None,)
    )


def _checkpoint(items: _Items, field: str, check_paths: bool) -> str:
    path_node = items["path"][1]
    # Absolute: workers run in their build's checkout, not in the directory the user named it from.
    path = os.path.abspath(os.path.expanduser(_text(path_node, _join(field, "path"))))
    if check_paths and not os.path.isdir(path):
        problem = "is not a directory" if os.path.exists(path) else "does not exist"
        _fail(path_node, _join(field, "path"), f"{path!r} {problem}; give a checkpoint directory")
    _runs_whole(items, field, "a checkpoint at `path`")
    return path


def _runs_whole(items: _Items, field: str, what: str) -> None:
    """`layers` truncates presets only: a checkpoint runs as it was saved."""
    if "layers" in items:
        _fail(items["layers"][0], _join(field, "layers"), f"only for presets; {what} runs whole")


def _repo(items: _Items, field: str) -> str:
    node = items["repo"][1]
    repo = _text(node, _join(field, "repo"))
    if not REPO_ID.fullmatch(repo):
        _fail(node, _join(field, "repo"), f"{repo!r} is not a repo id; give org/name[@revision]")
    _runs_whole(items, field, "a checkpoint from a repo")
    return repo


def _implementation(node: Node, field: str) -> str:
    return _choice(node, field, list(IMPLEMENTATIONS), "implementation")


def _quantize(node: Node, field: str) -> str | None:
    mode = _choice(node, field, [NO_QUANTIZE, *QUANTIZE_MODES], "quantize mode")
    return None if mode == NO_QUANTIZE else mode


def _models(node: Node, field: str, context: _Context) -> tuple[ModelSpec, ...]:
    items = _sequence(node, field)
    if not items:
        _fail(node, field, "empty list; give at least one model, or the matrix is empty")
    models: list[tuple[int, ModelSpec]] = []  # (the entry it comes from, the model)
    for i, item in enumerate(items):
        for model in _model(item, f"{field}[{i}]", context.check_paths):
            for j, earlier in models:
                if earlier.key == model.key:
                    _fail(item, f"{field}[{i}]", f"same model as {field}[{j}] ({model.key})")
            models.append((i, model))
    return tuple(model for _, model in models)


def _variants(node: Node, field: str, context: _Context) -> dict[str, dict[str, str]]:
    """Each variant's op assignment as written (omitted ops are filled in by `resolve_ops`). The
    context keeps the names, for the keys that refer to them, and where each op is written, for
    `resolve_ops`'s errors."""
    items = _mapping(node, field, None, what="variant name")
    if not items:
        _fail(
            node,
            field,
            "no variants; define at least one (`name: {}` runs every op at its default)",
        )
    variants: dict[str, dict[str, str]] = {}
    lines: dict[str, dict[str, tuple[int, int]]] = {}
    for name, (key_node, value_node) in items.items():
        _name(key_node, _join(field, name))
        variants[name], lines[name] = {}, {}
        if _is_null(value_node):  # `baseline:` with nothing after it: all defaults, like `{}`
            continue
        for op, (op_node, impl_node) in _mapping(
            value_node, _join(field, name), None, what="op"
        ).items():
            variants[name][op] = _text(impl_node, _join(_join(field, name), op))
            lines[name][op] = (_line(op_node), _line(impl_node))
    context.variants, context.variant_lines = list(variants), lines
    return variants


def _variant_ref(node: Node, field: str, variants: Sequence[str]) -> str:
    return _choice(node, field, variants, "variant")


def _comparison(node: Node, field: str, variants: Sequence[str]) -> Comparison:
    if isinstance(node, SequenceNode) and len(node.value) == 2:
        baseline, new = node.value
        return Comparison(
            _variant_ref(baseline, f"{field}[0]", variants),
            _variant_ref(new, f"{field}[1]", variants),
        )
    if isinstance(node, MappingNode):
        items = _mapping(node, field, COMPARISON_KEYS)
        baseline, new = (_required(items, key, node, field) for key in COMPARISON_KEYS)
        return Comparison(
            _variant_ref(baseline, _join(field, "baseline"), variants),
            _variant_ref(new, _join(field, "new"), variants),
        )
    _fail(
        node,
        field,
        f"expected [baseline, new] or {{baseline: NAME, new: NAME}}, got {_describe(node)}",
    )


def _comparisons(node: Node, field: str, context: _Context) -> tuple[Comparison, ...]:
    return tuple(
        _comparison(item, f"{field}[{i}]", context.variants)
        for i, item in enumerate(_sequence(node, field))
    )


def _workloads(node: Node, field: str) -> tuple[Workload, ...]:
    items = _mapping(node, field, WORKLOAD_KEYS)
    prompt = _counts(_required(items, "prompt_tokens", node, field), _join(field, "prompt_tokens"))
    gen = _counts(_required(items, "gen_tokens", node, field), _join(field, "gen_tokens"))
    batch = _optional(items, "batch", field, _counts, (DEFAULT_BATCH,))
    return tuple(Workload(p, g, b) for p, g, b in itertools.product(prompt, gen, batch))


def _correctness(node: Node, field: str, context: _Context) -> Correctness:
    items = _mapping(node, field, CORRECTNESS_KEYS)
    variants = context.variants
    return Correctness(
        reference=_optional(
            items, "reference", field, partial(_variant_ref, variants=variants), variants[0]
        ),
        atol=_optional(items, "atol", field, partial(_number, minimum=0.0), None),
        tokens=_optional(items, "tokens", field, partial(_int, minimum=0), DEFAULT_CHECK_TOKENS),
    )


def _trials(node: Node, field: str, context: _Context) -> Trials:
    """A number of rounds (FIXED), or `auto`, `budget` or `plan`; the context keeps both, for the
    keys only the budgeted rules allow."""
    if isinstance(node, ScalarNode) and node.tag == _STR and node.value in NAMED_RULES:
        context.trials = Trials(node.value)
    elif isinstance(node, ScalarNode) and node.tag == _STR:
        _fail(
            node,
            field,
            f"expected a number of rounds (>= 1) or one of {_choices(NAMED_RULES)}, "
            f"got {_describe(node)}",
        )
    else:
        context.trials, context.rounds = Trials.FIXED, _int(node, field, minimum=1)
    return context.trials


def _percent(node: Node, field: str, low: float, high: float) -> float:
    """`2`, `2.5` or `2%`: a percentage in (low, high]."""
    text = node.value.strip() if isinstance(node, ScalarNode) else ""
    try:
        value = float(text.removesuffix("%")) if node.tag in (_INT, _FLOAT, _STR) else math.nan
    except ValueError:
        value = math.nan
    if not low < value <= high:
        _fail(node, field, f"expected a percentage in ({low:g}%, {high:g}%], got {_describe(node)}")
    return value


def _threads(node: Node, field: str, context: _Context) -> int | None:
    """BLAS threads: `auto` (None) or 1..the cores this machine has (not checked for a stored
    experiment)."""
    if isinstance(node, ScalarNode) and node.tag == _STR and node.value == AUTO:
        return None
    cores = os.cpu_count() or 1
    value = _int(node, field, minimum=1)
    if context.check_paths and value > cores:
        _fail(
            node,
            field,
            f"{value} is more than this machine's {cores} cores; choose 1..{cores} or {AUTO}",
        )
    return value


def _plugins(node: Node, field: str, context: _Context) -> tuple[str, ...]:
    """Plugin files, relative to the experiment's folder; each must exist (unless read back from a
    run header)."""
    paths = []
    for i, item in enumerate(_sequence(node, field)):
        path = Path(context.file).parent / os.path.expanduser(_text(item, f"{field}[{i}]"))
        if context.check_paths and not path.is_file():
            _fail(
                item,
                f"{field}[{i}]",
                f"{str(path)!r} is not a file; give a Python file that registers variants",
            )
        paths.append(str(path.resolve()))
    return tuple(dict.fromkeys(paths))


def _expectation(node: Node, field: str, variants: Sequence[str]) -> Expectation:
    items = _mapping(node, field, EXPECT_KEYS)
    if "all_correct" in items:
        others = [key for key in items if key != "all_correct"]
        if others:
            _fail(
                items[others[0]][0],
                _join(field, others[0]),
                "all_correct stands alone; make this a separate item",
            )
        value = items["all_correct"][1]
        if not (
            isinstance(value, ScalarNode)
            and value.tag == _BOOL
            and _SCALARS.construct_yaml_bool(value)
        ):
            _fail(value, _join(field, "all_correct"), f"expected true, got {_describe(value)}")
        return Expectation(kind="all_correct")
    if not items:
        forms = (
            "{comparison: [a, b], metric: prefill|gen, max_slowdown_pct: N} or {all_correct: true}"
        )
        _fail(node, field, f"expected {forms}")
    comparison = _comparison(
        _required(items, "comparison", node, field), _join(field, "comparison"), variants
    )
    metric = _choice(
        _required(items, "metric", node, field), _join(field, "metric"), METRICS, "metric"
    )
    pct = _number(
        _required(items, "max_slowdown_pct", node, field), _join(field, "max_slowdown_pct"), 0.0
    )
    return Expectation(kind="slowdown", comparison=comparison, metric=metric, max_slowdown_pct=pct)


def _expectations(node: Node, field: str, context: _Context) -> tuple[Expectation, ...]:
    return tuple(
        _expectation(item, f"{field}[{i}]", context.variants)
        for i, item in enumerate(_sequence(node, field))
    )


# --- the whole file ------------------------------------------------------------------------------


def _parse(text: str, file: str, sha256: str, *, check_paths: bool = True) -> Experiment:
    try:
        root = _compose(text)
        return _experiment(root, text, file, sha256, check_paths)
    except _Invalid as err:
        raise SpecError(file, err.line, err.field, err.message) from None


def _compose(text: str) -> Node:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        message = err.problem or "syntax error"
        if err.context and err.context_mark:  # e.g. an unclosed bracket: say where it was opened
            message += f" ({err.context} on line {err.context_mark.line + 1})"
        raise _Invalid(mark.line + 1 if mark else 0, "yaml", message) from None
    except yaml.YAMLError as err:  # e.g. a control character, reported by position rather than line
        position = getattr(err, "position", None)
        raise _Invalid(
            text.count("\n", 0, position) + 1 if position is not None else 0, "yaml", str(err)
        ) from None
    if root is None or _is_null(root):
        raise _Invalid(
            1, "experiment", f"the file is empty; it needs at least {_choices(_REQUIRED)}"
        )
    return root


@dataclass
class _Context:
    """What a key's reader may need beyond its node: the file (plugins are relative to it), whether
    paths and cores are this machine's to check (not for an experiment read back from a run header),
    and what earlier keys defined: `variants` the names later keys refer to, `trials` whether the
    keys of the budgeted rules may appear."""

    file: str
    check_paths: bool
    variants: list[str] = dataclasses.field(default_factory=list)
    variant_lines: dict[str, dict[str, tuple[int, int]]] = dataclasses.field(default_factory=dict)
    trials: Trials = Trials.FIXED
    rounds: int = DEFAULT_TRIALS  # trials: N


_Reader = Callable[[Node, str, _Context], object]
_REQUIRED_KEY = object()


def _plain(read: Callable[..., object], **options: object) -> _Reader:
    """A reader that needs nothing but its node and field."""
    return lambda node, field, _context: read(node, field, **options)


@dataclass(frozen=True)
class Key:
    """A top-level key of an experiment file: how the schema text shows it
    (`name: example  # doc`, then `nested` (text, doc) lines for what goes inside it), its reader,
    and its default when it is absent or left empty."""

    name: str
    example: str
    doc: str
    read: _Reader
    # a callable is called with the context: a default made of earlier keys
    default: object = _REQUIRED_KEY
    nested: tuple[tuple[str, str], ...] = ()
    auto_only: bool = False  # allowed only beside trials: auto

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED_KEY

    def value(self, items: _Items, context: _Context) -> object:
        if self.auto_only and self.name in items and context.trials not in BUDGETED:
            _fail(
                items[self.name][0],
                self.name,
                f"only with trials: {_choices(BUDGETED)} (trials is {context.rounds} here)",
            )
        if self.required:
            return self.read(items[self.name][1], self.name, context)
        default = self.default(context) if callable(self.default) else self.default
        return _optional(
            items, self.name, "", lambda node, field: self.read(node, field, context), default
        )

    def schema_lines(self) -> list[str]:
        head = f"{self.name}: {self.example}".rstrip()
        return [
            _schema_line(head, self.doc),
            *(_schema_line(f"  {text}", doc) for text, doc in self.nested),
        ]


def _schema_line(text: str, doc: str) -> str:
    return f"{text:<29} # {doc}" if doc else text


# The table every top-level key is declared in, in the order the file is read (each key may refer to
# those before it) and the schema lists them.
KEYS = (
    Key("name", "default", "required; letters, digits, '-', '_', '.'", _plain(_name)),
    Key("description", '"..."', "optional", _plain(_text, allow_empty=True), ""),
    Key(
        "models",
        "",
        "required, non-empty list",
        _models,
        nested=(
            (
                "- preset: e2b",
                "exactly one of `preset` (a bundled preset), `path` (a checkpoint directory) or "
                "`repo` (a Hugging Face repo id, org/name[@revision], found in its cache)",
            ),
            (
                "  size: E2B",
                "display label; default: the preset's size, the repo's or the directory's name",
            ),
            (
                "  layers: 2",
                "presets only: 1..num_hidden_layers, or a list ([2, "
                "4, 8]): a model per depth; default: all",
            ),
            ("  dtype: float32", "one of models.DTYPES; default float32"),
            ("  quantize: nvfp4", "one of models.QUANTIZE_MODES, or none/null (the default)"),
            (
                "  implementation: mlx-lm",
                "fusebench (its Gemma 4 decoder) or mlx-lm (mlx-lm's own classes); "
                "default: fusebench for Gemma 4, mlx-lm for every other model_type",
            ),
        ),
    ),
    Key(
        "variants",
        "",
        "required, >= 1 entry: name -> {op: variant}; omitted ops take their default",
        _variants,
        nested=(("baseline: {geglu: unfused}", ""), ("compiled: {geglu: compiled}", "")),
    ),
    Key(
        "comparisons",
        "",
        "optional: [baseline, new] or {baseline: a, new: b}; a == b is an A/A test",
        _comparisons,
        (),
        nested=(("- [baseline, compiled]", ""),),
    ),
    Key(
        "workloads",
        "",
        "required; each an int or a non-empty list; the Cartesian product is run",
        _plain(_workloads),
        nested=(
            ("prompt_tokens: [128, 512]", "required, >= 1 (outermost)"),
            ("gen_tokens: 32", "required, >= 1"),
            ("batch: [1, 2]", "optional, >= 1, default 1 (innermost)"),
        ),
    ),
    Key(
        "depths",
        "[512, 2048]",
        "optional KV depths for the decode-speed curve, >= 1; default []",
        _plain(_counts, allow_empty=True),
        (),
    ),
    Key(
        "shares",
        "5",
        "rounds timing each switchable op's share of a step (the expected Δ), >= 0; 0: off",
        _plain(_int, minimum=0),
        DEFAULT_SHARE_ROUNDS,
    ),
    Key(
        "trials",
        "5",
        f"timed rounds, >= 1; or plan: each size's rounds the fewest expected to decide its "
        f"rows within budget_s, from this machine's measured costs and spreads, fixed before its "
        f"first; or "
        f"{AUTO}: add rounds until every row is decided; or budget: as many as budget_s holds, "
        "fixed from the warm-up's pace before the first timed round",
        _trials,
        Trials.FIXED,  # with the context's rounds, DEFAULT_TRIALS
    ),
    Key(
        "warmup",
        "1",
        "untimed rounds (a prefill and the decode steps the check reads), >= 0; the first "
        "carries the correctness check, so 0 still runs one",
        _plain(_int, minimum=0),
        DEFAULT_WARMUP,
    ),
    Key("prefill_step_size", "2048", ">= 1", _plain(_int, minimum=1), DEFAULT_PREFILL_STEP_SIZE),
    Key("seed", "0", "", _plain(_int), DEFAULT_SEED),
    Key(
        "timeout_s",
        "1800",
        "per-cell timeout, > 0",
        _plain(_number, minimum=0.0, exclusive=True),
        DEFAULT_TIMEOUT_S,
    ),
    Key(
        "correctness",
        "",
        "",
        _correctness,
        lambda context: Correctness(
            reference=context.variants[0], atol=None, tokens=DEFAULT_CHECK_TOKENS
        ),
        nested=(
            ("reference: baseline", "default: the first variant"),
            ("atol: 0.05", "max abs logit error, >= 0; default null: chosen by dtype"),
            (
                "tokens: 8",
                "greedy tokens that must agree, >= 0: the first warm-up round's own, so at most "
                "a workload's gen_tokens",
            ),
        ),
    ),
    Key(
        "expect",
        "",
        "checked by `fusebench check`",
        _expectations,
        (),
        nested=(
            (
                "- {comparison: [baseline, compiled], metric: prefill, max_slowdown_pct: 5}",
                "metric: prefill or gen",
            ),
            ("- {all_correct: true}", ""),
        ),
    ),
    Key(
        "plugins",
        "[my_fusions.py]",
        "optional: Python files (relative to this file) that register more variants",
        _plugins,
        (),
    ),
    Key(
        "margin_pct",
        "2",
        '"no change" means the whole CI within ± this many percent, >= 0; default 2',
        _plain(_number, minimum=0.0),
        DEFAULT_MARGIN_PCT,
    ),
    Key(
        "precision",
        "2%",
        f"with trials: {AUTO}, optional: each decided "
        "row also narrowed to this half-width, (0, 50]%",
        _plain(_percent, low=0.0, high=50.0),
        None,
        auto_only=True,
    ),
    Key(
        "max_rounds",
        "30",
        f"with trials: {AUTO}, budget or plan, the most rounds a cell gets, "
        f">= {MIN_AUTO_ROUNDS} (plan: >= {MIN_PLANNED_ROUNDS})",
        _plain(_int, minimum=MIN_AUTO_ROUNDS),
        DEFAULT_MAX_ROUNDS,
        auto_only=True,
    ),
    Key(
        "budget_s",
        "600",
        f"with trials: {AUTO} (optional), budget or plan (required), the command's wall time "
        "in seconds from its start (less the machine's one-time, cached measurements), shared by "
        "its cells, > 0",
        _plain(_number, minimum=0.0, exclusive=True),
        None,
        auto_only=True,
    ),
    Key(
        "worker_rounds",
        "6",
        "with run --against: rounds each pair of the two builds' workers runs before a fresh "
        "pair takes over (the interval then holds the spread between processes), >= 0; "
        "0: one pair a cell (a duet of one build's variants always keeps one)",
        _plain(_int, minimum=0),
        DEFAULT_WORKER_ROUNDS,
    ),
    Key(
        "schedule",
        AUTO,
        f"{_choices(tuple(Schedule))}: a pair's two trials at the same moment on two cores "
        f"(duet), one after the other, or {AUTO}: whichever measured more precise per second here",
        _plain(lambda node, field: Schedule(_choice(node, field, tuple(Schedule), "schedule"))),
        Schedule.AUTO,
    ),
    Key(
        "threads",
        AUTO,
        f"CPU backends: BLAS threads; {AUTO}: 1 or every core, "
        "whichever measured more precise per second here",
        _threads,
        None,
    ),
)
TOP_KEYS = tuple(key.name for key in KEYS)
_REQUIRED = tuple(key.name for key in KEYS if key.required)
_AUTO_ONLY = tuple(key.name for key in KEYS if key.auto_only)


def _budget_rules(
    items: _Items, root: Node, target_pct: float | None, budget_s: float | None, warmup: int
) -> None:
    """trials: budget takes its rounds from budget_s at the warm-up's pace, and decides nothing on
    its data, so it needs both and has no precision target."""
    where = items["trials"][0]
    if budget_s is None:
        _fail(where, "trials", "trials: budget needs budget_s (the rounds are what it holds)")
    if warmup < 1:
        _fail(where, "trials", "trials: budget needs warmup >= 1 (its pace sets the rounds)")
    if target_pct is not None:
        _fail(
            items["precision"][0],
            "precision",
            f"only with trials: {AUTO} (trials: budget fixes its rounds, it adds none)",
        )


def _plan_rules(
    items: _Items, target_pct: float | None, budget_s: float | None, max_rounds: int
) -> None:
    """trials: plan plans its rounds within budget_s, none fewer than MIN_PLANNED_ROUNDS a cell, and
    decides nothing on its data."""
    where = items["trials"][0]
    if budget_s is None:
        _fail(where, "trials", "trials: plan needs budget_s (the most its rounds may take)")
    if max_rounds < MIN_PLANNED_ROUNDS:
        _fail(
            items["max_rounds"][0],
            "max_rounds",
            f"with trials: plan, at least {MIN_PLANNED_ROUNDS} (a planned cell's fewest rounds)",
        )
    if target_pct is not None:
        _fail(
            items["precision"][0],
            "precision",
            f"only with trials: {AUTO} (trials: plan fixes its rounds, it adds none)",
        )


def schema_text() -> str:
    """The experiment file's schema: every top-level key with an example value and what it takes."""
    return "\n".join(line for key in KEYS for line in key.schema_lines())


def _experiment(root: Node, text: str, file: str, sha256: str, check_paths: bool) -> Experiment:
    if not isinstance(root, MappingNode):
        _fail(
            root, "experiment", f"expected a mapping of {_choices(TOP_KEYS)}, got {_describe(root)}"
        )
    items = _mapping(root, "", TOP_KEYS)
    for name in _REQUIRED:
        _required(items, name, root, "")
    context = _Context(file, check_paths)
    values = {key.name: key.value(items, context) for key in KEYS}
    trials = values.pop("trials")
    target_pct, max_rounds, budget_s = (values.pop(name) for name in _AUTO_ONLY)
    if trials is Trials.BUDGET:
        _budget_rules(items, root, target_pct, budget_s, values["warmup"])
    if trials is Trials.PLAN:
        _plan_rules(items, target_pct, budget_s, max_rounds)
    return Experiment(
        file=file,
        content=text,
        sha256=sha256,
        trials=trials,
        rounds=context.rounds if trials is Trials.FIXED else max_rounds,
        target_pct=target_pct,
        budget_s=budget_s,
        variant_lines=context.variant_lines,
        **values,
    )
