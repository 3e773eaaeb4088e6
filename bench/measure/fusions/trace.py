"""A model's prefill and decode step as MLX's own trace of them (`mx.export_function`), exactly as
the runner calls the model (measure.worker.prefill: the prompt in chunks that evaluate the KV
cache, then its last token for the logits; then one decode step).

Each call is traced on a copy of the cache as it stands at that point, so the trace sees the real
shapes and offsets, and the model's own call follows on another copy: its outputs check the replay
(measure.fusions.replay), and its lazy graph, read before evaluation, holds a `Compiled...` node for
every call the model's code makes of an `mx.compile`d function (a trace shows those inlined).
During the model's own call each module's first call, and each distinct call of a registered op, is
recorded, then traced on its own: what says which module, and which op, a chain comes from.
"""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from fusebench.models.loading import AnyModel, SwitchedModel
from fusebench.models.registry import REGISTRY

from ...core.fusion import Primitive, StepGraph, Tensor
from ..worker import greedy

COMPILED_NODE = re.compile(r'label ="Compiled(\w+)"')


@dataclass
class StepCall:
    """One traced call of the model: its graph, the values of its sources, what the model's own call
    returned, and the compiled calls its code made (each a `Compiled...` node's primitive names)."""

    graph: StepGraph
    sources: dict[str, mx.array]
    own_outputs: list[mx.array]
    compiled: list[str]
    modules: list[StepGraph] = field(default_factory=list)
    # each distinct call of a registered op (fusebench.models.ops), traced alone: (op, its graph)
    ops: list[tuple[str, StepGraph]] = field(default_factory=list)


def _frozen(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, mx.Dtype):
        return _dtype_name(value)
    return value


def _dtype_name(dtype: mx.Dtype) -> str:
    return str(dtype).removeprefix("mlx.core.")


def _tensor(entry: tuple[str, tuple[int, ...], mx.Dtype]) -> Tensor:
    name, shape, dtype = entry
    return Tensor(name, tuple(shape), _dtype_name(dtype))


def trace(call: str, fn: Callable[..., Any], args: Sequence[mx.array]) -> StepCall:
    """`fn(*args)` as MLX traces it (its outputs: a list of arrays)."""
    nodes: list[dict[str, Any]] = []
    mx.export_function(nodes.append, fn, *args)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        by_type.setdefault(node["type"], []).append(node)
    inputs = [_tensor(t) for t in by_type["inputs"][0]["inputs"]]
    constants = by_type.get("constants", [{"constants": []}])[0]["constants"]
    sources = {t.name: value for t, value in zip(inputs, args, strict=True)}
    sources.update({name: value for name, value in constants})
    primitives = tuple(
        Primitive(
            node["name"],
            _frozen(node["arguments"]),
            tuple(_tensor(t) for t in node["inputs"]),
            tuple(_tensor(t) for t in node["outputs"]),
        )
        for node in by_type.get("primitive", [])
    )
    source_tensors = [*inputs]
    source_tensors += [Tensor(name, tuple(v.shape), _dtype_name(v.dtype)) for name, v in constants]
    outputs = tuple(name for name, _, _ in by_type["outputs"][0]["outputs"])
    return StepCall(StepGraph(call, tuple(source_tensors), outputs, primitives), sources, [], [])


def compiled_nodes(arrays: Sequence[mx.array]) -> list[str]:
    """The `Compiled...` nodes of the arrays' lazy graph, each as the names after `Compiled`."""
    buffer = io.StringIO()
    mx.export_to_dot(buffer, *arrays)
    return COMPILED_NODE.findall(buffer.getvalue())


def _weights(model: AnyModel) -> nn.Module:
    return model.model if isinstance(model, SwitchedModel) else model


@dataclass
class _RecordedCall:
    """One call made while the model ran, kept to be traced alone: a module's or an op's."""

    label: str  # "layers.0.mlp (MLP)", or the op's name
    origin: str  # "mlx_lm.models.qwen3.MLP"; "" where its call takes more than arrays, or an op
    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _kept(value: Any) -> Any:
    """An argument as it stood at the call: arrays are immutable, caches are copied."""
    return value if isinstance(value, (mx.array, nn.Module)) else copy.deepcopy(value)


@contextmanager
def _recording(model: AnyModel) -> Iterator[list[_RecordedCall]]:
    """Each submodule's first call (its arguments as they stood), while the block runs."""
    root = _weights(model)
    paths = {id(m): path for path, m in root.named_modules()}
    calls: dict[str, _RecordedCall] = {}
    classes = {type(m) for m in root.modules()}
    originals = {cls: cls.__dict__["__call__"] for cls in classes if "__call__" in cls.__dict__}

    def patched(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            path = paths.get(id(self))
            if path is not None and path not in calls:
                cls = type(self)
                label, origin = f"{path} ({cls.__name__})", f"{cls.__module__}.{cls.__qualname__}"
                if not all(isinstance(a, mx.array) for a in [*args, *kwargs.values()]):
                    origin = ""  # a call mx.compile cannot wrap (a cache, a mask's name): none
                kept = tuple(_kept(a) for a in args), {k: _kept(v) for k, v in kwargs.items()}
                calls[path] = _RecordedCall(label, origin, self, *kept)
            return original(self, *args, **kwargs)

        return call

    found: list[_RecordedCall] = []
    for cls, original in originals.items():
        cls.__call__ = patched(original)
    try:
        yield found
    finally:
        for cls, original in originals.items():
            cls.__call__ = original
        found.extend(calls.values())


@contextmanager
def _recording_ops(model: AnyModel) -> Iterator[list[_RecordedCall]]:
    """Each distinct call (by its arrays' shapes) of every op of the model's op table, while the
    block runs."""
    table = model.op_table
    held = {op: getattr(table, op) for op in REGISTRY if hasattr(table, op)}
    calls: dict[tuple[Any, ...], _RecordedCall] = {}

    def recording(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            shapes = tuple(
                tuple(a.shape) for a in [*args, *kwargs.values()] if isinstance(a, mx.array)
            )
            kept = tuple(_kept(a) for a in args), {k: _kept(v) for k, v in kwargs.items()}
            calls.setdefault((op, shapes), _RecordedCall(op, "", fn, *kept))
            return fn(*args, **kwargs)

        return call

    found: list[_RecordedCall] = []
    for op, fn in held.items():
        setattr(table, op, recording(op, fn))
    try:
        yield found
    finally:
        for op, fn in held.items():
            setattr(table, op, fn)
        found.extend(calls.values())


def _call_graph(call: _RecordedCall) -> StepGraph | None:
    """One recorded call traced alone; None where it cannot be (no array in or out)."""
    positions = [i for i, a in enumerate(call.args) if isinstance(a, mx.array)]
    if not positions:
        return None

    def run(*arrays: mx.array) -> list[mx.array]:
        args = [a if isinstance(a, mx.array) else _kept(a) for a in call.args]
        for i, array in zip(positions, arrays, strict=True):
            args[i] = array
        kwargs = {k: _kept(v) for k, v in call.kwargs.items()}
        out = call.function(*args, **kwargs)
        return [v for _, v in tree_flatten(out) if isinstance(v, mx.array)]

    try:
        graph = trace(call.label, run, [call.args[i] for i in positions]).graph
        return replace(graph, origin=call.origin)
    except (ValueError, TypeError, RuntimeError):  # no array out, or a call that will not trace
        return None


def _traced_call(
    model: AnyModel,
    phase: str,
    cache: list,
    tokens: mx.array,
    outputs_of: Callable[[mx.array, list], list[mx.array]],
) -> StepCall:
    def run(tokens: mx.array) -> list[mx.array]:
        copied = copy.deepcopy(cache)
        return outputs_of(model(tokens, cache=copied), copied)

    found = trace(phase, run, [tokens])
    copied = copy.deepcopy(cache)
    with _recording(model) as modules, _recording_ops(model) as ops:
        own = outputs_of(model(tokens, cache=copied), copied)
    found.compiled = compiled_nodes(own)
    mx.eval(own)
    found.own_outputs = own
    found.modules = [g for g in map(_call_graph, modules) if g is not None]
    traced_ops = [(call.label, _call_graph(call)) for call in ops]
    found.ops = [(op, graph) for op, graph in traced_ops if graph is not None]
    return found


def _cache_state(cache: list) -> list[mx.array]:
    return [v for _, v in tree_flatten([c.state for c in cache]) if isinstance(v, mx.array)]


def _last_logits(logits: mx.array, cache: list) -> list[mx.array]:
    return [logits[:, -1, :]]


def step_calls(model: AnyModel, prompt: mx.array, step: int) -> dict[str, list[StepCall]]:
    """Every call of one prefill of `prompt` (chunks of `step` tokens, as the runner's) and of the
    decode step after it, traced."""
    cache = model.make_cache()
    prefill: list[StepCall] = []
    while prompt.shape[1] > 1:
        n = min(step, prompt.shape[1] - 1)
        chunk = prompt[:, :n]
        prefill.append(_traced_call(model, "prefill", cache, chunk, lambda _, c: _cache_state(c)))
        model(chunk, cache=cache)
        mx.eval(_cache_state(cache))
        prompt = prompt[:, n:]
    prefill.append(_traced_call(model, "prefill", cache, prompt, _last_logits))
    token = greedy(model(prompt, cache=cache)[:, -1, :])
    mx.eval(token)
    decode = _traced_call(model, "decode", cache, token[:, None], _last_logits)
    return {"prefill": prefill, "decode": [decode]}
