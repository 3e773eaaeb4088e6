"""How an op is called: the shapes of its calls at a model's sizes, their inputs and their work.

Each op declares this once, next to its variants, with one decorator on an `OpCalls` class:

    @register_calls("geglu")
    class GegluCalls(OpCalls):
        def cases(self, args, batch, length):
            return [OpCase("geglu", "mlp", ((batch, length, args.intermediate_size),) * 2)]

and every tool that calls an op on its own asks that declaration: `fusebench ops` times its cases at
each size and workload of an experiment, `fusebench kernels` (and every run) reads the kernels of
its variants at its kernel cases. Nothing here knows about timing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import mlx.core as mx
from mlx_lm.models.gemma4_text import ModelArgs

from .registry import REGISTRY, OpSpec, check_op


@dataclass(frozen=True)
class OpCase:
    """One op call at one shape, no values. Hashable, so identical calls from several sizes are
    timed once.

    `arrays` are the shapes of the random array arguments, in order; `positional` the remaining
    positional arguments; `keywords` the keyword arguments, as (name, value) pairs. The output has
    the first array's shape. `shown` names the leading arrays the label shows (attention's q and
    kv); empty, the label shows the first array's shape alone. `phase` says prefill or decode where
    the op's kernel depends on it.
    """

    op: str
    role: str
    arrays: tuple[tuple[int, ...], ...]
    dtype: str = "float32"
    positional: tuple[Any, ...] = ()
    keywords: tuple[tuple[str, Any], ...] = ()
    sizes: tuple[str, ...] = field(default=(), compare=False)
    note: str | None = field(default=None, compare=False)
    shown: tuple[str, ...] = field(default=(), compare=False)
    phase: str | None = field(default=None, compare=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.arrays[0]

    @property
    def label(self) -> str:
        if self.shown:
            shapes = " ".join(
                f"{name}{_dims(shape)}"
                for name, shape in zip(self.shown, self.arrays, strict=False)
            )
        else:
            shapes = _dims(self.shape)
        dtype = "" if self.dtype == "float32" else f" {self.dtype}"
        return f"{'/'.join(self.sizes)} {self.role} {shapes}{dtype}".strip()

    @property
    def call(self) -> tuple[object, ...]:
        """What the variants are called with: two cases with the same call differ in name only."""
        return self.arrays, self.dtype, self.positional, self.keywords


def _dims(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]" if shape else ""


@dataclass
class Inputs:
    """The arguments of one call, as the model passes them."""

    args: list[Any]
    kwargs: dict[str, Any]

    @property
    def nbytes(self) -> int:
        values = [*self.args, *self.kwargs.values()]
        return sum(v.nbytes for v in values if isinstance(v, mx.array))

    @property
    def arrays(self) -> list[mx.array]:
        return [v for v in [*self.args, *self.kwargs.values()] if isinstance(v, mx.array)]


@dataclass
class ProbeOutcome:
    """What an op's fused-kernel probe found at one call: `status` "fused" (with the output to read
    the kernels from, its inputs already evaluated), "fallback" or "unknown", and why."""

    variant: str
    status: str
    reason: str
    output: mx.array | None = None


class OpCalls(ABC):
    """What the tools that call an op on its own need of it, beyond its variants."""

    # The name of this op's fused-kernel probe, as kernel facts record it; None: the op has none.
    probe_name: ClassVar[str | None] = None

    def probe_fused(self, inputs: Inputs) -> ProbeOutcome:
        """Whether the backend has a fused kernel for this call (ops with a `probe_name`)."""
        raise NotImplementedError(f"{type(self).__name__} declares no fused-kernel probe")

    @abstractmethod
    def cases(self, args: ModelArgs, batch: int, length: int) -> list[OpCase]:
        """Every distinct call of the op in a forward pass of `batch` sequences of `length`
        tokens."""

    def kernel_cases(self, args: ModelArgs, prompt_tokens: int) -> list[OpCase]:
        """The calls whose kernels `fusebench kernels` reads. By default one token's (a decode
        step's): an elementwise op's graph does not depend on the length, and the tensors stay
        small. Same calls under other names once."""
        distinct: dict[tuple[object, ...], OpCase] = {}
        for case in self.cases(args, 1, 1):
            distinct.setdefault(case.call, case)
        return list(distinct.values())

    def inputs(self, case: OpCase, seed: int) -> Inputs:
        """Seeded random arrays in the case's dtype, then its other arguments as given. Lazy:
        nothing is evaluated."""
        dtype = getattr(
            mx, case.dtype
        )  # the dtype names (fusebench.models.config.DTYPES) are mlx's own
        arrays = [
            mx.random.normal(shape, dtype=dtype, key=mx.random.key(seed + i))
            for i, shape in enumerate(case.arrays)
        ]
        return Inputs([*arrays, *case.positional], dict(case.keywords))

    def flops(self, case: OpCase) -> int | None:
        """FLOPs of one call; None where the op is pure data movement, whose GFLOP/s would only
        restate its GB/s."""
        return None


CallsClass = TypeVar("CallsClass", bound=type[OpCalls])


# Each declared op's calls (`register_calls`), with the declaration they belong to: an op declared
# anew (a plugin reloaded, a test's toy op) starts without calls.
CALLS: dict[str, tuple[OpSpec, OpCalls]] = {}


def register_calls(op: str) -> Callable[[CallsClass], CallsClass]:
    """Attach the class's `OpCalls` to the declared `op`; an op's calls are declared once."""

    def attach(cls: CallsClass) -> CallsClass:
        check_op(op)
        if (held := calls_of(op)) is not None:
            raise ValueError(
                f"{op} already has its calls ({type(held).__name__}); they are declared once"
            )
        CALLS[op] = (REGISTRY[op], cls())
        return cls

    return attach


def calls_of(op: str) -> OpCalls | None:
    """The calls of the op as it is declared now, or None."""
    spec, calls = CALLS.get(op, (None, None))
    return calls if spec is not None and REGISTRY.get(op) is spec else None


def calls_by_op() -> dict[str, OpCalls]:
    """Every op that declared its calls, in declaration order."""
    return {op: calls for op in REGISTRY if (calls := calls_of(op)) is not None}
