"""Kernel truth: which kernels really run for each op variant, so that a fused-vs-unfused A/B means
something.

Two probes, both reading MLX rather than trusting names:

- `probe_fused` runs an op's own fused-kernel probe, declared with its calls
  (`fusebench.models.calls.OpCalls.probe_fused`; attention's asks
  `mx.fast.scaled_dot_product_attention` with force_fused=True), at the model's real shapes: the
  backend's choice depends on them (for SDPA the head dim, the query and key lengths, the GQA factor
  and the mask), so nothing is shortened.
- `probe_compiled` builds one variant's lazy graph and lists the primitives `mx.eval` would run,
  read with `mx.export_to_dot`. After `mx.compile`, the graph holds `Compiled...` primitives in
  place of the fused ops; an `mx.fast` op that fell back shows its composed ops instead of its own
  primitive (RMSNorm, RoPE, ScaledDotProductAttention). Nothing is evaluated but the inputs.

The calls probed are each op's kernel cases, from its declaration
(`fusebench.models.calls.OpCalls.kernel_cases`): the same shapes `fusebench ops` times, at one
prompt. Only mlx and models are imported, so the facts can be gathered inside a worker process.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx
from mlx_lm.models.gemma4_text import ModelArgs

from fusebench.models.ops import REGISTRY, Inputs, OpCase, calls_by_op

from ...core.cell import KernelFact
from .shares import TracedCall

# Primitives that only re-describe memory (strides, shape, a view): they launch no kernel. A
# consumer that needs contiguous input may still copy inside its own evaluation; that copy is part
# of the consumer's kernel count.
VIEW_PRIMITIVES = frozenset(
    {
        "AsStrided",
        "Broadcast",
        "BroadcastAxes",
        "Depends",
        "ExpandDims",
        "Flatten",
        "Reshape",
        "Slice",
        "Squeeze",
        "StopGradient",
        "Transpose",
        "Unflatten",
    }
)

# A reshape that merges axes is a view only when the strides allow; of a broadcast or transposed
# input MLX makes a contiguous copy (this is what mx.repeat of the KV heads costs in the manual
# attention path). Unflatten only splits an axis, which any strides allow, so it stays a view. A
# heuristic: a merge that happens to be expressible is still counted as a copy.
RESHAPES = frozenset({"Reshape", "Flatten"})
NON_CONTIGUOUS = frozenset({"Broadcast", "BroadcastAxes", "Transpose"})

# Primitives that are one fused kernel by construction: mx.compile's output and the mx.fast kernels.
FUSED_PRIMITIVES = frozenset(
    {
        "RMSNorm",
        "LayerNorm",
        "RoPE",
        "ScaledDotProductAttention",
        "CustomKernel",
        "CustomMetalKernel",
    }
)

_DOT_NODE = re.compile(r'^\{\s*(\S+)\s*\[label\s*="([^"]*)"', re.MULTILINE)
_DOT_EDGE = re.compile(r"^(\S+)\s*->\s*(\S+)\s*$", re.MULTILINE)


# --------------------------------------------------------------------------------------- backend


@dataclass(frozen=True)
class Backend:
    """Where the probes ran: mlx's default device and what it is backed by."""

    name: str  # "cpu", "metal", "cuda" or "gpu" (a GPU stream of a backend not recognised here)
    device: str  # str(mx.default_device()), e.g. "Device(cpu, 0)"
    mlx_version: str
    metal_available: bool
    cuda_available: bool


def _available(module_name: str) -> bool:
    module = getattr(mx, module_name, None)
    is_available = getattr(module, "is_available", None)
    if is_available is None:
        return False
    try:
        return bool(is_available())
    except Exception:
        return False


def current_backend() -> Backend:
    device = mx.default_device()
    metal, cuda = _available("metal"), _available("cuda")
    gpu_name = "metal" if metal else "cuda" if cuda else "gpu"
    name = gpu_name if device.type == mx.DeviceType.gpu else "cpu"
    return Backend(name, str(device), mx.__version__, metal, cuda)


# --------------------------------------------------------------------------------------- facts


def _stamp(fact: KernelFact) -> KernelFact:
    backend = current_backend()
    return replace(
        fact, backend=backend.name, device=backend.device, mlx_version=backend.mlx_version
    )


# ------------------------------------------------------------------------------- fused-kernel probe


def probe_fused(case: OpCase) -> KernelFact:
    """An op's own fused-kernel probe (its declaration's `probe_fused`) at one of its calls: fused,
    with the kernels that ran, or fallback and the backend's reason."""
    inputs = calls_by_op()[case.op].inputs(case, seed=0)
    return probe_fused_call(case.op, inputs, case.label, case.phase)


def probe_fused_call(op: str, inputs: Inputs, label: str, phase: str | None) -> KernelFact:
    """The same at a call given by its inputs (a traced call's, or a declared case's)."""
    calls = calls_by_op()[op]
    outcome = calls.probe_fused(inputs)
    head_dim = inputs.args[0].shape[-1]  # the first array's last axis (attention: q's head dim)
    fact = KernelFact(
        op,
        outcome.variant,
        str(calls.probe_name),
        label,
        outcome.status,
        outcome.reason,
        phase,
        head_dim,
    )
    if outcome.output is not None:
        nodes = graph_nodes(outcome.output)
        mx.eval(outcome.output)
        kernels = kernel_names(nodes)
        fact = replace(
            fact,
            primitives=tuple(n.primitive for n in nodes),
            reason=f"{outcome.reason} {', '.join(kernels) or 'a fused kernel'}",
            kernels=len(kernels),
            fused=tuple(k for k in kernels if _is_fused(k)),
        )
    return _stamp(fact)


# -------------------------------------------------------------------------------------- graph probe


def _flat_arrays(value: Any) -> list[mx.array]:
    if isinstance(value, mx.array):
        return [value]
    if isinstance(value, Mapping):
        return [a for v in value.values() for a in _flat_arrays(v)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flat_arrays(v)]
    return []


@dataclass(frozen=True)
class GraphNode:
    """One primitive of a lazy graph, with the primitives that produce its inputs (None for an
    evaluated input)."""

    primitive: str
    inputs_from: tuple[str | None, ...]

    @property
    def copies(self) -> bool:
        """A reshape of a broadcast or transposed array: MLX cannot express it as a view and
        copies."""
        return self.primitive in RESHAPES and any(
            p in NON_CONTIGUOUS for p in self.inputs_from if p
        )

    @property
    def works(self) -> bool:
        """Whether evaluating this node launches a kernel (views do not, a copying reshape does)."""
        return self.primitive not in VIEW_PRIMITIVES or self.copies

    @property
    def kernel_name(self) -> str:
        return f"{self.primitive}(copy)" if self.copies else self.primitive


def _export_dot(arrays: Sequence[mx.array]) -> str:
    buffer = io.StringIO()
    try:
        mx.export_to_dot(buffer, *arrays)
        return buffer.getvalue()
    except TypeError:  # an mlx that only writes to a path
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "graph.dot")
            mx.export_to_dot(path, *arrays)
            with open(path) as f:
                return f.read()


def graph_nodes(*outputs: Any) -> list[GraphNode]:
    """The primitives that evaluating `outputs` would run, in evaluation order: the nodes of
    mx.export_to_dot.

    Evaluated arrays are leaves (no primitive), so evaluate the inputs first to see only the op's
    own graph. A `Compiled` primitive's name is "Compiled" followed by the names of the ops it
    fused.
    """
    dot = _export_dot(_flat_arrays(outputs))
    labels: dict[str, str] = {}
    for node, label in _DOT_NODE.findall(dot):
        labels.setdefault(node, label)
    producer: dict[str, str] = {}  # array node -> primitive node
    inputs: dict[str, list[str]] = {node: [] for node in labels}
    for src, dst in _DOT_EDGE.findall(dot):
        if src in labels:
            producer[dst] = src
        elif dst in labels:
            inputs[dst].append(src)
    return [
        GraphNode(label, tuple(labels.get(producer.get(a, "")) for a in inputs[node]))
        for node, label in labels.items()
    ]


def _is_fused(primitive: str) -> bool:
    return primitive.startswith("Compiled") or primitive in FUSED_PRIMITIVES


def kernel_names(nodes: Sequence[GraphNode]) -> list[str]:
    """The nodes that launch work: views left out, a reshape that must copy named
    "Reshape(copy)"."""
    return [n.kernel_name for n in nodes if n.works]


def probe_compiled(
    op: str,
    variant: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None = None,
    *,
    shape_label: str = "",
    phase: str | None = None,
) -> KernelFact:
    """Call a registered variant on `args` (evaluated first) and read the kernels in its lazy output
    graph.

    "single kernel" when exactly one primitive does work; "composed" when several do and none is
    fused (no Compiled and no mx.fast primitive); otherwise "N kernels".
    """
    fn = REGISTRY[op].variants[variant]
    kwargs = dict(kwargs or {})
    inputs = _flat_arrays(list(args)) + _flat_arrays(kwargs)
    mx.eval(*inputs)
    nodes = graph_nodes(fn(*args, **kwargs))
    primitives = [n.primitive for n in nodes]
    kernels = kernel_names(nodes)
    fused = [p for p in kernels if _is_fused(p)]
    if len(kernels) == 1:
        status = "single kernel"
        reason = f"one {'fused ' if fused else ''}kernel: {kernels[0]}"
    elif len(kernels) > 1 and not fused:
        status = "composed"
        reason = f"{len(kernels)} kernels, none fused: {', '.join(kernels)}"
    else:
        status = f"{len(kernels)} kernels"
        reason = (
            f"{len(fused)} of {len(kernels)} fused: {', '.join(kernels)}"
            if kernels
            else "no kernel"
        )
    fact = KernelFact(
        op,
        variant,
        "graph",
        shape_label,
        status,
        reason,
        phase,
        None,
        tuple(primitives),
        len(kernels),
        tuple(fused),
    )
    return _stamp(fact)


# --------------------------------------------------------------------------------------- every op


def kernel_facts(
    args: ModelArgs, *, prompt_tokens: int = 128, dtype: str = "float32"
) -> list[KernelFact]:
    """Every kernel fact for one model: each op's fused-kernel probe (if it declares one) at each of
    its kernel cases, then the graph of every registered variant of every op at each of them."""
    calls = calls_by_op()
    cases = {
        op: [replace(case, dtype=dtype) for case in op_calls.kernel_cases(args, prompt_tokens)]
        for op, op_calls in calls.items()
    }
    facts = [
        probe_fused(case)
        for op, case_list in cases.items()
        if calls[op].probe_name
        for case in case_list
    ]
    for op, spec in REGISTRY.items():
        if op not in cases:
            facts += [
                _stamp(
                    KernelFact(
                        op, variant, "graph", "", "not probed", f"{op} declares no call to probe"
                    )
                )
                for variant in spec.variants
            ]
        for case in cases.get(op, []):
            inputs = calls[op].inputs(case, seed=0)
            facts += [
                _probe_variant(case.op, variant, case.label, case.phase, inputs)
                for variant in spec.variants
            ]
    return facts


def traced_kernel_facts(traced: Mapping[str, Sequence[TracedCall]]) -> list[KernelFact]:
    """Every kernel fact for a model whose calls were traced (mlx-lm's models,
    fusebench.models.switched): at each distinct call of each phase, its op's fused-kernel probe
    where the op declares one, then the graph of every registered variant of its op, on the call's
    own inputs."""
    facts = []
    for phase, calls in traced.items():
        for call in calls:
            label = f"{phase} {call.label}"
            declared = calls_by_op().get(call.op)
            if declared is not None and declared.probe_name:
                facts.append(probe_fused_call(call.op, call.inputs, label, phase))
            facts += [
                _probe_variant(call.op, variant, label, phase, call.inputs)
                for variant in REGISTRY[call.op].variants
            ]
    return facts


def _probe_variant(
    op: str, variant: str, label: str, phase: str | None, inputs: Inputs
) -> KernelFact:
    try:
        return probe_compiled(
            op, variant, inputs.args, inputs.kwargs, shape_label=label, phase=phase
        )
    except Exception as err:  # a plugin variant that cannot run at this shape is a fact too
        message = " ".join(str(err).split())
        return _stamp(
            KernelFact(
                op, variant, "graph", label, "error", f"{type(err).__name__}: {message}", phase
            )
        )
