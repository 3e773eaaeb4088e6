"""A model step as MLX traced it, as plain data, and the records `fusebench fusions` writes.

`mx.export_function` hands its callback one dict per primitive of the traced graph: MLX's
primitive class (`Tanh`, `Matmul`, ...), its state (`arguments`: a broadcast's shape, a cast's
dtype) and its input and output arrays by name, shape and dtype. measure.fusions.trace turns those
into the frozen types here, so that finding fusible chains (analysis.fusions) needs neither mlx nor
a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from .cell import ShareTime
from .typed import FLAT

# Bytes per element of the dtypes a model step holds (mlx.core's names, without the module).
ITEMSIZE = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "uint16": 2,
    "int16": 2,
    "float16": 2,
    "bfloat16": 2,
    "uint32": 4,
    "int32": 4,
    "float32": 4,
    "uint64": 8,
    "int64": 8,
    "float64": 8,
    "complex64": 8,
}
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class Tensor:
    """One array of a traced graph: its name in the trace, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ITEMSIZE.get(self.dtype, 4)

    @property
    def label(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"[{dims}]" + ("" if self.dtype == "float32" else f" {self.dtype}")


@dataclass(frozen=True)
class Primitive:
    """One node of the graph: MLX's primitive, its state, and the arrays it reads and writes."""

    name: str
    arguments: tuple[object, ...]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]


@dataclass(frozen=True)
class StepGraph:
    """One traced call of the model (or of one of its modules), primitives in topological order.
    `sources` are the arrays no primitive makes: the call's inputs and the constants (weights,
    caches) it closes over."""

    call: str  # "prefill" or "decode" for a step; `path (Class)` for one module's call
    sources: tuple[Tensor, ...]
    outputs: tuple[str, ...]
    primitives: tuple[Primitive, ...]
    # a module's call: its class, `mlx_lm.models.qwen3.MLP`, where the call takes arrays alone
    # (mx.compile can wrap it)
    origin: str = ""


@dataclass(frozen=True, kw_only=True)
class FusionRecord:
    """One candidate of `fusebench fusions`: a chain of fusible primitives, how often a step
    makes it, what fusing it would save, and what compiling it did. Its timed samples are `op`
    records (op `fusion`, variants `eager` and `compiled`, `shape_label` its `candidate`), and the
    steps it is weighed against `step` records."""

    KIND: ClassVar[str] = "fusion"

    run_id: str
    model: str  # the model's label, as a run's tables name it
    candidate: str  # a short name unique within the model: `c3`
    chain: str  # its primitives in order, `Divide -> Tanh -> Multiply`
    where: str  # the module that makes it, `MLP (layers.*.mlp)`, or "spans modules"
    # the class whose call makes it and takes arrays alone, `mlx_lm.models.qwen3.MLP`; "" where
    # none does (a call with a cache or a mask's name, or none holds the chain whole)
    origin: str
    op: str  # the registered op whose call makes it (fusebench.models.ops); "" where none does
    calls: dict[str, int]  # per phase (prefill, decode): occurrences in one step
    shapes: str  # its inputs' shapes
    bytes_saved: int  # per occurrence: intermediates a fused kernel neither writes nor reads
    compiled_by_model: str  # "whole", "part" or "no": the model's own code compiles it already
    kernels: int  # the kernels mx.compile made of it here (1: fused whole)
    max_abs_err: float  # compiled against eager, on the step's own inputs
    inputs_from: str  # "step": the step's own values (the replay held); "random" otherwise
    # compiled with mx.compile(shapeless=True) (`fusions --shapeless`), as mlx-lm compiles its
    # activations; else as mx.compile compiles by default (a kernel for the call's shapes)
    shapeless: bool = False


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One timed step of the model `fusebench fusions` weighs its candidates against: a prefill
    of the workload's prompt, or one decode step (the mean of the round's decode steps)."""

    KIND: ClassVar[str] = "step"

    run_id: str
    model: str
    phase: str  # "prefill" or "decode"
    round: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class ReplayRecord:
    """How far the step rebuilt from its trace lies from the model's own call: what says that the
    chains timed are the chains the model computes. `missing`: the primitives the rebuild lacks
    (then no error is known, and the candidates are timed on random inputs)."""

    KIND: ClassVar[str] = "replay"

    run_id: str
    model: str
    phase: str
    primitives: int
    max_abs_err: float | None
    missing: tuple[str, ...] = field(default=())


@dataclass(frozen=True, kw_only=True)
class ConfirmRecord:
    """A chain's op switched, measured end to end by `fusions --confirm` (one metric): the Δ of the
    model with `op` at `variant` against the model as it ran, from the run in `results`. The op is
    a registered one, or one the plugin declares for a class's call (`origin`)."""

    KIND: ClassVar[str] = "confirm"

    run_id: str
    model: str
    origin: str  # the class whose call is compiled, `mlx_lm.models.gemma3_text.MLP`; "": an op's
    op: str  # the op switched: a registered one, or the one the plugin declares for the class
    variant: str  # the op's implementation in the confirming variant
    candidates: tuple[str, ...]  # the chains its call makes
    metric: str  # "prefill" or "gen"
    delta_pct: float
    low_pct: float  # the run's Holm-adjusted 95% interval
    high_pct: float
    verdict: str
    rounds: int
    results: str  # the confirming run's results file
    plugin: str  # the plugin that declares the op: `--plugin` reuses it
    # the phase's peak memory with the class compiled less as written (medians); None: unrecorded
    peak_change_bytes: float | None = None


@dataclass(frozen=True, kw_only=True)
class VariantRecord:
    """An implementation of a chain's op, timed at that op's own calls in the step (`fusions`), as
    the op shares time them: every registered variant of the op, a plugin's among them, against the
    one the model ran (`running`)."""

    KIND: ClassVar[str] = "variant"

    run_id: str
    model: str
    running: str
    share: ShareTime = field(metadata=FLAT)
