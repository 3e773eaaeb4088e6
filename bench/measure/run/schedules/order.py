"""The order of the variants in a round. The paired statistics are only as good as this order.

- Rounds alternate direction (ABBA): drift and position effects land on every variant alike.
- The shared baseline sits in the middle (`centre_order`): with three variants,
  `compiled baseline sdpa` and then the reverse, so each variant compared with the baseline runs
  right next to it in every round. Measured on this machine's committed runs: the baseline and a
  variant two slots away paired worse (SD of the log ratio 0.18 vs 0.14 for adjacent trials).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """ABBA: the order flips every round."""
    return list(names) if round_index % 2 == 0 else list(names)[::-1]


def centre_order(variants: Sequence[str], comparisons: Sequence[tuple[str, str]]) -> list[str]:
    """The variants with the most-compared one (the shared baseline) in the middle, the rest around
    it in order."""
    counts = Counter(name for pair in comparisons for name in pair if pair[0] != pair[1])
    if len(variants) < 3 or not counts:
        return list(variants)
    hub = max(variants, key=lambda name: (counts[name], -list(variants).index(name)))
    others = [name for name in variants if name != hub]
    half = len(others) // 2
    return [*others[:half], hub, *others[half:]]
