"""The ops: every switchable op the model calls goes through the registry (models/registry.py).

Each op's section below holds all that is known about it beside its declaration's light facts: its
variants, and how it is called (`OpCalls`: its shapes at a model's sizes, for `fusebench ops` and
`fusebench kernels`, its inputs and its FLOPs). A new fusion candidate is one function with one
decorator:

    @register("geglu", "my_variant")
    def geglu_mine(gate, up):
        ...

after which `my_variant` is valid in every YAML experiment, in `fusebench verify`, `fusebench ops`
and `fusebench kernels`. Every variant of an op takes the same arguments as the op's reference
variant and must compute the same thing. A new op is declared the same way, from a plugin file as
well as here:

    declare("scale2", "x * 2", reference="plain", default="plain")
    register("scale2", "plain")(lambda x: x * 2)

    @register_calls("scale2")
    class Scale2Calls(OpCalls):
        def cases(self, args, batch, length):
            return [OpCase("scale2", "hidden", ((batch, length, args.hidden_size),))]
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.gemma4_text import ModelArgs
from mlx_lm.models.rope_utils import initialize_rope

# The declaring names are re-exported: `from fusebench.models.ops import register` is the stable
# import for plugins.
from .calls import Inputs, OpCalls, OpCase, ProbeOutcome, calls_by_op, register_calls
from .config import attention_heads
from .errors import UnknownOpError
from .module_calls import compile_call_op
from .registry import (
    REGISTRY,
    OpSpec,
    check_op,
    check_variant,
    complete,
    declare,
    op_choices,
    reference_assignment,
    register,
)
from .sites import register_site

__all__ = [
    "REGISTRY",
    "Inputs",
    "OpCalls",
    "OpCase",
    "OpSpec",
    "OpTable",
    "UnknownOpError",
    "calls_by_op",
    "check_op",
    "check_variant",
    "compile_call_op",
    "complete",
    "declare",
    "op_choices",
    "reference_assignment",
    "register",
    "register_calls",
    "register_site",
]

# mx.fast's kernels as mlx ships them. mlx-lm's models reach rms_norm and rope through mx.fast, so
# their sites rebind those names while a model runs (fusebench.models.switched): the fast variants
# call these.
_FAST_RMS_NORM = mx.fast.rms_norm
_FAST_ROPE = mx.fast.rope

# A variant, or the function a site's name was bound to.
Op = Callable[..., Any]

# The two kinds of attention layer, as the config's layer types name them and as case roles name
# them.
LAYER_KINDS = (("sliding_attention", "sliding"), ("full_attention", "full"))


class OpTable:
    """The callables of one assignment. The model's modules share one table, so switching is a dict
    update."""

    def __init__(self, assignment: Mapping[str, str] | None = None) -> None:
        self.assignment: dict[str, str] = {}
        self.set(assignment)

    def set(self, assignment: Mapping[str, str] | None) -> None:
        self.assignment = complete(assignment)
        for op, variant in self.assignment.items():
            setattr(self, op, REGISTRY[op].variants[variant])


# --- geglu ---------------------------------------------------------------------------------------


@register("geglu", "unfused")
def geglu_unfused(gate: mx.array, up: mx.array) -> mx.array:
    return nn.gelu_approx(gate) * up


# shapeless=True traces once for every shape, as ollama PR 15587 did.
geglu_compiled = register("geglu", "compiled")(mx.compile(geglu_unfused, shapeless=True))

# Per-element FLOP counts, with tanh counted as one FLOP as FLOP counts conventionally do:
# gelu_approx(g) * u = 0.5 * g * (1 + tanh(c * (g + 0.044715 * g^3))) * u -> g^3
# (2), * 0.044715, + g, * c, tanh, 1 +, * 0.5, * g, * u: 10.
GEGLU_FLOPS_PER_ELEMENT = 10


@register_calls("geglu")
class GegluCalls(OpCalls):
    def cases(self, args: ModelArgs, batch: int, length: int) -> list[OpCase]:
        """The MLP, the double-wide MLP of KV-shared layers, the MoE experts and the PLE gate."""
        cases = [OpCase("geglu", "mlp", _pair((batch, length, args.intermediate_size)))]
        if args.use_double_wide_mlp and args.num_kv_shared_layers > 0:
            wide = (batch, length, 2 * args.intermediate_size)
            cases.append(OpCase("geglu", "mlp double-wide", _pair(wide)))
        if args.enable_moe_block:
            # SwitchGLU sorts the (token, expert) pairs and runs the activation on [tokens * top_k,
            # 1, width].
            rows = batch * length * args.top_k_experts
            cases.append(
                OpCase("geglu", "moe expert", _pair((rows, 1, args.moe_intermediate_size)))
            )
        if args.hidden_size_per_layer_input > 0:
            cases.append(
                OpCase(
                    "geglu", "ple gate", _pair((batch, length, args.hidden_size_per_layer_input))
                )
            )
        return cases

    def flops(self, case: OpCase) -> int:
        return GEGLU_FLOPS_PER_ELEMENT * math.prod(case.shape)


@register_site("geglu", "geglu")
def geglu_site(variant: Op, original: Op, gate: mx.array, x: mx.array) -> mx.array:
    """mlx-lm's gemma4_text: `geglu(gate, x)` in its MLP (its PLE gate computes it unfused)."""
    return variant(gate, x)


def _pair(shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    return (shape, shape)


# --- softcap -------------------------------------------------------------------------------------


@register("softcap", "unfused")
def softcap_unfused(x: mx.array, cap: float) -> mx.array:
    return mx.tanh(x * (1.0 / cap)) * cap


def _softcap_kernel(x: mx.array, cap: mx.array) -> mx.array:
    return mx.tanh(x / cap) * cap


_softcap_compiled = mx.compile(_softcap_kernel, shapeless=True)


@register("softcap", "compiled")
def softcap_compiled(x: mx.array, cap: float) -> mx.array:
    # The cap travels as an array so the compiled kernel is traced once, not once per Python float.
    return _softcap_compiled(x, mx.array(cap, dtype=x.dtype))


@register_site("softcap", "logit_softcap")
def softcap_site(variant: Op, original: Op, cap: float, x: mx.array) -> mx.array:
    """mlx-lm's gemma4_text: `logit_softcap(cap, x)` on the final logits."""
    return variant(x, cap)


# [B, L, 262144] fp32 logits are 1 GiB per 1024 positions, and one softcap over 512 of them takes
# ~2-3 s on a 2-core CPU. The op is elementwise, so a shorter L shows the same per-element cost
# (once past the caches).
FULL_LOGITS_MAX_TOKENS = 128
# tanh(x / cap) * cap, tanh counted as one FLOP.
SOFTCAP_FLOPS_PER_ELEMENT = 3


@register_calls("softcap")
class SoftcapCalls(OpCalls):
    def cases(self, args: ModelArgs, batch: int, length: int) -> list[OpCase]:
        cap, vocab = args.final_logit_softcapping, args.vocab_size
        if cap is None:  # the model leaves its logits uncapped
            return []
        full = min(length, FULL_LOGITS_MAX_TOKENS)
        capped = (
            f"; L capped at {full} of {length}: an elementwise op's time scales with L"
            if full < length
            else ""
        )
        return [
            OpCase(
                "softcap",
                "logits decode",
                ((batch, 1, vocab),),
                positional=(cap,),
                note="every decode step, and prefill too: mlx-lm-style "
                "prefill computes logits for the last position only",
            ),
            OpCase(
                "softcap",
                "logits full",
                ((batch, full, vocab),),
                positional=(cap,),
                note="logits for every prompt position (scoring, "
                f"speculative verification){capped}",
            ),
        ]

    def flops(self, case: OpCase) -> int:
        return SOFTCAP_FLOPS_PER_ELEMENT * math.prod(case.shape)


# --- attention -----------------------------------------------------------------------------------
# q: [B, n_heads, L, D]; k, v: [B, n_kv_heads, S, D]; mask: None, "causal", a boolean or an additive
# array.


def _causal_mask(query_len: int, key_len: int) -> mx.array:
    query_pos = mx.arange(key_len - query_len, key_len)[:, None]
    return query_pos >= mx.arange(key_len)[None]


@register("attention", "manual")
def attention_manual(
    q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask: mx.array | str | None
) -> mx.array:
    # As ollama's manual CUDA path did: repeat the KV heads up to the query heads, then two plain
    # matmuls around an additive mask and a precise softmax.
    n_repeats = q.shape[1] // k.shape[1]
    if n_repeats > 1:
        k = mx.repeat(k, n_repeats, axis=1)
        v = mx.repeat(v, n_repeats, axis=1)
    scores = (q * scale) @ k.swapaxes(-1, -2)
    if isinstance(mask, str):
        mask = _causal_mask(scores.shape[-2], scores.shape[-1])
    if mask is not None:
        if mask.dtype == mx.bool_:
            mask = mx.where(mask, mx.array(0.0, scores.dtype), mx.array(-mx.inf, scores.dtype))
        scores = scores + mask
    weights = mx.softmax(scores, axis=-1, precise=True)
    return weights @ v


@register("attention", "sdpa")
def attention_sdpa(
    q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask: mx.array | str | None
) -> mx.array:
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)


@register_site("attention", "scaled_dot_product_attention")
def attention_site(
    variant: Op,
    original: Op,
    queries: mx.array,
    keys: mx.array,
    values: mx.array,
    cache: Any,
    scale: float,
    mask: mx.array | str | None,
    sinks: mx.array | None = None,
) -> mx.array:
    """mlx-lm's `base.scaled_dot_product_attention`, which every mlx-lm model's attention calls.
    A quantized KV cache or attention sinks have no manual form here: such a call is refused, not
    silently left to mlx-lm."""
    if hasattr(cache, "bits") or sinks is not None:
        what = "a quantized KV cache" if sinks is None else "attention sinks"
        raise UnknownOpError(
            f"attention: this model calls attention with {what}, which its variants do not take; "
            "leave attention out of the experiment's variants"
        )
    return variant(queries, keys, values, scale=scale, mask=mask)


# Gemma 4 normalizes q and k instead of scaling the scores, so the model calls attention with scale
# 1.0.
ATTENTION_SCALE = 1.0


# MLX's force_fused answer: a fallback's message, and its preamble, which the reason leaves out.
_SDPA_FALLBACK = re.compile(r"force_fused|fused kernel", re.IGNORECASE)
_SDPA_PREFIX = re.compile(
    r"^\[scaled_dot_product_attention\]\s*(force_fused=True but\s*)?", re.IGNORECASE
)


@register_calls("attention")
class AttentionCalls(OpCalls):
    probe_name = "force_fused"

    def probe_fused(self, inputs: Inputs) -> ProbeOutcome:
        """Whether MLX has a fused SDPA kernel for this call. MLX silently falls back to composed
        ops when it has none for a shape; with force_fused it raises instead and says why, deciding
        at graph construction from shapes, dtypes and the mask alone, so the inputs need no values
        unless the kernel exists. Other errors propagate: they are not an answer."""
        try:
            mx.fast.scaled_dot_product_attention(*inputs.args, **inputs.kwargs, force_fused=True)
        except TypeError:
            # An mlx before force_fused (run --against-env, bisect --package) cannot answer.
            return ProbeOutcome(
                "sdpa", "unknown", f"mlx {mx.__version__} has no force_fused to ask"
            )
        except ValueError as err:
            if not _SDPA_FALLBACK.search(str(err)):
                raise
            reason = _SDPA_PREFIX.sub("", " ".join(str(err).split())).strip()
            return ProbeOutcome("sdpa", "fallback", reason)
        mx.eval(inputs.arrays)
        out = mx.fast.scaled_dot_product_attention(*inputs.args, **inputs.kwargs, force_fused=True)
        return ProbeOutcome("sdpa", "fused", "force_fused=True ran", out)

    def cases(self, args: ModelArgs, batch: int, length: int) -> list[OpCase]:
        """Prefill (causal, the window's mask where the prompt is longer) and decode, for both layer
        types."""
        heads, window = args.num_attention_heads, args.sliding_window
        cases = []
        for layer_type, kind in LAYER_KINDS:
            head_dim, kv_heads = attention_heads(vars(args), layer_type)
            layer_window = window if kind == "sliding" else None
            # A sliding layer's rotating cache never holds more than the window.
            kv_length = min(length, window) if kind == "sliding" else length
            prefill_kv = (batch, kv_heads, length, head_dim)
            decode_kv = (batch, kv_heads, kv_length, head_dim)
            cases += [
                OpCase(
                    "attention",
                    f"prefill {kind}",
                    ((batch, heads, length, head_dim), prefill_kv, prefill_kv),
                    keywords=(
                        ("scale", ATTENTION_SCALE),
                        ("mask", "causal"),
                        ("window", layer_window),
                    ),
                    shown=("q", "kv"),
                    phase="prefill",
                ),
                OpCase(
                    "attention",
                    f"decode {kind}",
                    ((batch, heads, 1, head_dim), decode_kv, decode_kv),
                    keywords=(("scale", ATTENTION_SCALE), ("mask", None), ("window", None)),
                    shown=("q", "kv"),
                    phase="decode",
                ),
            ]
        return cases

    def kernel_cases(self, args: ModelArgs, prompt_tokens: int) -> list[OpCase]:
        # MLX picks its kernel by the head dim, the query and key lengths, the GQA factor and the
        # mask: only the prompt's own shapes say which one the model gets.
        return self.cases(args, 1, prompt_tokens)

    def inputs(self, case: OpCase, seed: int) -> Inputs:
        inputs = super().inputs(case, seed)
        window = inputs.kwargs.pop("window")
        # As mlx-lm's create_attention_mask: "causal" unless a sliding window cuts into the prompt.
        if inputs.kwargs["mask"] == "causal" and window is not None and case.shape[2] > window:
            inputs.kwargs["mask"] = create_causal_mask(case.shape[2], window_size=window)
        return inputs

    def flops(self, case: OpCase) -> int:
        # Two matmuls (q k^T, then p v) at 2 FLOPs per multiply-add, over the full L x S score
        # matrix: the masked half included, as the manual variant computes it.
        batch, heads, length, head_dim = case.shape
        return 4 * batch * heads * length * case.arrays[1][2] * head_dim


# --- rms_norm ------------------------------------------------------------------------------------


@register("rms_norm", "composed")
def rms_norm_composed(x: mx.array, weight: mx.array | None, eps: float) -> mx.array:
    x32 = x.astype(mx.float32)
    normed = (x32 * mx.rsqrt(mx.mean(x32 * x32, axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return normed if weight is None else normed * weight


@register("rms_norm", "fast")
def rms_norm_fast(x: mx.array, weight: mx.array | None, eps: float) -> mx.array:
    return _FAST_RMS_NORM(x, weight, eps)


@register_site("rms_norm", "rms_norm", module="mlx.core.fast")
def rms_norm_site(
    variant: Op, original: Op, x: mx.array, weight: mx.array | None, eps: float
) -> mx.array:
    """Every mlx-lm norm: `nn.RMSNorm` and the models' own norms call mx.fast.rms_norm."""
    return variant(x, weight, eps)


@register_calls("rms_norm")
class RmsNormCalls(OpCalls):
    # Pure data movement: no FLOPs counted.
    def cases(self, args: ModelArgs, batch: int, length: int) -> list[OpCase]:
        hidden = args.hidden_size
        return [
            OpCase(
                "rms_norm",
                "hidden",
                ((batch, length, hidden), (hidden,)),
                positional=(args.rms_norm_eps,),
            )
        ]


# --- rope ----------------------------------------------------------------------------------------
# The arguments are those of mx.fast.rope: `periods` plays the part of its `freqs` (an inf period
# leaves that pair of dims unrotated), otherwise base ** (2i / dims) is used.


class RopeArguments(TypedDict):
    dims: int
    base: float | None
    scale: float
    periods: mx.array | None


def layer_rope(args: ModelArgs, layer_type: str, head_dim: int) -> nn.Module:
    """The rope module of a layer type, as mlx-lm's initialize_rope builds it from the config."""
    params = args.rope_parameters.get(layer_type, {})
    return initialize_rope(
        dims=head_dim,
        traditional=args.rope_traditional,
        base=params.get("rope_theta", 10000.0),
        scaling_config=params,
        max_position_embeddings=args.max_position_embeddings,
    )


def rope_arguments(rope: nn.Module) -> RopeArguments:
    """mx.fast.rope's arguments for a rope module that mlx-lm's initialize_rope built."""
    if isinstance(rope, nn.RoPE):
        return {"dims": rope.dims, "base": rope.base, "scale": rope.scale, "periods": None}
    return {"dims": rope.dims, "base": None, "scale": 1.0, "periods": rope._freqs}


@register("rope", "composed")
def rope_composed(
    x: mx.array,
    *,
    dims: int,
    base: float | None,
    scale: float,
    offset: int | mx.array,
    periods: mx.array | None,
    traditional: bool = False,
) -> mx.array:
    if periods is None:
        periods = base ** (mx.arange(0, dims, 2, dtype=mx.float32) / dims)
    positions = (mx.arange(x.shape[-2], dtype=mx.float32) + offset) * scale
    theta = positions[:, None] / periods[None, :]
    cos, sin = mx.cos(theta).astype(x.dtype), mx.sin(theta).astype(x.dtype)
    rest = x[..., dims:]
    if traditional:  # the rotated pairs are adjacent dims, (0, 1), (2, 3), ...
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
        pairs = mx.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
        rotated = [pairs.reshape(*x.shape[:-1], dims)]
    else:  # the pairs are the two halves, (0, dims/2), (1, dims/2 + 1), ...
        half = dims // 2
        x1, x2 = x[..., :half], x[..., half:dims]
        rotated = [x1 * cos - x2 * sin, x1 * sin + x2 * cos]
    return mx.concatenate([*rotated, rest] if rest.shape[-1] else rotated, axis=-1)


@register("rope", "fast")
def rope_fast(
    x: mx.array,
    *,
    dims: int,
    base: float | None,
    scale: float,
    offset: int | mx.array,
    periods: mx.array | None,
    traditional: bool = False,
) -> mx.array:
    return _FAST_ROPE(
        x, dims, traditional=traditional, base=base, scale=scale, offset=offset, freqs=periods
    )


@register_site("rope", "rope", module="mlx.core.fast")
def rope_site(
    variant: Op,
    original: Op,
    a: mx.array,
    dims: int,
    *,
    traditional: bool,
    base: float | None,
    scale: float,
    offset: int | mx.array,
    freqs: mx.array | None = None,
) -> mx.array:
    """Every mlx-lm rope: `nn.RoPE` and initialize_rope's scaled ropes call mx.fast.rope."""
    return variant(
        a, dims=dims, traditional=traditional, base=base, scale=scale, offset=offset, periods=freqs
    )


@register_calls("rope")
class RopeCalls(OpCalls):
    # Pure data movement: no FLOPs counted.
    def cases(self, args: ModelArgs, batch: int, length: int) -> list[OpCase]:
        """q's rotation in both layer types: full layers rotate only a quarter of their dims
        (ProportionalRoPE)."""
        cases = []
        for layer_type, kind in LAYER_KINDS:
            head_dim, _ = attention_heads(vars(args), layer_type)
            rope = rope_arguments(layer_rope(args, layer_type, head_dim))
            # A tuple keeps the case hashable; inputs() turns it back into the array the model
            # passes.
            periods = None if rope["periods"] is None else tuple(rope["periods"].tolist())
            rotated = (
                rope["dims"] if periods is None else 2 * sum(math.isfinite(p) for p in periods)
            )
            role = kind if rotated == head_dim else f"{kind} ({rotated / head_dim:.0%} rotated)"
            keywords = (
                ("dims", rope["dims"]),
                ("base", rope["base"]),
                ("scale", rope["scale"]),
                ("periods", periods),
                ("offset", 0),
            )
            cases.append(
                OpCase(
                    "rope",
                    role,
                    ((batch, args.num_attention_heads, length, head_dim),),
                    keywords=keywords,
                )
            )
        return cases

    def inputs(self, case: OpCase, seed: int) -> Inputs:
        inputs = super().inputs(case, seed)
        # The model passes the cache offset as an array, and the periods as the rope module's array.
        inputs.kwargs["offset"] = mx.array(inputs.kwargs["offset"])
        if inputs.kwargs["periods"] is not None:
            inputs.kwargs["periods"] = mx.array(inputs.kwargs["periods"], dtype=mx.float32)
        return inputs


# --- swiglu --------------------------------------------------------------------------------------
# mlx-lm's Llama-style MLPs and SwitchGLU experts call activations.swiglu(gate, x), compiled with
# shapeless=True; the unfused form is what it compiles.


@register("swiglu", "unfused")
def swiglu_unfused(gate: mx.array, up: mx.array) -> mx.array:
    return nn.silu(gate) * up


swiglu_compiled = register("swiglu", "compiled")(mx.compile(swiglu_unfused, shapeless=True))


@register_site("swiglu", "swiglu")
def swiglu_site(variant: Op, original: Op, gate: mx.array, x: mx.array) -> mx.array:
    return variant(gate, x)


# silu(g) * u = g * sigmoid(g) * u, sigmoid counted as one FLOP as tanh is: 3.
SWIGLU_FLOPS_PER_ELEMENT = 3


@register_calls("swiglu")
class SwigluCalls(OpCalls):
    def cases(self, args: ModelArgs, batch: int, length: int) -> list[OpCase]:
        """None: fusebench's Gemma 4 decoder gates with GeGLU. mlx-lm's models are traced for
        their calls (fusebench.models.switched)."""
        return []

    def flops(self, case: OpCase) -> int:
        return SWIGLU_FLOPS_PER_ELEMENT * math.prod(case.shape)
