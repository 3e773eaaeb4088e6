"""`fusebench fusions` for one model: trace its steps, find the fusible chains, check the trace
computes what the model does, time each chain eager against mx.compile at its exact shapes on the
step's own values, and time the steps they are weighed against.

Each chain is timed as `fusebench ops` times an op (opbench.time_calls: each call evaluated on its
own, samples of >= MIN_SAMPLE_S, eager and compiled interleaved ABBA round by round), and its
samples are `op` records, so the op benchmark's paired statistics read them unchanged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import mlx.core as mx

from fusebench.models.calls import Inputs
from fusebench.models.loading import AnyModel
from fusebench.models.ops import REGISTRY

from ...analysis.fusions import (
    COMPILED,
    EAGER,
    FUSION_OP,
    FusibleChain,
    Where,
    compiled_by_model,
    fusible_chains,
    fusible_groups,
    module_groups,
    op_of,
    shape_label,
    where,
)
from ...core.fileformat import OpRecord
from ...core.fusion import FusionRecord, ReplayRecord, StepRecord, VariantRecord
from ..ops.opbench import MIN_SAMPLE_S, time_calls
from ..ops.shares import ShareTimer, trace_steps
from ..run.schedules.order import round_order
from ..worker import make_prompt, prefill, time_trial
from .probe import fusible
from .replay import RULES, chain_function, missing, mx_dtype, replay
from .trace import StepCall, compiled_nodes, step_calls

Emit = Callable[[object], None]


@dataclass(frozen=True)
class FusionWorkload:
    prompt_tokens: int
    gen_tokens: int
    batch: int
    prefill_step_size: int
    seed: int = 0


@dataclass
class Found:
    """A model's candidates (by index below), with what the trace says of each and the inputs each
    is timed on."""

    candidates: list[FusibleChain]
    inputs: dict[int, list[mx.array]]
    random: set[int]  # those whose inputs are random: their step could not be replayed
    where: dict[int, Where]
    op: dict[int, str]
    compiled_by_model: dict[int, str]
    replays: list[ReplayRecord]


def find(run_id: str, label: str, model: AnyModel, workload: FusionWorkload) -> Found:
    """Trace, find, and replay: every candidate of the model's steps with its inputs."""
    prompt = make_prompt(model.vocab_size, workload.batch, workload.prompt_tokens, workload.seed, 0)
    calls = step_calls(model, prompt, workload.prefill_step_size)
    every = [c for phase in calls.values() for c in phase]
    rule = fusible(p for c in every for p in c.graph.primitives)
    found = fusible_chains({phase: [c.graph for c in cs] for phase, cs in calls.items()}, rule)
    modules = module_groups((g for c in every for g in c.modules), rule)
    ops = [(op, fusible_groups(graph, rule)) for c in every for op, graph in c.ops]
    compiled = [node for c in every for node in c.compiled]
    result = Found(
        found,
        {},
        set(),
        {i: where(c, modules) for i, c in enumerate(found)},
        {i: op_of(c, ops) for i, c in enumerate(found)},
        {i: compiled_by_model(c.group, compiled, RULES) for i, c in enumerate(found)},
        [],
    )
    for phase, phase_calls in calls.items():
        for call in phase_calls:
            mine = {i: c for i, c in enumerate(found) if c.graph is call.graph}
            record, values = _replayed(run_id, label, phase, call, mine)
            result.replays.append(record)
            result.inputs.update(values)
            if record.missing:
                result.random.update(mine)
    return result


def _replayed(
    run_id: str, label: str, phase: str, call: StepCall, mine: Mapping[int, FusibleChain]
) -> tuple[ReplayRecord, dict[int, list[mx.array]]]:
    """The call replayed (its candidates' inputs from the step's own values), or where a primitive
    has no rule, those inputs drawn at random."""
    lacking = missing(call.graph.primitives)
    record = ReplayRecord(
        run_id=run_id,
        model=label,
        phase=phase,
        primitives=len(call.graph.primitives),
        max_abs_err=None,
        missing=lacking,
    )
    if lacking:
        return record, {
            i: [_random(t.shape, t.dtype) for t in c.group.inputs] for i, c in mine.items()
        }
    keep = {t.name for c in mine.values() for t in c.group.inputs}
    outputs, kept = replay(call.graph, call.sources, keep)
    error = max(
        (_max_error(a, b) for a, b in zip(outputs, call.own_outputs, strict=True)), default=0.0
    )
    values = {i: [kept[t.name] for t in c.group.inputs] for i, c in mine.items()}
    return ReplayRecord(**{**record.__dict__, "max_abs_err": error}), values


def _random(shape: tuple[int, ...], dtype: str) -> mx.array:
    if dtype == "bool":
        return mx.random.bernoulli(shape=shape)
    if "int" in dtype:
        return mx.random.randint(0, 128, shape).astype(mx_dtype(dtype))
    return mx.random.normal(shape).astype(mx_dtype(dtype))


def _max_error(a: mx.array, b: mx.array) -> float:
    """The largest deviation; equal values (infinities of a mask too) deviate by 0."""
    if a.dtype == mx.bool_:
        return float(mx.sum(a != b).item())
    a, b = a.astype(mx.float32), b.astype(mx.float32)
    return mx.where(a == b, 0.0, mx.abs(a - b)).max().item()


def time_candidates(
    run_id: str,
    label: str,
    model_found: Found,
    rounds: int,
    emit: Emit,
    shapeless: bool = False,
) -> list[FusionRecord]:
    """Each candidate warmed up (paying mx.compile's build of its kernel), then timed in `rounds`
    ABBA rounds, eager against compiled (`shapeless`: as mx.compile(shapeless=True) compiles);
    its record emitted before its samples."""
    records = []
    for index, candidate in enumerate(model_found.candidates):
        group = candidate.group
        args = model_found.inputs[index]
        eager = chain_function(
            group.primitives, [t.name for t in group.inputs], [t.name for t in group.outputs]
        )
        compiled = mx.compile(eager, shapeless=shapeless)
        warm = _warm(eager, compiled, args)
        record = FusionRecord(
            run_id=run_id,
            model=label,
            candidate=f"c{index + 1}",
            chain=group.chain,
            where=model_found.where[index].text,
            origin=model_found.where[index].origin,
            op=model_found.op[index],
            calls=dict(candidate.calls),
            shapes=" ".join(t.label for t in group.inputs if t.shape),
            bytes_saved=group.bytes_saved,
            compiled_by_model=model_found.compiled_by_model[index],
            kernels=warm.kernels,
            max_abs_err=warm.error,
            inputs_from="random" if index in model_found.random else "step",
            shapeless=shapeless,
        )
        records.append(record)
        emit(record)
        variants = {EAGER: eager, COMPILED: compiled}
        inputs = Inputs(list(args), {})
        for round_index in range(rounds):
            for name in round_order([EAGER, COMPILED], round_index):
                seconds = time_calls(variants[name], inputs, warm.iterations)
                emit(_sample(record, name, round_index, seconds, warm, inputs))
    return records


@dataclass(frozen=True)
class _Warm:
    iterations: int
    kernels: int
    error: float
    bytes: int


def _warm(eager: Callable, compiled: Callable, args: list[mx.array]) -> _Warm:
    expected, got = eager(*args), compiled(*args)
    kernels = len(compiled_nodes(got))
    mx.eval(expected, got)
    error = max((_max_error(a, b) for a, b in zip(expected, got, strict=True)), default=0.0)
    written = sum(a.nbytes for a in expected)
    inputs = Inputs(list(args), {})
    fastest = min(time_calls(fn, inputs, 1) for fn in (eager, compiled))
    iterations = max(1, math.ceil(MIN_SAMPLE_S / max(fastest, 1e-9)))
    return _Warm(iterations, kernels, error, inputs.nbytes + written)


def _sample(
    record: FusionRecord,
    variant: str,
    round_index: int,
    seconds: float,
    warm: _Warm,
    inputs: Inputs,
) -> OpRecord:
    return OpRecord(
        run_id=record.run_id,
        op=FUSION_OP,
        variant=variant,
        reference=EAGER,
        shape_label=shape_label(record),
        size=record.model,
        sizes=(record.model,),
        role=record.chain,
        shape=tuple(inputs.args[0].shape) if inputs.args else (),
        arg_shapes=tuple(tuple(a.shape) for a in inputs.args),
        dtype=str(inputs.args[0].dtype).removeprefix("mlx.core.") if inputs.args else "",
        round=round_index,
        iterations=warm.iterations,
        seconds=seconds,
        bytes=warm.bytes,
        flops=None,
        gbps=warm.bytes / seconds / 1e9,
        max_abs_err=0.0 if variant == EAGER else warm.error,
    )


def time_steps(
    run_id: str, label: str, model: AnyModel, workload: FusionWorkload, rounds: int, emit: Emit
) -> None:
    """One warm-up trial, then `rounds` trials as the runner times them: the prefill, and the mean
    decode step of each."""
    for round_index in range(-1, rounds):
        prompt = make_prompt(
            model.vocab_size, workload.batch, workload.prompt_tokens, workload.seed, round_index + 1
        )
        timing = time_trial(model, prompt, workload.gen_tokens, workload.prefill_step_size).measured
        if round_index < 0:
            continue
        seconds = {"prefill": timing.prefill_s or 0.0}
        if timing.step_s:
            seconds["decode"] = statistics.fmean(timing.step_s)
        for phase, value in seconds.items():
            emit(
                StepRecord(
                    run_id=run_id, model=label, phase=phase, round=round_index, seconds=value
                )
            )


def time_op_variants(
    run_id: str,
    label: str,
    model: AnyModel,
    workload: FusionWorkload,
    ops: Sequence[str],
    rounds: int,
    emit: Emit,
) -> None:
    """Every registered variant of `ops` (a plugin's too) timed at those ops' computed calls in one
    prefill and the decode step after it, against the variant the model runs, as the op shares
    time them (measure.ops.shares)."""
    prompt = make_prompt(model.vocab_size, workload.batch, workload.prompt_tokens, workload.seed, 0)
    traced = trace_steps(model, prompt, partial(prefill, step=workload.prefill_step_size))
    kept = {phase: [c for c in calls if c.op in ops] for phase, calls in traced.items()}
    running = model.ops
    implementations = {
        op: [running[op], *(v for v in REGISTRY[op].variants if v != running[op])] for op in ops
    }
    timer = ShareTimer(kept, implementations)
    for round_index in range(rounds):
        for share in timer.time_round(round_index):
            emit(VariantRecord(run_id=run_id, model=label, running=running[share.op], share=share))
