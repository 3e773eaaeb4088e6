"""Kernel truth: which kernels really run for each op variant, so that a fused-vs-unfused A/B means something.

Two probes, both reading MLX rather than trusting names:

- `probe_sdpa` calls `mx.fast.scaled_dot_product_attention(..., force_fused=True)` at one of the model's attention
  shapes. MLX silently falls back to composed ops when it has no fused kernel for a shape; with force_fused it raises
  instead and says why. The shape must be the one the model really uses: MLX's choice depends on the head dim, the
  query length (Metal: vector kernel for L <= 8, full kernel above), the key length (recent Metal sources: head
  dim 512 only for one query, GQA factor 8 and >= 1024 keys; the 2-pass kernel from 1024 keys), the GQA factor and
  the mask. So nothing here is shortened; the inputs are not even evaluated unless the fused kernel exists.
- `probe_compiled` builds one variant's lazy graph and lists the primitives `mx.eval` would run, read with
  `mx.export_to_dot`. After `mx.compile`, the graph holds `Compiled...` primitives in place of the fused ops; an
  `mx.fast` op that fell back shows its composed ops instead of its own primitive (RMSNorm, RoPE,
  ScaledDotProductAttention). Nothing is evaluated but the inputs.

Only mlx and models are imported, so the facts can be gathered inside a worker process.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import mlx.core as mx

from models.gemma4 import Attention, ModelArgs, rope_arguments
from models.ops import REGISTRY, OpTable

# Dtype names as the model's overrides spell them (models.config names the same three).
DTYPE_NAMES: dict[str, mx.Dtype] = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}

# Primitives that only re-describe memory (strides, shape, a view): they launch no kernel. A consumer that needs
# contiguous input may still copy inside its own evaluation; that copy is part of the consumer's kernel count.
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

# A reshape that merges axes is a view only when the strides allow; of a broadcast or transposed input MLX makes a
# contiguous copy (this is what mx.repeat of the KV heads costs in the manual attention path). Unflatten only splits
# an axis, which any strides allow, so it stays a view. A heuristic: a merge that happens to be expressible is
# still counted as a copy.
RESHAPES = frozenset({"Reshape", "Flatten"})
NON_CONTIGUOUS = frozenset({"Broadcast", "BroadcastAxes", "Transpose"})

# Primitives that are one fused kernel by construction: mx.compile's output and the mx.fast kernels.
FUSED_PRIMITIVES = frozenset(
    {"RMSNorm", "LayerNorm", "RoPE", "ScaledDotProductAttention", "CustomKernel", "CustomMetalKernel"}
)

_SDPA_FALLBACK = re.compile(r"force_fused|fused kernel", re.IGNORECASE)
_SDPA_PREFIX = re.compile(r"^\[scaled_dot_product_attention\]\s*(force_fused=True but\s*)?", re.IGNORECASE)
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


@dataclass
class KernelFact:
    """One observed fact about the kernels behind an (op, variant) at one shape.

    status: for probe "force_fused", "fused", "fallback" or "unknown" (an mlx without force_fused); for probe
    "graph", "single kernel", "N kernels", or "composed" when the graph has several kernels and none of them fused
    (no Compiled or mx.fast primitive).
    """

    op: str
    variant: str
    probe: str  # "force_fused" (sdpa) or "graph" (mx.export_to_dot of the lazy output)
    shape_label: str
    status: str
    reason: str
    phase: str | None = None
    head_dim: int | None = None
    primitives: list[str] = field(default_factory=list)  # every primitive in the graph, in evaluation order
    kernels: int | None = None  # primitives that launch work (views left out)
    fused: list[str] = field(default_factory=list)  # the primitives among them that are fused kernels
    backend: str = ""
    device: str = ""
    mlx_version: str = ""
    kind: str = "kernel"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stamp(fact: KernelFact) -> KernelFact:
    backend = current_backend()
    fact.backend, fact.device, fact.mlx_version = backend.name, backend.device, backend.mlx_version
    return fact


# --------------------------------------------------------------------------------------- attention shapes


@dataclass(frozen=True)
class AttentionShape:
    """One attention call as the model makes it: q [1, n_heads, query_len, head_dim], k/v [1, n_kv_heads, key_len,
    head_dim]. mask: "causal", "window" (a boolean [query_len, key_len] band, for a prefill longer than the sliding
    window) or None (decode)."""

    kind: str  # "sliding" or "full"
    phase: str  # "prefill" or "decode"
    layer: int  # the first layer of this kind, whose module the geometry was read from
    n_heads: int
    n_kv_heads: int
    head_dim: int
    query_len: int
    key_len: int
    mask: str | None
    dtype: str
    window: int | None = None

    @property
    def label(self) -> str:
        keys = "" if self.phase == "prefill" else f" S{self.key_len}"
        return f"{self.kind} hd{self.head_dim} {self.phase} L{self.query_len}{keys} q{self.n_heads} kv{self.n_kv_heads}"

    def arrays(
        self, seed: int = 0, *, evaluate: bool = True
    ) -> tuple[mx.array, mx.array, mx.array, mx.array | str | None]:
        """Random q, k, v and the mask the model would pass, in the model's dtype (evaluated unless told not to)."""
        dtype = _dtype(self.dtype)
        kq, kk, kv = mx.random.split(mx.random.key(seed), 3)
        q = mx.random.normal((1, self.n_heads, self.query_len, self.head_dim), key=kq).astype(dtype)
        k = mx.random.normal((1, self.n_kv_heads, self.key_len, self.head_dim), key=kk).astype(dtype)
        v = mx.random.normal((1, self.n_kv_heads, self.key_len, self.head_dim), key=kv).astype(dtype)
        mask: mx.array | str | None = self.mask
        if self.mask == "window":
            # mlx-lm's create_causal_mask(N, window_size=...): causal, and no further back than the window.
            rows = mx.arange(self.key_len - self.query_len, self.key_len)[:, None]
            cols = mx.arange(self.key_len)[None]
            mask = (rows >= cols) & (rows < cols + self.window)
        if evaluate:
            mx.eval(q, k, v, *([mask] if isinstance(mask, mx.array) else []))
        return q, k, v, mask


def _dtype(dtype: str | mx.Dtype) -> mx.Dtype:
    if isinstance(dtype, mx.Dtype):
        return dtype
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPE_NAMES)}")
    return DTYPE_NAMES[dtype]


def _dtype_name(dtype: str | mx.Dtype) -> str:
    if isinstance(dtype, str):
        _dtype(dtype)
        return dtype
    for name, value in DTYPE_NAMES.items():
        if value == dtype:
            return name
    raise ValueError(f"unsupported dtype {dtype}; choose from {', '.join(DTYPE_NAMES)}")


def attention_modules(config: Mapping[str, Any]) -> dict[str, tuple[int, Attention]]:
    """The model's own attention module for the first layer of each kind ("sliding", "full"), with its layer index.

    Built lazily: the projections' weights are never computed or allocated, so this is cheap at any model size.
    """
    args = ModelArgs.from_dict(dict(config))
    ops = OpTable()
    modules: dict[str, tuple[int, Attention]] = {}
    for layer, layer_type in enumerate(args.layer_types):
        kind = "sliding" if layer_type == "sliding_attention" else "full"
        if kind not in modules:
            modules[kind] = (layer, Attention(args, layer, ops))
    return modules


def attention_shapes(
    config: Mapping[str, Any],
    *,
    prompt_tokens: int = 128,
    context_tokens: int | None = None,
    dtype: str | mx.Dtype = "float32",
) -> list[AttentionShape]:
    """Every distinct attention call of the model: each layer kind, at prefill (query length `prompt_tokens`, as
    the first forward of a fresh cache makes it) and at decode (one query against `context_tokens` cached keys plus
    the new one; default: the prompt, i.e. the first decode step). Sliding layers see at most `sliding_window` keys
    when decoding, through their rotating cache, and a prefill longer than the window gets a boolean band mask."""
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens={prompt_tokens}; need at least 1")
    context = prompt_tokens if context_tokens is None else context_tokens
    window = config.get("sliding_window")
    dtype_name = _dtype_name(dtype)
    shapes = []
    for kind, (layer, module) in attention_modules(config).items():
        geometry = {
            "kind": kind,
            "layer": layer,
            "n_heads": module.n_heads,
            "n_kv_heads": module.n_kv_heads,
            "head_dim": module.head_dim,
            "dtype": dtype_name,
            "window": window if kind == "sliding" else None,
        }
        windowed = kind == "sliding" and window is not None
        prefill_mask = "window" if windowed and prompt_tokens > window else "causal"
        if prompt_tokens == 1:
            prefill_mask = None
        decode_keys = min(context + 1, window) if windowed else context + 1
        shapes.append(
            AttentionShape(
                phase="prefill", query_len=prompt_tokens, key_len=prompt_tokens, mask=prefill_mask, **geometry
            )
        )
        shapes.append(AttentionShape(phase="decode", query_len=1, key_len=decode_keys, mask=None, **geometry))
    return shapes


# --------------------------------------------------------------------------------------- sdpa probe


def _mlx_reason(message: str) -> str:
    """MLX's reason without its "[scaled_dot_product_attention] force_fused=True but" preamble."""
    return _SDPA_PREFIX.sub("", " ".join(message.split())).strip()


def probe_sdpa(shape: AttentionShape, dtype: str | mx.Dtype | None = None) -> KernelFact:
    """Whether MLX has a fused kernel for this attention call: "fused" (it ran, output evaluated) or "fallback"
    with MLX's own reason. Other errors propagate: they are not an answer to the question."""
    if dtype is not None and _dtype_name(dtype) != shape.dtype:
        shape = AttentionShape(**{**asdict(shape), "dtype": _dtype_name(dtype)})
    # MLX decides at graph construction, from shapes, dtypes and the mask alone: the inputs need no values unless
    # the fused kernel exists and is run.
    q, k, v, mask = shape.arrays(evaluate=False)
    fact = KernelFact("attention", "sdpa", "force_fused", shape.label, "", "", shape.phase, shape.head_dim)
    try:
        mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask=mask, force_fused=True)
    except TypeError:
        # An mlx before force_fused (run --against-env, bisect --package) cannot answer; the run goes on.
        fact.status, fact.reason = "unknown", f"mlx {mx.__version__} has no force_fused to ask"
        return _stamp(fact)
    except ValueError as err:
        if not _SDPA_FALLBACK.search(str(err)):
            raise
        fact.status, fact.reason = "fallback", _mlx_reason(str(err))
        return _stamp(fact)
    mx.eval(q, k, v, *([mask] if isinstance(mask, mx.array) else []))
    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0, mask=mask, force_fused=True)
    nodes = graph_nodes(out)
    mx.eval(out)
    fact.status = "fused"
    fact.primitives = [n.primitive for n in nodes]
    kernels = kernel_names(nodes)
    fact.reason = f"force_fused=True ran {', '.join(kernels) or 'a fused kernel'}"
    fact.kernels = len(kernels)
    fact.fused = [k for k in kernels if _is_fused(k)]
    return _stamp(fact)


# --------------------------------------------------------------------------------------- graph probe


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
    """One primitive of a lazy graph, with the primitives that produce its inputs (None for an evaluated input)."""

    primitive: str
    inputs_from: tuple[str | None, ...]

    @property
    def copies(self) -> bool:
        """A reshape of a broadcast or transposed array: MLX cannot express it as a view and copies."""
        return self.primitive in RESHAPES and any(p in NON_CONTIGUOUS for p in self.inputs_from if p)

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
    """The primitives that evaluating `outputs` would run, in evaluation order: the nodes of mx.export_to_dot.

    Evaluated arrays are leaves (no primitive), so evaluate the inputs first to see only the op's own graph.
    A `Compiled` primitive's name is "Compiled" followed by the names of the ops it fused.
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
        GraphNode(label, tuple(labels.get(producer.get(a, "")) for a in inputs[node])) for node, label in labels.items()
    ]


def _is_fused(primitive: str) -> bool:
    return primitive.startswith("Compiled") or primitive in FUSED_PRIMITIVES


def kernel_names(nodes: Sequence[GraphNode]) -> list[str]:
    """The nodes that launch work: views left out, a reshape that must copy named "Reshape(copy)"."""
    return [n.kernel_name for n in nodes if n.works]


def probe_compiled(
    op: str,
    variant: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None = None,
    *,
    shape_label: str = "",
    phase: str | None = None,
    head_dim: int | None = None,
) -> KernelFact:
    """Call a registered variant on `args` (evaluated first) and read the kernels in its lazy output graph.

    "single kernel" when exactly one primitive does work; "composed" when several do and none is fused (no
    Compiled and no mx.fast primitive); otherwise "N kernels".
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
        reason = f"{len(fused)} of {len(kernels)} fused: {', '.join(kernels)}" if kernels else "no kernel"
    fact = KernelFact(
        op, variant, "graph", shape_label, status, reason, phase, head_dim, primitives, len(kernels), fused
    )
    return _stamp(fact)


# --------------------------------------------------------------------------------------- the model's op calls


@dataclass(frozen=True)
class OpCall:
    """Representative arguments of one op as the model calls it."""

    op: str
    label: str
    make: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
    phase: str | None = None
    head_dim: int | None = None


def op_calls(config: Mapping[str, Any], *, prompt_tokens: int = 128, dtype: str | mx.Dtype = "float32") -> list[OpCall]:
    """One call per op at a decode step (one token: the elementwise ops' graph does not depend on the length, and
    the tensors stay small), plus attention and rope at every attention shape and kind."""
    dt = _dtype(dtype)
    hidden, width = config["hidden_size"], config["intermediate_size"]
    vocab, cap = config["vocab_size"], config.get("final_logit_softcapping") or 30.0
    eps = config.get("rms_norm_eps", 1e-6)
    key = mx.random.key(0)

    def normal(*shape: int) -> mx.array:
        return mx.random.normal(shape, key=key).astype(dt)

    calls = [
        OpCall(
            "geglu", f"mlp decode L1 [1,1,{width}]", lambda: ((normal(1, 1, width), normal(1, 1, width)), {}), "decode"
        ),
        OpCall(
            "softcap", f"logits decode L1 [1,1,{vocab}] cap {cap:g}", lambda: ((normal(1, 1, vocab), cap), {}), "decode"
        ),
        OpCall(
            "rms_norm",
            f"hidden decode L1 [1,1,{hidden}]",
            lambda: ((normal(1, 1, hidden), mx.ones((hidden,), dtype=dt), eps), {}),
            "decode",
        ),
    ]
    for kind, (_, module) in attention_modules(config).items():
        rope_args = rope_arguments(module.rope)
        n_heads, head_dim = module.n_heads, module.head_dim

        def rope_call(n_heads: int = n_heads, head_dim: int = head_dim, rope_args: dict = rope_args):
            # As Attention._rotate at decode: one position, the cache offset as an array.
            return (normal(1, n_heads, 1, head_dim),), {**rope_args, "offset": mx.array(prompt_tokens)}

        label = f"{kind} hd{head_dim} decode L1 q{n_heads} rotary dims {rope_args['dims']}"
        calls.append(OpCall("rope", label, rope_call, "decode", head_dim))
    for shape in attention_shapes(config, prompt_tokens=prompt_tokens, dtype=dtype):

        def attention_call(shape: AttentionShape = shape):
            q, k, v, mask = shape.arrays()
            return (q, k, v), {"scale": 1.0, "mask": mask}

        calls.append(OpCall("attention", shape.label, attention_call, shape.phase, shape.head_dim))
    return calls


def kernel_facts(
    config: Mapping[str, Any], *, prompt_tokens: int = 128, dtype: str | mx.Dtype = "float32"
) -> list[dict[str, Any]]:
    """Every kernel fact for one model config, as JSON-serializable dicts: the sdpa force_fused probe at each
    attention shape, then the graph of every registered variant of every op at its representative call."""
    facts = [
        probe_sdpa(shape).to_dict() for shape in attention_shapes(config, prompt_tokens=prompt_tokens, dtype=dtype)
    ]
    calls = op_calls(config, prompt_tokens=prompt_tokens, dtype=dtype)
    for op, spec in REGISTRY.items():
        op_calls_here = [c for c in calls if c.op == op]
        if not op_calls_here:
            for variant in spec.variants:
                fact = KernelFact(op, variant, "graph", "", "not probed", f"no representative call of {op} known")
                facts.append(_stamp(fact).to_dict())
            continue
        for call in op_calls_here:
            args, kwargs = call.make()
            for variant in spec.variants:
                try:
                    fact = probe_compiled(
                        op, variant, args, kwargs, shape_label=call.label, phase=call.phase, head_dim=call.head_dim
                    )
                except Exception as err:  # a plugin variant that cannot run at this shape is a fact too
                    message = " ".join(str(err).split())
                    fact = _stamp(
                        KernelFact(
                            op,
                            variant,
                            "graph",
                            call.label,
                            "error",
                            f"{type(err).__name__}: {message}",
                            call.phase,
                            call.head_dim,
                        )
                    )
                facts.append(fact.to_dict())
    return facts
