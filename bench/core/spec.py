"""The experiment schema: an experiment file read and validated into a core.experiment
`Experiment`.

Every error is a `SpecError` that names the file, the 1-based line, the field and what would be
valid, so a typo in a long sweep is found before any model is built, not an hour into the run.

The file's top-level keys are declared once, in `KEYS`: each with its line in the schema, its reader
and its default. `TOP_KEYS`, the schema text (`schema_text()`, which `fusebench run --help` prints)
and the parser all derive from that table. Unknown keys at any level are errors; an optional key
left empty, `key:`, takes its default. The readers work on YAML nodes (core.nodes), which alone
know their lines; a `models:` entry is read by core.model_entry.

Why one long module: it is one thing, the experiment schema: the `KEYS` table, each key's reader
and the rules between keys (a budget a rule needs, the keys only some rules take). Split, a key's
reader would sit apart from its line in the schema and the rules that read it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from . import nodes
from .errors import SpecError
from .experiment import (
    AUTO,
    BUDGETED,
    DEFAULT_MARGIN_PCT,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_PREFILL_STEP_SIZE,
    MIN_AUTO_ROUNDS,
    MIN_PLANNED_ROUNDS,
    Comparison,
    Correctness,
    Expectation,
    Experiment,
    ModelSpec,
    Schedule,
    Trials,
    Workload,
)
from .fileformat import METRICS
from .flags import experiment_path
from .model_entry import model_entry

WORKLOAD_KEYS = ("prompt_tokens", "gen_tokens", "batch")
COMPARISON_KEYS = ("baseline", "new")
CORRECTNESS_KEYS = ("reference", "atol", "tokens")
SLOWDOWN_KEYS = ("comparison", "metric", "max_slowdown_pct")
EXPECT_KEYS = (*SLOWDOWN_KEYS, "all_correct")

# The keys' defaults.
DEFAULT_BATCH = 1
DEFAULT_TRIALS = 5
DEFAULT_WARMUP = 1
# run --against: each pair of worker processes runs `worker_rounds` rounds, then a fresh pair
# takes over, so the interval sees the spread between processes (analysis.inference, "Between
# processes"). `auto` where a cell's rounds are fixed from the time (trials: budget): the count
# analysis.allocation chooses from its costs; with other rules, this many.
DEFAULT_WORKER_ROUNDS = MIN_AUTO_ROUNDS
DEFAULT_SEED = 0
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_CHECK_TOKENS = 8
# Rounds of the op-share timing (measure.ops.shares): 5 give a t interval of the expected Δ at ~10 s
# per cell here.
DEFAULT_SHARE_ROUNDS = 5
# The rules written by name (`trials: plan`), not as a number of rounds.
NAMED_RULES = tuple(rule for rule in Trials if rule is not Trials.FIXED)


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


# --- sections ------------------------------------------------------------------------------------


def _models(node: Node, field: str, context: _Context) -> tuple[ModelSpec, ...]:
    items = nodes.sequence(node, field)
    if not items:
        nodes.fail(node, field, "empty list; give at least one model, or the matrix is empty")
    models: list[tuple[int, ModelSpec]] = []  # (the entry it comes from, the model)
    for i, item in enumerate(items):
        for model in model_entry(item, f"{field}[{i}]", context.check_paths):
            for j, earlier in models:
                if earlier.key == model.key:
                    nodes.fail(item, f"{field}[{i}]", f"same model as {field}[{j}] ({model.key})")
            models.append((i, model))
    return tuple(model for _, model in models)


def _variants(node: Node, field: str, context: _Context) -> dict[str, dict[str, str]]:
    """Each variant's op assignment as written (omitted ops are filled in by `resolve_ops`). The
    context keeps the names, for the keys that refer to them, and where each op is written, for
    `resolve_ops`'s errors."""
    items = nodes.mapping(node, field, None, what="variant name")
    if not items:
        nodes.fail(
            node,
            field,
            "no variants; define at least one (`name: {}` runs every op at its default)",
        )
    variants: dict[str, dict[str, str]] = {}
    lines: dict[str, dict[str, tuple[int, int]]] = {}
    for name, (key_node, value_node) in items.items():
        nodes.name(key_node, nodes.join(field, name))
        variants[name], lines[name] = {}, {}
        if nodes.is_null(value_node):  # `baseline:` with nothing after it: all defaults, like `{}`
            continue
        for op, (op_node, impl_node) in nodes.mapping(
            value_node, nodes.join(field, name), None, what="op"
        ).items():
            variants[name][op] = nodes.text(impl_node, nodes.join(nodes.join(field, name), op))
            lines[name][op] = (nodes.line_of(op_node), nodes.line_of(impl_node))
    context.variants, context.variant_lines = list(variants), lines
    return variants


def _variant_ref(node: Node, field: str, variants: Sequence[str]) -> str:
    return nodes.choice(node, field, variants, "variant")


def _comparison(node: Node, field: str, variants: Sequence[str]) -> Comparison:
    if isinstance(node, SequenceNode) and len(node.value) == 2:
        baseline, new = node.value
        return Comparison(
            _variant_ref(baseline, f"{field}[0]", variants),
            _variant_ref(new, f"{field}[1]", variants),
        )
    if isinstance(node, MappingNode):
        items = nodes.mapping(node, field, COMPARISON_KEYS)
        baseline, new = (nodes.required(items, key, node, field) for key in COMPARISON_KEYS)
        return Comparison(
            _variant_ref(baseline, nodes.join(field, "baseline"), variants),
            _variant_ref(new, nodes.join(field, "new"), variants),
        )
    nodes.fail(
        node,
        field,
        f"expected [baseline, new] or {{baseline: NAME, new: NAME}}, got {nodes.describe(node)}",
    )


def _comparisons(node: Node, field: str, context: _Context) -> tuple[Comparison, ...]:
    return tuple(
        _comparison(item, f"{field}[{i}]", context.variants)
        for i, item in enumerate(nodes.sequence(node, field))
    )


def _workloads(node: Node, field: str) -> tuple[Workload, ...]:
    items = nodes.mapping(node, field, WORKLOAD_KEYS)
    prompt = nodes.counts(
        nodes.required(items, "prompt_tokens", node, field), nodes.join(field, "prompt_tokens")
    )
    gen = nodes.counts(
        nodes.required(items, "gen_tokens", node, field), nodes.join(field, "gen_tokens")
    )
    batch = nodes.optional(items, "batch", field, nodes.counts, (DEFAULT_BATCH,))
    return tuple(Workload(p, g, b) for p, g, b in itertools.product(prompt, gen, batch))


def _correctness(node: Node, field: str, context: _Context) -> Correctness:
    items = nodes.mapping(node, field, CORRECTNESS_KEYS)
    variants = context.variants
    return Correctness(
        reference=nodes.optional(
            items, "reference", field, partial(_variant_ref, variants=variants), variants[0]
        ),
        atol=nodes.optional(items, "atol", field, partial(nodes.number, minimum=0.0), None),
        tokens=nodes.optional(
            items, "tokens", field, partial(nodes.integer, minimum=0), DEFAULT_CHECK_TOKENS
        ),
    )


def _trials(node: Node, field: str, context: _Context) -> Trials:
    """A number of rounds (FIXED), or `auto`, `budget` or `plan`; the context keeps both, for the
    keys only the budgeted rules allow."""
    if isinstance(node, ScalarNode) and node.tag == nodes.STR and node.value in NAMED_RULES:
        context.trials = Trials(node.value)
    elif isinstance(node, ScalarNode) and node.tag == nodes.STR:
        nodes.fail(
            node,
            field,
            f"expected a number of rounds (>= 1) or one of {nodes.listed(NAMED_RULES)}, "
            f"got {nodes.describe(node)}",
        )
    else:
        context.trials, context.rounds = Trials.FIXED, nodes.integer(node, field, minimum=1)
    return context.trials


def _percent(node: Node, field: str, low: float, high: float) -> float:
    """`2`, `2.5` or `2%`: a percentage in (low, high]."""
    text = node.value.strip() if isinstance(node, ScalarNode) else ""
    try:
        value = (
            float(text.removesuffix("%"))
            if node.tag in (nodes.INT, nodes.FLOAT, nodes.STR)
            else math.nan
        )
    except ValueError:
        value = math.nan
    if not low < value <= high:
        nodes.fail(
            node,
            field,
            f"expected a percentage in ({low:g}%, {high:g}%], got {nodes.describe(node)}",
        )
    return value


def _threads(node: Node, field: str, context: _Context) -> int | None:
    """BLAS threads: `auto` (None) or 1..the cores this machine has (not checked for a stored
    experiment)."""
    if isinstance(node, ScalarNode) and node.tag == nodes.STR and node.value == AUTO:
        return None
    cores = os.cpu_count() or 1
    value = nodes.integer(node, field, minimum=1)
    if context.check_paths and value > cores:
        nodes.fail(
            node,
            field,
            f"{value} is more than this machine's {cores} cores; choose 1..{cores} or {AUTO}",
        )
    return value


def _worker_rounds(node: Node, field: str, context: _Context) -> int | None:
    """Rounds a worker pair runs: `auto` (None) or a count >= 0."""
    if isinstance(node, ScalarNode) and node.tag == nodes.STR:
        if node.value == AUTO:
            return None
        nodes.fail(node, field, f"expected an integer >= 0 or {AUTO}, got {node.value!r}")
    return nodes.integer(node, field, minimum=0)


def _plugins(node: Node, field: str, context: _Context) -> tuple[str, ...]:
    """Plugin files, relative to the experiment's folder; each must exist (unless read back from a
    run header)."""
    paths = []
    for i, item in enumerate(nodes.sequence(node, field)):
        path = Path(context.file).parent / os.path.expanduser(nodes.text(item, f"{field}[{i}]"))
        if context.check_paths and not path.is_file():
            nodes.fail(
                item,
                f"{field}[{i}]",
                f"{str(path)!r} is not a file; give a Python file that registers variants",
            )
        paths.append(str(path.resolve()))
    return tuple(dict.fromkeys(paths))


def _expectation(node: Node, field: str, variants: Sequence[str]) -> Expectation:
    items = nodes.mapping(node, field, EXPECT_KEYS)
    if "all_correct" in items:
        others = [key for key in items if key != "all_correct"]
        if others:
            nodes.fail(
                items[others[0]][0],
                nodes.join(field, others[0]),
                "all_correct stands alone; make this a separate item",
            )
        value = items["all_correct"][1]
        if not (
            isinstance(value, ScalarNode)
            and value.tag == nodes.BOOL
            and nodes.SCALARS.construct_yaml_bool(value)
        ):
            nodes.fail(
                value,
                nodes.join(field, "all_correct"),
                f"expected true, got {nodes.describe(value)}",
            )
        return Expectation(kind="all_correct")
    if not items:
        forms = (
            "{comparison: [a, b], metric: prefill|gen, max_slowdown_pct: N} or {all_correct: true}"
        )
        nodes.fail(node, field, f"expected {forms}")
    comparison = _comparison(
        nodes.required(items, "comparison", node, field), nodes.join(field, "comparison"), variants
    )
    metric = nodes.choice(
        nodes.required(items, "metric", node, field), nodes.join(field, "metric"), METRICS, "metric"
    )
    pct = nodes.number(
        nodes.required(items, "max_slowdown_pct", node, field),
        nodes.join(field, "max_slowdown_pct"),
        0.0,
    )
    return Expectation(kind="slowdown", comparison=comparison, metric=metric, max_slowdown_pct=pct)


def _expectations(node: Node, field: str, context: _Context) -> tuple[Expectation, ...]:
    return tuple(
        _expectation(item, f"{field}[{i}]", context.variants)
        for i, item in enumerate(nodes.sequence(node, field))
    )


# --- the whole file ------------------------------------------------------------------------------


def _parse(text: str, file: str, sha256: str, *, check_paths: bool = True) -> Experiment:
    try:
        root = _compose(text)
        return _experiment(root, text, file, sha256, check_paths)
    except nodes.Invalid as err:
        raise SpecError(file, err.line, err.field, err.message) from None


def _compose(text: str) -> Node:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        message = err.problem or "syntax error"
        if err.context and err.context_mark:  # e.g. an unclosed bracket: say where it was opened
            message += f" ({err.context} on line {err.context_mark.line + 1})"
        raise nodes.Invalid(mark.line + 1 if mark else 0, "yaml", message) from None
    except yaml.YAMLError as err:  # e.g. a control character, reported by position rather than line
        position = getattr(err, "position", None)
        raise nodes.Invalid(
            text.count("\n", 0, position) + 1 if position is not None else 0, "yaml", str(err)
        ) from None
    if root is None or nodes.is_null(root):
        raise nodes.Invalid(
            1, "experiment", f"the file is empty; it needs at least {nodes.listed(_REQUIRED)}"
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

    def value(self, items: nodes.Items, context: _Context) -> object:
        if self.auto_only and self.name in items and context.trials not in BUDGETED:
            nodes.fail(
                items[self.name][0],
                self.name,
                f"only with trials: {nodes.listed(BUDGETED)} (trials is {context.rounds} here)",
            )
        if self.required:
            return self.read(items[self.name][1], self.name, context)
        default = self.default(context) if callable(self.default) else self.default
        return nodes.optional(
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
    Key("name", "default", "required; letters, digits, '-', '_', '.'", _plain(nodes.name)),
    Key("description", '"..."', "optional", _plain(nodes.text, allow_empty=True), ""),
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
        _plain(nodes.counts, allow_empty=True),
        (),
    ),
    Key(
        "shares",
        "5",
        "rounds timing each switchable op's share of a step (the expected Δ), >= 0; 0: off",
        _plain(nodes.integer, minimum=0),
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
        _plain(nodes.integer, minimum=0),
        DEFAULT_WARMUP,
    ),
    Key(
        "prefill_step_size",
        "2048",
        ">= 1",
        _plain(nodes.integer, minimum=1),
        DEFAULT_PREFILL_STEP_SIZE,
    ),
    Key("seed", "0", "", _plain(nodes.integer), DEFAULT_SEED),
    Key(
        "timeout_s",
        "1800",
        "per-cell timeout, > 0",
        _plain(nodes.number, minimum=0.0, exclusive=True),
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
        _plain(nodes.number, minimum=0.0),
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
        _plain(nodes.integer, minimum=MIN_AUTO_ROUNDS),
        DEFAULT_MAX_ROUNDS,
        auto_only=True,
    ),
    Key(
        "budget_s",
        "600",
        f"with trials: {AUTO} (optional), budget or plan (required), the command's wall time "
        "in seconds from its start (less the machine's one-time, cached measurements), shared by "
        "its cells, > 0",
        _plain(nodes.number, minimum=0.0, exclusive=True),
        None,
        auto_only=True,
    ),
    Key(
        "worker_rounds",
        AUTO,
        "with run --against: rounds each pair of the two builds' workers runs before a fresh "
        "pair takes over (the interval then holds the spread between processes), >= 0; "
        "0: one pair a cell (a duet of one build's variants always keeps one); "
        f"{AUTO}: with trials: budget, the count whose interval is narrowest across the "
        f"pair offsets machines show, at the cell's own round and fresh-pair costs; else "
        f"{DEFAULT_WORKER_ROUNDS}",
        _worker_rounds,
        None,
    ),
    Key(
        "schedule",
        AUTO,
        f"{nodes.listed(tuple(Schedule))}: a pair's two trials at the same moment on two cores "
        f"(duet), one after the other, or {AUTO}: whichever measured more precise per second here",
        _plain(
            lambda node, field: Schedule(nodes.choice(node, field, tuple(Schedule), "schedule"))
        ),
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
    items: nodes.Items, root: Node, target_pct: float | None, budget_s: float | None, warmup: int
) -> None:
    """trials: budget takes its rounds from budget_s at the warm-up's pace, and decides nothing on
    its data, so it needs both and has no precision target."""
    where = items["trials"][0]
    if budget_s is None:
        nodes.fail(where, "trials", "trials: budget needs budget_s (the rounds are what it holds)")
    if warmup < 1:
        nodes.fail(where, "trials", "trials: budget needs warmup >= 1 (its pace sets the rounds)")
    if target_pct is not None:
        nodes.fail(
            items["precision"][0],
            "precision",
            f"only with trials: {AUTO} (trials: budget fixes its rounds, it adds none)",
        )


def _plan_rules(
    items: nodes.Items, target_pct: float | None, budget_s: float | None, max_rounds: int
) -> None:
    """trials: plan plans its rounds within budget_s, none fewer than MIN_PLANNED_ROUNDS a cell, and
    decides nothing on its data."""
    where = items["trials"][0]
    if budget_s is None:
        nodes.fail(where, "trials", "trials: plan needs budget_s (the most its rounds may take)")
    if max_rounds < MIN_PLANNED_ROUNDS:
        nodes.fail(
            items["max_rounds"][0],
            "max_rounds",
            f"with trials: plan, at least {MIN_PLANNED_ROUNDS} (a planned cell's fewest rounds)",
        )
    if target_pct is not None:
        nodes.fail(
            items["precision"][0],
            "precision",
            f"only with trials: {AUTO} (trials: plan fixes its rounds, it adds none)",
        )


def schema_text() -> str:
    """The experiment file's schema: every top-level key with an example value and what it takes."""
    return "\n".join(line for key in KEYS for line in key.schema_lines())


def _experiment(root: Node, text: str, file: str, sha256: str, check_paths: bool) -> Experiment:
    if not isinstance(root, MappingNode):
        nodes.fail(
            root,
            "experiment",
            f"expected a mapping of {nodes.listed(TOP_KEYS)}, got {nodes.describe(root)}",
        )
    items = nodes.mapping(root, "", TOP_KEYS)
    for name in _REQUIRED:
        nodes.required(items, name, root, "")
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
