"""The op variants: every switchable op the model calls goes through the registry (models/registry.py).

A new fusion candidate is one function with one decorator:

    @register("geglu", "my_variant")
    def geglu_mine(gate, up):
        ...

after which `my_variant` is valid in every YAML experiment, in `fusebench verify` and in `fusebench ops`.
Every variant of an op takes the same arguments as the op's reference variant and must compute the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping

import mlx.core as mx
import mlx.nn as nn

# register is re-exported: `from models.ops import register` is the stable import for plugins.
from .errors import UnknownOpError
from .registry import REGISTRY, OpSpec, check_op, check_variant, complete, op_choices, reference_assignment, register

__all__ = ["REGISTRY", "OpSpec", "OpTable", "UnknownOpError", "check_op", "check_variant", "complete", "op_choices",
           "reference_assignment", "register"]


class OpTable:
    """The callables of one assignment. The model's modules share one table, so switching is a dict update."""

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


# --- attention -----------------------------------------------------------------------------------
# q: [B, n_heads, L, D]; k, v: [B, n_kv_heads, S, D]; mask: None, "causal", a boolean or an additive array.


def _causal_mask(query_len: int, key_len: int) -> mx.array:
    query_pos = mx.arange(key_len - query_len, key_len)[:, None]
    return query_pos >= mx.arange(key_len)[None]


@register("attention", "manual")
def attention_manual(q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask: mx.array | str | None) -> mx.array:
    # As ollama's manual CUDA path did: repeat the KV heads up to the query heads, then two plain matmuls
    # around an additive mask and a precise softmax.
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
def attention_sdpa(q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask: mx.array | str | None) -> mx.array:
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)


# --- rms_norm ------------------------------------------------------------------------------------


@register("rms_norm", "composed")
def rms_norm_composed(x: mx.array, weight: mx.array | None, eps: float) -> mx.array:
    x32 = x.astype(mx.float32)
    normed = (x32 * mx.rsqrt(mx.mean(x32 * x32, axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return normed if weight is None else normed * weight


@register("rms_norm", "fast")
def rms_norm_fast(x: mx.array, weight: mx.array | None, eps: float) -> mx.array:
    return mx.fast.rms_norm(x, weight, eps)


# --- rope ----------------------------------------------------------------------------------------
# The arguments are those of mx.fast.rope: `periods` plays the part of its `freqs` (an inf period leaves
# that pair of dims unrotated), otherwise base ** (2i / dims) is used.


@register("rope", "composed")
def rope_composed(
    x: mx.array,
    *,
    dims: int,
    base: float | None,
    scale: float,
    offset: int | mx.array,
    periods: mx.array | None,
) -> mx.array:
    if periods is None:
        periods = base ** (mx.arange(0, dims, 2, dtype=mx.float32) / dims)
    positions = (mx.arange(x.shape[-2], dtype=mx.float32) + offset) * scale
    theta = positions[:, None] / periods[None, :]
    cos, sin = mx.cos(theta).astype(x.dtype), mx.sin(theta).astype(x.dtype)
    half = dims // 2
    x1, x2, rest = x[..., :half], x[..., half:dims], x[..., dims:]
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
) -> mx.array:
    return mx.fast.rope(x, dims, traditional=False, base=base, scale=scale, offset=offset, freqs=periods)
