"""A module's call as an op: `eager` (as written), `compiled` (under mx.compile) or `shapeless`
(under mx.compile(shapeless=True), as mlx-lm compiles its activations).

`fusebench fusions --confirm` finds chains inside a module of an mlx-lm model that no registered
op switches; it writes a plugin that declares one op for that module's class with
`compile_call_op`, so the chain is measured end to end, and the plugin is reused like any other
(`--plugin`, `plugins:`). The site is the class's `__call__` (a dotted site name,
fusebench.models.switched), bound only while the model runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from .registry import declare, register
from .sites import register_site

Op = Callable[..., Any]


def compile_call_op(op: str, module: str, cls: str) -> None:
    """Declare `op`: the calls of `module.cls` as mlx-lm wrote them (`eager`) or under mx.compile
    (`compiled`, or `shapeless`: one compiled function per module instance, its weights
    captured; a shapeless one whose call reshapes to a traced shape would compute wrong, which the
    run's correctness check shows). For a class
    whose call takes arrays alone: a constant that changes every step (a cache offset) would
    rebuild the compiled function every step, and mx.compile takes no cache object."""
    declare(
        op,
        f"{cls}.__call__ of {module}, as written or under mx.compile",
        reference="eager",
        default="eager",
    )
    # By the instance's id and the variant, with a weak reference that tells a reused id from its
    # first owner.
    compiled: dict[tuple[int, bool], tuple[weakref.ref, Op]] = {}

    def compiled_call(call: Op, shapeless: bool) -> Op:
        owner = call.__self__  # a bound method: the site passes the instance's call
        held = compiled.get((id(owner), shapeless))
        if held is None or held[0]() is not owner:
            function = mx.compile(call, shapeless=shapeless)
            held = compiled[id(owner), shapeless] = (weakref.ref(owner), function)
        return held[1]

    @register(op, "eager")
    def eager(call: Op, *args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    @register(op, "compiled")
    def compile_call(call: Op, *args: Any, **kwargs: Any) -> Any:
        return compiled_call(call, False)(*args, **kwargs)

    @register(op, "shapeless")
    def compile_shapeless(call: Op, *args: Any, **kwargs: Any) -> Any:
        return compiled_call(call, True)(*args, **kwargs)

    @register_site(op, f"{cls}.__call__", module=module)
    def call_site(variant: Op, original: Op, owner: Any, *args: Any, **kwargs: Any) -> Any:
        return variant(original.__get__(owner), *args, **kwargs)
