"""Two softcap variants that wait instead of computing more: one sleeps 40 ms every call, the other
400 ms on one call in sixteen (25 ms a call on average). The stall check of issue 53."""
import itertools
import time

import mlx.core as mx
from fusebench.models.ops import register

_calls = itertools.count()


@register("softcap", "sleep40")
def softcap_sleep40(x, cap):
    time.sleep(0.040)
    return mx.tanh(x * (1.0 / cap)) * cap


@register("softcap", "stall400")
def softcap_stall400(x, cap):
    if next(_calls) % 16 == 15:
        time.sleep(0.400)
    return mx.tanh(x * (1.0 / cap)) * cap
