"""Where a step's time goes: each switchable op's seconds in one prefill and in one decode step.

The calls are not declared but traced: one prefill and one decode step run with every op of the
model's op table wrapped by a recorder, so the shapes, arguments and calls per step are the ones the
model really makes at the cell's depth and workload (KV-shared layers, PLE gates, the logits of the
last position only). A recorded call counts only if its output was computed: the prefill evaluates
just the KV cache for all but the last prompt token, as mlx-lm does, so calls whose outputs reach
only the unevaluated logits (the softcap over 127 positions, and KV-shared layers, which feed no
cache) never run and are left out. Liveness is read from the graph itself: an evaluated array is a
leaf of mx.export_to_dot, one never computed still has its primitive.

Each distinct call (op, argument shapes and static arguments) is then timed on its own with the
captured inputs, for every implementation of its op that the experiment's variants use, in
interleaved rounds as `fusebench ops` times (opbench.time_calls: each call evaluated on its own).
Each sample also pays mx.eval's fixed cost, which a call inside the model's one graph does not;
every round measures that cost on a one-element add (`overhead_s`) so the analysis can subtract it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from fusebench.models.gemma4 import Model
from fusebench.models.ops import REGISTRY

from ...core.cell import ShareTime
from ..run.schedules.order import round_order
from .opbench import MIN_SAMPLE_S, Inputs, time_calls

# What one mx.eval costs on a 2-core CPU, to size the overhead's sample like the others
# (~min_sample_s long).
EVAL_COST_GUESS_S = 20e-6


@dataclass
class TracedCall:
    """One distinct op call of a step: its captured inputs, and how many times the step makes it."""

    op: str
    label: str
    inputs: Inputs
    calls: int = 1


def _describe(value: Any) -> Any:
    """What identifies an argument: an array by shape and dtype, anything else by value."""
    if isinstance(value, mx.array):
        return ("array", tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(_describe(v) for v in value)
    return value


def _label(inputs: Inputs) -> str:
    arrays = [
        v for v in [*inputs.args, *inputs.kwargs.values()] if isinstance(v, mx.array) and v.ndim > 1
    ]
    shapes = " ".join("[" + ",".join(str(d) for d in a.shape) + "]" for a in arrays)
    dtypes = {str(a.dtype).removeprefix("mlx.core.") for a in arrays} - {"float32"}
    return f"{shapes} {'/'.join(sorted(dtypes))}".strip()


def _computed(array: mx.array) -> bool:
    """Whether the array has been evaluated: an evaluated array is a leaf, with no primitive left in
    its graph."""
    buffer = io.StringIO()
    mx.export_to_dot(buffer, array)
    return "label" not in buffer.getvalue()


@dataclass
class _Recorder:
    """Wraps every op of a model's op table; keeps each call's inputs and output."""

    model: Model
    seen: list[tuple[str, Inputs, mx.array]] = field(default_factory=list)

    @contextmanager
    def recording(self) -> Iterator[None]:
        table = self.model.op_table
        originals = {op: getattr(table, op) for op in REGISTRY if hasattr(table, op)}
        for op, fn in originals.items():
            setattr(table, op, self._wrap(op, fn))
        try:
            yield
        finally:
            for op, fn in originals.items():
                setattr(table, op, fn)

    def _wrap(self, op: str, fn: Callable[..., mx.array]) -> Callable[..., mx.array]:
        def record(*args: Any, **kwargs: Any) -> mx.array:
            out = fn(*args, **kwargs)
            self.seen.append((op, Inputs(list(args), dict(kwargs)), out))
            return out

        return record

    def computed_calls(self) -> list[TracedCall]:
        """The distinct calls whose output was evaluated, in first-call order, each with its
        count."""
        distinct: dict[tuple[Any, ...], TracedCall] = {}
        labels: set[tuple[str, str]] = set()
        for op, inputs, out in self.seen:
            if not _computed(out):
                continue
            key = (op, _describe(inputs.args), _describe(sorted(inputs.kwargs.items())))
            if key in distinct:
                distinct[key].calls += 1
                continue
            # Calls that differ only in what the label leaves out (a weight or none, an eps) stay
            # apart.
            label, copy = _label(inputs), 1
            while (op, label if copy == 1 else f"{label} #{copy}") in labels:
                copy += 1
            label = label if copy == 1 else f"{label} #{copy}"
            labels.add((op, label))
            distinct[key] = TracedCall(op, label, inputs)
        return list(distinct.values())


def trace_steps(
    model: Model,
    prompt: mx.array,
    run_prefill: Callable[[Model, mx.array, list], mx.array],
) -> dict[str, list[TracedCall]]:
    """The computed op calls of one prefill of `prompt` and of the decode step after it."""
    cache = model.make_cache()
    prefill = _Recorder(model)
    with prefill.recording():
        logits = run_prefill(model, prompt, cache)
        token = mx.argmax(logits, axis=-1)
        mx.eval(token)
    decode = _Recorder(model)
    with decode.recording():
        mx.eval(mx.argmax(model(token[:, None], cache=cache)[:, -1, :], axis=-1))
    return {"prefill": prefill.computed_calls(), "decode": decode.computed_calls()}


def _eval_overhead(iterations: int) -> float:
    tiny = mx.zeros((1,))
    mx.eval(tiny)
    return time_calls(lambda x: x + 1, Inputs([tiny], {}), iterations)


class ShareTimer:
    """The traced calls of a cell, each warmed up once for every implementation of its op that the
    experiment's variants use (which pays mx.compile's JIT) and given one call count per sample for
    all of them, so each sample spans >= min_sample_s; then timed round by round, implementations
    interleaved as in `fusebench ops`."""

    def __init__(
        self,
        traced: Mapping[str, list[TracedCall]],
        implementations: Mapping[str, Iterable[str]],
        min_sample_s: float = MIN_SAMPLE_S,
    ) -> None:
        self.plans = [
            _Plan.warm(phase, call, list(dict.fromkeys(implementations[call.op])), min_sample_s)
            for phase, calls in traced.items()
            for call in calls
        ]
        self.overhead_iterations = max(1, round(min_sample_s / EVAL_COST_GUESS_S))

    def time_round(self, round_index: int) -> Iterator[ShareTime]:
        overhead = _eval_overhead(self.overhead_iterations)
        for plan in self.plans:
            for name in round_order(plan.names, round_index):
                seconds = time_calls(
                    REGISTRY[plan.call.op].variants[name], plan.call.inputs, plan.iterations
                )
                yield ShareTime(
                    plan.phase,
                    plan.call.op,
                    name,
                    plan.call.label,
                    plan.call.calls,
                    round_index,
                    seconds,
                    overhead,
                )


@dataclass(frozen=True)
class _Plan:
    phase: str
    call: TracedCall
    names: list[str]
    iterations: int

    @classmethod
    def warm(cls, phase: str, call: TracedCall, names: list[str], min_sample_s: float) -> _Plan:
        fns = [REGISTRY[call.op].variants[name] for name in names]
        mx.eval([fn(*call.inputs.args, **call.inputs.kwargs) for fn in fns])
        fastest = min(time_calls(fn, call.inputs, 1) for fn in fns)
        return cls(phase, call, names, max(1, round(min_sample_s / max(fastest, 1e-9))))
