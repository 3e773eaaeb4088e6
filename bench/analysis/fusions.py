"""Which chains of a model step `mx.compile` could fuse, and what fusing each would buy.

- **A group** is a maximal connected set of fusible primitives (which ones are fusible is measured
  on the MLX installed: measure.fusions.probe) with at least two that are not `Broadcast`: a
  broadcast is a view, not a kernel. A broadcast of an array no fusible primitive makes (a constant,
  a norm's reduced scale) joins every group that reads it without joining those groups to each
  other, as it would otherwise tie unrelated chains together through one shared scalar.
- **A chain** (a candidate for fusing) is a group as it recurs: groups with the same primitives,
  state, wiring, shapes and dtypes are one chain, with its count in each phase's step. Its
  **bytes saved** per occurrence: each intermediate array a fused kernel would neither write nor
  read back (one write, one read per reader); broadcasts are views and save nothing.
- **Where it comes from**: the deepest module whose own traced call holds the same group, layer
  indices read as `*`; "spans modules" when no module's call holds it whole.
- **Expected Δ** of a phase's tok/s: per round, the time one fused occurrence saves times the count
  (paired rounds: eager and compiled interleaved), against the step's measured time, by the same
  Amdahl arithmetic and in-model error as the op shares (analysis.shares.amdahl).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..core.fileformat import OpRecord
from ..core.fusion import (
    PHASES,
    ConfirmRecord,
    FusionRecord,
    Primitive,
    StepGraph,
    StepRecord,
    Tensor,
    VariantRecord,
)
from .amdahl import Amdahl, amdahl
from .opstats import VariantSummary

BROADCAST = "Broadcast"
# The variants of a candidate's op records: the chain as the model runs it, and compiled.
EAGER, COMPILED = "eager", "compiled"
FUSION_OP = "fusion"
# Which phase's step each tok/s metric is made of.
METRIC_OF_PHASE = {"prefill": "prefill", "decode": "gen"}


@dataclass(frozen=True)
class Group:
    """One connected set of fusible primitives of a graph, in a canonical topological order."""

    primitives: tuple[Primitive, ...]
    inputs: tuple[Tensor, ...]  # read from outside, in first-read order
    outputs: tuple[Tensor, ...]  # read outside, or outputs of the graph
    intermediates: tuple[tuple[Tensor, int], ...]  # (array, readers), all inside

    @property
    def chain(self) -> str:
        return " -> ".join(p.name for p in self.primitives if p.name != BROADCAST)

    @property
    def bytes_saved(self) -> int:
        return sum(
            tensor.nbytes * (1 + readers)
            for tensor, readers in self.intermediates
            if not _is_view(tensor, self.primitives)
        )

    @property
    def signature(self) -> tuple[object, ...]:
        """What makes two groups the same chain: primitives, state, wiring, shapes and dtypes."""
        index: dict[str, object] = {
            t.name: ("in", k, t.shape, t.dtype) for k, t in enumerate(self.inputs)
        }
        parts = []
        for i, p in enumerate(self.primitives):
            wiring = tuple(index[t.name] for t in p.inputs)
            made = tuple((o.shape, o.dtype) for o in p.outputs)
            parts.append((p.name, p.arguments, wiring, made))
            index.update({o.name: ("node", i, j) for j, o in enumerate(p.outputs)})
        return tuple(parts)


def _is_view(tensor: Tensor, primitives: Sequence[Primitive]) -> bool:
    return any(p.name == BROADCAST and tensor in p.outputs for p in primitives)


def fusible_groups(graph: StepGraph, fusible: frozenset[str]) -> list[Group]:
    """The graph's groups (see the module's docstring), in the order their first primitive runs."""
    prims = graph.primitives
    producer = {o.name: i for i, p in enumerate(prims) for o in p.outputs}
    parent = list(range(len(prims)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def is_fusible(i: int | None) -> bool:
        return i is not None and prims[i].name in fusible

    attached: dict[int, set[int]] = defaultdict(set)
    for i, p in enumerate(prims):
        if not is_fusible(i):
            continue
        for t in p.inputs:
            j = producer.get(t.name)
            if not is_fusible(j):
                continue
            assert j is not None
            if _is_source_broadcast(prims[j], producer, prims, fusible):
                attached[i].add(j)
            else:
                parent[root(i)] = root(j)
    members: dict[int, set[int]] = defaultdict(set)
    for i in range(len(prims)):
        if is_fusible(i) and not _is_source_broadcast(prims[i], producer, prims, fusible):
            members[root(i)].add(i)
    groups = []
    for found in members.values():
        whole = found | {j for i in found for j in attached[i]}
        if sum(prims[i].name != BROADCAST for i in whole) >= 2:
            groups.append(_group(graph, sorted(whole)))
    return groups


def _is_source_broadcast(
    p: Primitive, producer: Mapping[str, int], prims: Sequence[Primitive], fusible: frozenset[str]
) -> bool:
    if p.name != BROADCAST:
        return False
    made_by = producer.get(p.inputs[0].name)
    return made_by is None or prims[made_by].name not in fusible


def _group(graph: StepGraph, indices: Sequence[int]) -> Group:
    prims = [graph.primitives[i] for i in indices]
    inside = {o.name for p in prims for o in p.outputs}
    readers: dict[str, int] = defaultdict(int)
    for p in prims:
        for t in p.inputs:
            readers[t.name] += 1
    outside: set[str] = set(graph.outputs)
    for i, p in enumerate(graph.primitives):
        if i not in set(indices):
            outside.update(t.name for t in p.inputs if t.name in inside)
    ordered = _canonical_order(prims)
    inputs = dict.fromkeys(t for p in ordered for t in p.inputs if t.name not in inside)
    made = [o for p in ordered for o in p.outputs]
    return Group(
        tuple(ordered),
        tuple(inputs),
        tuple(o for o in made if o.name in outside),
        tuple((o, readers[o.name]) for o in made if o.name not in outside),
    )


def _canonical_order(prims: Sequence[Primitive]) -> list[Primitive]:
    """A topological order that depends on the group's structure alone, not on the order the trace
    happened to visit it: among the primitives ready at each point, the one whose whole upstream
    (within the group; shapes and dtypes outside) reads first."""
    by_output = {o.name: p for p in prims for o in p.outputs}
    keys: dict[int, str] = {}

    def key(p: Primitive) -> str:
        if id(p) not in keys:
            ins = [
                key(by_output[t.name]) if t.name in by_output else f"{t.shape}{t.dtype}"
                for t in p.inputs
            ]
            keys[id(p)] = f"{p.name}{p.arguments}({','.join(ins)})"
        return keys[id(p)]

    done: set[str] = set()
    ordered: list[Primitive] = []
    waiting = list(prims)
    while waiting:
        ready = [
            p for p in waiting if all(t.name in done or t.name not in by_output for t in p.inputs)
        ]
        chosen = min(ready, key=key)
        ordered.append(chosen)
        waiting.remove(chosen)
        done.update(o.name for o in chosen.outputs)
    return ordered


@dataclass(frozen=True)
class FusibleChain:
    """A group as it recurs in the steps: its first occurrence and its count per phase."""

    group: Group
    graph: StepGraph  # the call it first occurs in
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def chain(self) -> str:
        return self.group.chain


def fusible_chains(
    steps: Mapping[str, Sequence[StepGraph]], fusible: frozenset[str]
) -> list[FusibleChain]:
    """Every phase's groups (a phase may be several calls of the model, as a chunked prefill is),
    identical ones merged, in the order first met."""
    found: dict[tuple[object, ...], FusibleChain] = {}
    for phase, graphs in steps.items():
        for graph in graphs:
            for group in fusible_groups(graph, fusible):
                candidate = found.setdefault(group.signature, FusibleChain(group, graph))
                candidate.calls[phase] = candidate.calls.get(phase, 0) + 1
    return list(found.values())


LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")


@dataclass(frozen=True)
class Where:
    """Where a chain comes from: in words, and the class whose call makes it."""

    text: str  # "MLP (model.layers.*.mlp)", or "spans modules"
    origin: str  # "mlx_lm.models.gemma3_text.MLP"; "" where no module's call holds it whole


def where(candidate: FusibleChain, modules: Sequence[tuple[StepGraph, list[Group]]]) -> Where:
    """The deepest module whose own call holds the candidate's chain (`call` is `path (Class)`)."""
    holding = [
        graph
        for graph, groups in modules
        if any(g.signature == candidate.group.signature for g in groups)
    ]
    if not holding:
        return Where("spans modules", "")
    deepest = max(holding, key=lambda graph: _depth(graph.call))
    path, _, kind = deepest.call.partition(" ")
    path = LAYER_INDEX.sub(".*", path)
    return Where(f"{kind.strip('()')} ({path})" if path else kind.strip("()"), deepest.origin)


def op_of(candidate: FusibleChain, ops: Sequence[tuple[str, list[Group]]]) -> str:
    """The registered op whose own call holds the candidate's chain; "" where none does."""
    signature = candidate.group.signature
    return next((op for op, groups in ops if any(g.signature == signature for g in groups)), "")


def _depth(call: str) -> int:
    path = call.partition(" ")[0]
    return len(path.split(".")) if path else 0


def module_groups(
    graphs: Iterable[StepGraph], fusible: frozenset[str]
) -> list[tuple[StepGraph, list[Group]]]:
    return [(graph, fusible_groups(graph, fusible)) for graph in graphs]


# --- what a candidate's timings predict -----------------------------------------------------------


@dataclass(frozen=True)
class FusionEstimate:
    """One candidate of one model: the record, the op-level speed of its compiled chain, and per
    metric (prefill, gen) where the step makes it, the expected tok/s Δ of compiling it and its
    eager share of the step (the most any fusion of it could save)."""

    record: FusionRecord
    speed: VariantSummary | None  # compiled against eager, Holm across the model's candidates
    expected: dict[str, Amdahl]
    share_pct: dict[str, float]
    # `--confirm`: its class's call compiled, measured end to end, by metric
    measured: dict[str, ConfirmRecord] = field(default_factory=dict)

    @property
    def largest_pct(self) -> float:
        """The expected Δ of its metrics farthest from 0, either way: how the table ranks it (a
        chain mx.compile slows here matters as much as one it speeds up)."""
        return max((e.delta_pct for e in self.expected.values()), key=abs, default=0.0)


def estimates(
    records: Sequence[FusionRecord],
    samples: Sequence[OpRecord],
    steps: Sequence[StepRecord],
    speeds: Sequence[VariantSummary],
    confirmed: Sequence[ConfirmRecord] = (),
) -> list[FusionEstimate]:
    """Every candidate with its expected Δ per metric, ranked by the one farthest from 0, then by
    its share of the step."""
    step_s: dict[tuple[str, str], list[float]] = defaultdict(list)
    for step in steps:
        step_s[(step.model, step.phase)].append(step.seconds)
    per_round: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for sample in samples:
        per_round[sample.shape_label][sample.round][sample.variant] = sample.seconds
    by_label = {s.shape_label: s for s in speeds if s.variant == COMPILED}
    found = []
    for record in records:
        rounds = per_round[shape_label(record)]
        saved = [r[COMPILED] - r[EAGER] for r in rounds.values() if len(r) == 2]
        eager = statistics.median(r[EAGER] for r in rounds.values() if EAGER in r)
        timed = {
            phase: (count, step_s[(record.model, phase)])
            for phase, count in record.calls.items()
            if count and saved and step_s[(record.model, phase)]
        }
        expected = {
            METRIC_OF_PHASE[phase]: amdahl(steps, [count * s for s in saved])
            for phase, (count, steps) in timed.items()
        }
        share = {
            METRIC_OF_PHASE[phase]: 100 * count * eager / statistics.median(steps)
            for phase, (count, steps) in timed.items()
        }
        measured = {
            c.metric: c
            for c in confirmed
            if c.model == record.model and record.candidate in c.candidates
        }
        found.append(
            FusionEstimate(record, by_label.get(shape_label(record)), expected, share, measured)
        )
    return sorted(found, key=lambda e: (-abs(e.largest_pct), -max(e.share_pct.values(), default=0)))


def shape_label(record: FusionRecord) -> str:
    """A candidate's op records' `shape_label`: its model and its name."""
    return f"{record.model} · {record.candidate}"


def phases_of(record: FusionRecord) -> list[str]:
    return [phase for phase in PHASES if record.calls.get(phase)]


def compiled_by_model(group: Group, compiled: Sequence[str], names: Iterable[str]) -> str:
    """`whole` where a compiled call of the model's own code (a `Compiled...` node of its graph,
    `compiled` holding the names after `Compiled`) holds exactly the group's primitives, `part`
    where one holds two or more of them and nothing else, else `no`. Matched by primitive names:
    a compiled node of another chain with the same names would match too."""
    want = Counter(p.name for p in group.primitives if p.name != BROADCAST)
    held = [Counter(n for n in _split(node, names) if n != BROADCAST) for node in compiled]
    if any(h == want for h in held):
        return "whole"
    if any(h.total() >= 2 and h <= want for h in held):
        return "part"
    return "no"


def _split(node: str, names: Iterable[str]) -> list[str]:
    """`BroadcastMultiplyTanh` -> its primitive names, longest known name first at each point."""
    known = sorted(set(names), key=len, reverse=True)
    found, rest = [], node
    while rest:
        name = next((n for n in known if rest.startswith(n)), None)
        if name is None:  # a primitive this graph does not hold: skip to the next capital
            following = re.search(r"[A-Z]", rest[1:])
            rest = rest[1 + following.start() :] if following else ""
            continue
        found.append(name)
        rest = rest[len(name) :]
    return found


# --- the chains' ops, every variant at their calls ------------------------------------------------


@dataclass(frozen=True)
class VariantEstimate:
    """One implementation of a chain's op against the one the model ran, at the op's calls in the
    step: the tok/s Δ switching to it would give, per metric (analysis.amdahl)."""

    model: str
    op: str
    variant: str
    running: str
    expected: dict[str, Amdahl]
    rounds: int

    @property
    def largest_pct(self) -> float:
        return max((e.delta_pct for e in self.expected.values()), key=abs, default=0.0)


def variant_estimates(
    records: Sequence[VariantRecord], steps: Sequence[StepRecord]
) -> list[VariantEstimate]:
    """Every timed variant of every chain's op, ranked by its expected Δ farthest from 0."""
    step_s: dict[tuple[str, str], list[float]] = defaultdict(list)
    for step in steps:
        step_s[(step.model, step.phase)].append(step.seconds)
    # (model, op, phase) -> (variant, round) -> seconds per step (calls × time, eval cost cancels)
    per_step: dict[tuple[str, str, str], dict[tuple[str, int], float]] = defaultdict(
        lambda: defaultdict(float)
    )
    running: dict[tuple[str, str], str] = {}
    for record in records:
        share = record.share
        running[(record.model, share.op)] = record.running
        key = (record.model, share.op, share.phase)
        per_step[key][(share.variant, share.round)] += share.calls * share.seconds
    found = []
    for (model, op), ran in running.items():
        variants = {
            v for key, times in per_step.items() if key[:2] == (model, op) for v, _ in times
        }
        for variant in sorted(variants - {ran}):
            expected = {}
            rounds = 0
            for phase in PHASES:
                times = per_step.get((model, op, phase))
                steps_here = step_s.get((model, phase))
                if not times or not steps_here:
                    continue
                added = [
                    times[(variant, r)] - times[(ran, r)]
                    for v, r in times
                    if v == variant and (ran, r) in times
                ]
                if added:
                    expected[METRIC_OF_PHASE[phase]] = amdahl(steps_here, added)
                    rounds = len(added)
            found.append(VariantEstimate(model, op, variant, ran, expected, rounds))
    return sorted(found, key=lambda e: -abs(e.largest_pct))
