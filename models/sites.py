"""Where mlx-lm's own models call an op: the module-level names an op's variants are switched in at.

mlx-lm's models call their fusable helpers through names bound in their modules (`swiglu` from
`activations`, `scaled_dot_product_attention` from `base`, `geglu` and `logit_softcap` in
`gemma4_text`) or through `mx.fast` (`rms_norm`, `rope`, inside `nn.RMSNorm` and `nn.RoPE` too).
Rebinding such a name switches every call of it. Each op declares its sites once, next to its
variants, with one decorator on an adapter that turns a call at the site into a call of the op's
variant (same arguments as the op's reference variant):

    @register_site("swiglu", "swiglu")             # the name in the model's own modules
    def swiglu_site(variant, original, gate, x):
        return variant(gate, x)

    @register_site("rms_norm", "rms_norm", module="mlx.core.fast")   # one module, named
    def rms_norm_site(variant, original, x, weight, eps, **kwargs):
        return variant(x, weight, eps)

`original` is what the name was bound to, for calls the op's variants cannot take. Nothing here
knows about timing; fusebench.models.switched installs the sites.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .registry import REGISTRY, OpSpec, check_op

Adapter = Callable[..., Any]


@dataclass(frozen=True)
class Site:
    """A name an op is called through. `module` None: the name as each of the model's own modules
    binds it (the modules defining its layers' classes, e.g. mlx_lm.models.qwen3 and
    mlx_lm.models.switch_layers)."""

    op: str
    name: str
    module: str | None
    adapt: Adapter

    @property
    def where(self) -> str:
        return f"{self.module or 'the model modules'}.{self.name}"


# Each declared op's sites, with the declaration they belong to (as fusebench.models.calls.CALLS).
SITES: dict[str, tuple[OpSpec, list[Site]]] = {}


def register_site(op: str, name: str, *, module: str | None = None) -> Callable[[Adapter], Adapter]:
    """Declare that mlx-lm's models call `op` through `name` (in `module`, or in their own)."""

    def add(adapt: Adapter) -> Adapter:
        check_op(op)
        spec, sites = SITES.get(op, (REGISTRY[op], []))
        if spec is not REGISTRY[op]:  # the op was declared anew: its old sites are gone
            sites = []
        SITES[op] = (REGISTRY[op], [*sites, Site(op, name, module, adapt)])
        return adapt

    return add


def sites_by_op() -> dict[str, list[Site]]:
    """Every op's sites as it is declared now, in declaration order."""
    found = {}
    for op, spec in REGISTRY.items():
        declared, sites = SITES.get(op, (None, []))
        if declared is spec:
            found[op] = sites
    return found
