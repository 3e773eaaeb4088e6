"""A traced graph computed again, primitive by primitive, from the mlx call each primitive stands
for: how `fusebench fusions` rebuilds a candidate chain to time it, and how it gets the step's own
values at each chain's inputs (the whole step replayed from its inputs and constants).

The rules below are the inverse of mlx's Python API for the primitives a model step makes on the
backends fusebench has traced (CPU: mx.fast's kernels trace as their fallback graphs). A primitive
without a rule is named (`missing`), and the command says what it could not check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import mlx.core as mx

from ...core.fusion import Primitive, StepGraph

Rule = Callable[[Primitive, list[mx.array]], mx.array]


def mx_dtype(name: object) -> mx.Dtype:
    """The mlx dtype a trace names (`float32`, `bool`)."""
    return mx.bool_ if name == "bool" else getattr(mx, str(name))


def _unary(fn: Callable[[mx.array], mx.array]) -> Rule:
    return lambda p, xs: fn(xs[0])


def _binary(fn: Callable[[mx.array, mx.array], mx.array]) -> Rule:
    return lambda p, xs: fn(xs[0], xs[1])


def _shaped(fn: Callable[[Primitive, list[mx.array]], mx.array]) -> Rule:
    """A rule whose mlx call drops or keeps axes its own way: reshaped to the traced output."""
    return lambda p, xs: fn(p, xs).reshape(p.outputs[0].shape)


def _slices(p: Primitive, first: int) -> tuple[slice, ...]:
    starts, stops, strides = p.arguments[first : first + 3]
    return tuple(slice(a, b, s) for a, b, s in zip(starts, stops, strides, strict=True))


def _slice_update(p: Primitive, xs: list[mx.array]) -> mx.array:
    starts, _, strides = p.arguments[1:4]
    if p.arguments[0] != 4 or any(s != 1 for s in strides):
        raise NotImplementedError("SliceUpdate with a reduction or strides")
    axes = list(range(xs[0].ndim))
    return mx.slice_update(xs[0], xs[1], mx.array(list(starts)), axes)


def _gather(p: Primitive, xs: list[mx.array]) -> mx.array:
    axes, sizes = p.arguments
    source, *indices = xs
    full = all(size == source.shape[axis] for axis, size in enumerate(sizes) if axis not in axes)
    if len(axes) != 1 or len(indices) != 1 or not full:
        raise NotImplementedError("Gather over several axes or partial slices")
    return mx.take(source, indices[0], axis=axes[0])


_REDUCE = {0: mx.all, 1: mx.any, 2: mx.sum, 3: mx.prod, 4: mx.min, 5: mx.max}
_SCAN = {0: mx.cummax, 1: mx.cummin, 2: mx.cumsum, 3: mx.cumprod}
_BITWISE = {
    0: mx.bitwise_and,
    1: mx.bitwise_or,
    2: mx.bitwise_xor,
    3: mx.left_shift,
    4: mx.right_shift,
}
_LOG = {0: mx.log2, 1: mx.log10, 2: mx.log}

RULES: dict[str, Rule] = {
    **{
        name: _unary(fn)
        for name, fn in {
            "Abs": mx.abs,
            "ArcCos": mx.arccos,
            "ArcSin": mx.arcsin,
            "ArcTan": mx.arctan,
            "Ceil": mx.ceil,
            "Cos": mx.cos,
            "Cosh": mx.cosh,
            "Erf": mx.erf,
            "ErfInv": mx.erfinv,
            "Exp": mx.exp,
            "Expm1": mx.expm1,
            "Floor": mx.floor,
            "Log1p": mx.log1p,
            "LogicalNot": mx.logical_not,
            "Negative": mx.negative,
            "Round": mx.round,
            "Sigmoid": mx.sigmoid,
            "Sign": mx.sign,
            "Sin": mx.sin,
            "Sinh": mx.sinh,
            "Square": mx.square,
            "StopGradient": mx.stop_gradient,
            "Tan": mx.tan,
            "Tanh": mx.tanh,
        }.items()
    },
    **{
        name: _binary(fn)
        for name, fn in {
            "Add": mx.add,
            "ArcTan2": mx.arctan2,
            "Divide": mx.divide,
            "FloorDivide": mx.floor_divide,
            "Greater": mx.greater,
            "GreaterEqual": mx.greater_equal,
            "Less": mx.less,
            "LessEqual": mx.less_equal,
            "LogAddExp": mx.logaddexp,
            "LogicalAnd": mx.logical_and,
            "LogicalOr": mx.logical_or,
            "Matmul": mx.matmul,
            "Maximum": mx.maximum,
            "Minimum": mx.minimum,
            "Multiply": mx.multiply,
            "NotEqual": mx.not_equal,
            "Power": mx.power,
            "Remainder": mx.remainder,
            "Subtract": mx.subtract,
        }.items()
    },
    "Equal": lambda p, xs: mx.equal(xs[0], xs[1]),
    "BitwiseBinary": lambda p, xs: _BITWISE[p.arguments[0]](xs[0], xs[1]),
    "Log": lambda p, xs: _LOG[p.arguments[0]](xs[0]),
    "Sqrt": lambda p, xs: (mx.rsqrt if p.arguments[0] else mx.sqrt)(xs[0]),
    "Select": lambda p, xs: mx.where(xs[0], xs[1], xs[2]),
    "AsType": lambda p, xs: xs[0].astype(mx_dtype(p.arguments[0])),
    "Broadcast": lambda p, xs: mx.broadcast_to(xs[0], p.outputs[0].shape),
    "Full": lambda p, xs: mx.broadcast_to(xs[0], p.outputs[0].shape),
    "Reshape": lambda p, xs: xs[0].reshape(p.outputs[0].shape),
    "Flatten": lambda p, xs: xs[0].reshape(p.outputs[0].shape),
    "Unflatten": lambda p, xs: xs[0].reshape(p.outputs[0].shape),
    "ExpandDims": lambda p, xs: xs[0].reshape(p.outputs[0].shape),
    "Squeeze": lambda p, xs: xs[0].reshape(p.outputs[0].shape),
    "Transpose": lambda p, xs: mx.transpose(xs[0], p.arguments[0]),
    "Slice": lambda p, xs: xs[0][_slices(p, 0)],
    "SliceUpdate": _slice_update,
    "Concatenate": lambda p, xs: mx.concatenate(xs, axis=p.arguments[0]),
    "Reduce": _shaped(lambda p, xs: _REDUCE[p.arguments[0]](xs[0], axis=p.arguments[1])),
    "Softmax": lambda p, xs: mx.softmax(xs[0], axis=-1, precise=bool(p.arguments[0])),
    "Arange": lambda p, xs: mx.arange(*p.arguments, dtype=mx_dtype(p.outputs[0].dtype)),
    "Gather": _shaped(_gather),
    "GatherAxis": lambda p, xs: mx.take_along_axis(xs[0], xs[1], axis=p.arguments[0]),
    "GatherMM": lambda p, xs: mx.gather_mm(
        xs[0], xs[1], xs[2], xs[3], sorted_indices=bool(p.arguments[1])
    ),
    "ArgPartition": lambda p, xs: mx.argpartition(xs[0], p.arguments[0], axis=p.arguments[1]),
    "ArgSort": lambda p, xs: mx.argsort(xs[0], axis=p.arguments[0]),
    "Sort": lambda p, xs: mx.sort(xs[0], axis=p.arguments[0]),
    "ArgReduce": _shaped(
        lambda p, xs: (mx.argmax if p.arguments[0] else mx.argmin)(xs[0], axis=p.arguments[1])
    ),
    "Scan": lambda p, xs: _SCAN[p.arguments[0]](
        xs[0], axis=p.arguments[1], reverse=p.arguments[2], inclusive=p.arguments[3]
    ),
}


def apply(p: Primitive, inputs: list[mx.array]) -> mx.array:
    """The primitive computed again on `inputs`, in its traced output dtype."""
    out = RULES[p.name](p, inputs)
    dtype = mx_dtype(p.outputs[0].dtype)
    return out if out.dtype == dtype else out.astype(dtype)


def missing(primitives: Sequence[Primitive]) -> tuple[str, ...]:
    """The primitives (by name) there is no rule for, or whose rule cannot take their state."""
    return tuple(
        dict.fromkeys(p.name for p in primitives if p.name not in RULES or len(p.outputs) != 1)
    )


def chain_function(
    primitives: Sequence[Primitive], inputs: Sequence[str], outputs: Sequence[str]
) -> Callable[..., list[mx.array]]:
    """A function of the arrays named `inputs` that computes `primitives` in order and returns
    those named `outputs`: a candidate chain as mlx would run it eagerly, or under mx.compile."""

    def chain(*arrays: mx.array) -> list[mx.array]:
        values = dict(zip(inputs, arrays, strict=True))
        for p in primitives:
            values[p.outputs[0].name] = apply(p, [values[t.name] for t in p.inputs])
        return [values[name] for name in outputs]

    return chain


def replay(
    graph: StepGraph, sources: Mapping[str, mx.array], keep: set[str]
) -> tuple[list[mx.array], dict[str, mx.array]]:
    """The graph computed again from its sources: its outputs, and the arrays named in `keep`,
    all evaluated. Raises NotImplementedError where a primitive has no rule."""
    if found := missing(graph.primitives):
        raise NotImplementedError(", ".join(found))
    values = dict(sources)
    readers: dict[str, int] = {}
    for p in graph.primitives:
        for t in p.inputs:
            readers[t.name] = readers.get(t.name, 0) + 1
    kept: dict[str, mx.array] = {}
    for p in graph.primitives:
        out = apply(p, [values[t.name] for t in p.inputs])
        values[p.outputs[0].name] = out
        if p.outputs[0].name in keep:
            kept[p.outputs[0].name] = out
        for t in p.inputs:  # what no later primitive reads is the lazy graph's to hold, not ours
            readers[t.name] -= 1
            if readers[t.name] == 0 and t.name not in graph.outputs:
                values.pop(t.name, None)
    kept.update({name: sources[name] for name in keep if name in sources})
    outputs = [values[name] for name in graph.outputs]
    mx.eval(outputs, list(kept.values()))
    return outputs, kept
