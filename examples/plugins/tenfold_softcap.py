"""A variant that is slower by a known cause: the unfused softcap computed ten times over, then
averaged.

It computes the same logits as the reference (ten equal terms, divided by ten), so
`fusebench verify` passes, and it only adds work to the one op: the check that the expected Δ (from
the op's share of a step) predicts the measured end-to-end Δ. experiments/tenfold-softcap.yaml runs
it.
"""

import mlx.core as mx

from fusebench.models.ops import register, softcap_unfused


@register("softcap", "tenfold")
def softcap_tenfold(x: mx.array, cap: float) -> mx.array:
    # Without mx.compile, mlx does not merge identical subgraphs: each of the ten is computed.
    return sum((softcap_unfused(x, cap) for _ in range(10)), mx.zeros_like(x)) / 10
