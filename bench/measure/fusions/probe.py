"""What `mx.compile` fuses on this machine, read from the MLX installed rather than copied from its
source: each primitive a step makes is compiled in a two-primitive chain (it, then an add), and
the compiled graph says whether both landed in one `Compiled...` node. Nothing is evaluated (the
inputs stay lazy), so probing a step's primitives costs milliseconds.

On a CPU the fused kernels are C++ built by the system's compiler; where none is found,
`mx.compile` leaves every function as it was, silently (measure.machine.env.compile_fuses tells
which, and every run's environment records it).
"""

from __future__ import annotations

from collections.abc import Iterable

import mlx.core as mx

from ...core.fusion import Primitive
from .replay import RULES, apply, mx_dtype
from .trace import compiled_nodes


def _fuses(p: Primitive) -> bool:
    inputs = [mx.zeros(t.shape, dtype=mx_dtype(t.dtype)) for t in p.inputs]

    def chain(*arrays: mx.array) -> mx.array:
        out = apply(p, list(arrays))
        return mx.logical_not(out) if out.dtype == mx.bool_ else out + out

    try:
        found = compiled_nodes([mx.compile(chain)(*inputs)])
    except (ValueError, RuntimeError):  # a state this probe's zeros cannot take (a gather's index)
        return False
    return any(p.name in node for node in found)


def fusible(primitives: Iterable[Primitive]) -> frozenset[str]:
    """The names of those primitives that mx.compile fuses with a neighbour here."""
    first: dict[str, Primitive] = {}
    for p in primitives:
        if p.name in RULES and len(p.outputs) == 1:
            first.setdefault(p.name, p)
    return frozenset(name for name, p in first.items() if _fuses(p))
