"""The op registry's declarations: which ops are switchable, what each computes, its reference and
default variant.

No mlx here: a results file or an experiment can name ops, and a report can describe them, without
loading the model. An op is declared once, with `declare`; its variants register themselves with
`register`, and what the benchmarks need to call it (its shapes at a model's sizes, its inputs, its
FLOPs: `fusebench.models.calls.OpCalls`) with `register_calls`. The built-in ops are declared below
and implemented in `fusebench.models.ops`; a user plugin declares a new op the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UnknownOpError


@dataclass
class OpSpec:
    """One switchable op: `reference` is the plain composed form, `default` what a variant gets when
    it omits the op.
    """

    name: str
    doc: str
    reference: str
    default: str
    variants: dict[str, Callable[..., Any]] = field(default_factory=dict)
    # An op whose calls probe for a fused kernel (fusebench.models.calls.OpCalls.probe_fused): what
    # the probe asks, for the report's kernel section, and what a Δ means when the kernel fell back.
    probe_doc: str = ""
    fallback_note: str = ""


REGISTRY: dict[str, OpSpec] = {}


def declare(
    name: str,
    doc: str,
    *,
    reference: str,
    default: str,
    probe_doc: str = "",
    fallback_note: str = "",
) -> OpSpec:
    """Declare a new switchable op; its variants (the reference and default among them) register
    afterwards."""
    if name in REGISTRY:
        raise ValueError(f"op {name!r} is already declared; declare a new name")
    REGISTRY[name] = OpSpec(
        name, doc, reference, default, probe_doc=probe_doc, fallback_note=fallback_note
    )
    return REGISTRY[name]


declare(
    "geglu",
    "gelu_approx(gate) * up in the MLP, MoE experts and PLE gate",
    reference="unfused",
    default="unfused",
)
declare(
    "softcap", "tanh(x / cap) * cap on the final logits", reference="unfused", default="unfused"
)
declare(
    "attention",
    "softmax(q k^T * scale + mask) v in every layer",
    reference="manual",
    default="manual",
    probe_doc="For each attention shape, MLX was asked for its fused SDPA kernel (force_fused): "
    "fused, or fallback with MLX's reason.",
    fallback_note="This Δ measures the manual path (K/V repeated per query head, additive mask) "
    "against MLX's composed fallback, not against a fused kernel.",
)
declare(
    "rms_norm",
    "x * rsqrt(mean(x^2) + eps) * weight in every norm",
    reference="composed",
    default="fast",
)
declare("rope", "rotary position embedding of q and k", reference="composed", default="fast")
declare(
    "swiglu",
    "silu(gate) * up in the MLP and MoE experts of Llama-style models (mlx-lm's models)",
    reference="unfused",
    default="compiled",
)


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
    """Every op at its plain composed form: the ground truth that `fusebench verify` compares
    against."""
    return {op: spec.reference for op, spec in REGISTRY.items()}


def op_choices() -> dict[str, tuple[list[str], str]]:
    """op -> (its registered implementations, its default), the form an experiment's variants are
    checked against."""
    return {op: (list(spec.variants), spec.default) for op, spec in REGISTRY.items()}
