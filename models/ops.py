"""The one registry of op variants: every switchable op the model calls goes through here.

A new fusion candidate is one function with one decorator:

    @register("geglu", "my_variant")
    def geglu_mine(gate, up):
        ...

after which `my_variant` is valid in every YAML experiment, in `fusebench verify` and in `fusebench ops`.
Every variant of an op takes the same arguments as the op's reference variant and must compute the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import mlx.nn as nn


@dataclass
class OpSpec:
    """One switchable op: `reference` is the plain composed form, `default` what a variant gets when it omits the op."""

    name: str
    doc: str
    reference: str
    default: str
    variants: dict[str, Callable[..., Any]] = field(default_factory=dict)


class UnknownOpError(ValueError):
    """An op or variant name that the registry does not hold; the message lists the valid choices."""


REGISTRY: dict[str, OpSpec] = {
    "geglu": OpSpec("geglu", "gelu_approx(gate) * up in the MLP, MoE experts and PLE gate", "unfused", "unfused"),
    "softcap": OpSpec("softcap", "tanh(x / cap) * cap on the final logits", "unfused", "unfused"),
    "attention": OpSpec("attention", "softmax(q k^T * scale + mask) v in every layer", "manual", "manual"),
    "rms_norm": OpSpec("rms_norm", "x * rsqrt(mean(x^2) + eps) * weight in every norm", "composed", "fast"),
    "rope": OpSpec("rope", "rotary position embedding of q and k", "composed", "fast"),
}


def register(op: str, variant: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn` as `variant` of `op`."""

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        check_op(op)
        REGISTRY[op].variants[variant] = fn
        return fn

    return add


def check_op(op: str) -> None:
    if op not in REGISTRY:
        raise UnknownOpError(f"unknown op {op!r}; choose from {', '.join(REGISTRY)}")


def check_variant(op: str, variant: str) -> None:
    check_op(op)
    if variant not in REGISTRY[op].variants:
        choices = ", ".join(REGISTRY[op].variants)
        raise UnknownOpError(f"unknown {op} variant {variant!r}; choose from {choices}")


def complete(assignment: Mapping[str, str] | None = None) -> dict[str, str]:
    """A full assignment: every op named, the omitted ones at their default variant."""
    assignment = dict(assignment or {})
    for op, variant in assignment.items():
        check_variant(op, variant)
    return {op: assignment.get(op, spec.default) for op, spec in REGISTRY.items()}


def reference_assignment() -> dict[str, str]:
    """Every op at its plain composed form: the ground truth that `fusebench verify` compares against."""
    return {op: spec.reference for op, spec in REGISTRY.items()}


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
