"""A fusion candidate as a plugin: softcap as one compiled kernel that multiplies by 1/cap instead
of dividing.

Use it without touching fusebench: `fusebench verify --plugin examples/plugins/fast_softcap.py`, or
in an experiment `plugins: [examples/plugins/fast_softcap.py]` (paths relative to the YAML file) and
`{softcap: reciprocal}`.
"""

import mlx.core as mx

from fusebench.models.ops import register


@mx.compile
def _softcap(x: mx.array, inverse_cap: mx.array, cap: mx.array) -> mx.array:
    return mx.tanh(x * inverse_cap) * cap


@register("softcap", "reciprocal")
def softcap_reciprocal(x: mx.array, cap: float) -> mx.array:
    return _softcap(x, mx.array(1.0 / cap, dtype=x.dtype), mx.array(cap, dtype=x.dtype))
