"""A module's call as an op: `eager` (as written) or `compiled` (under mx.compile).

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
    (`compiled`: one compiled function per module instance, its weights captured). For a class
    whose call takes arrays alone: a constant that changes every step (a cache offset) would
    rebuild the compiled function every step, and mx.compile takes no cache object."""
    declare(
        op,
        f"{cls}.__call__ of {module}, as written or under mx.compile",
        reference="eager",
        default="eager",
    )
    # By the instance's id, with a weak reference that tells a reused id from its first owner.
    compiled: dict[int, tuple[weakref.ref, Op]] = {}

    @register(op, "eager")
    def eager(call: Op, *args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    @register(op, "compiled")
    def compile_call(call: Op, *args: Any, **kwargs: Any) -> Any:
        owner = call.__self__  # a bound method: the site passes the instance's call
        held = compiled.get(id(owner))
        if held is None or held[0]() is not owner:
            held = compiled[id(owner)] = (weakref.ref(owner), mx.compile(call))
        return held[1](*args, **kwargs)

    @register_site(op, f"{cls}.__call__", module=module)
    def call_site(variant: Op, original: Op, owner: Any, *args: Any, **kwargs: Any) -> Any:
        return variant(original.__get__(owner), *args, **kwargs)
