"""A wrong fusion candidate, kept to show that fusebench catches one: it forgets to scale back by
the cap, so its logits lie in (-1, 1) instead of (-cap, cap). `fusebench verify --plugin
examples/plugins/broken_softcap.py` exits 1, and in a run the correctness gate fails it, the report
never calls it faster, and `fusebench check` exits 1."""

import mlx.core as mx

from fusebench.models.ops import register


@register("softcap", "forgot_cap")
def softcap_forgot_cap(x: mx.array, cap: float) -> mx.array:
    return mx.tanh(x / cap)
