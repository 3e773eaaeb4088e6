"""A stopwatch that adds up the time spent inside its `with` blocks: what a run spends measuring
the machine once (threads, schedule and clock, peaks; cached after), which its budget leaves out."""

from __future__ import annotations

import time


class Stopwatch:
    def __init__(self) -> None:
        self.seconds = 0.0
        self._since = 0.0

    def __enter__(self) -> Stopwatch:
        self._since = time.monotonic()
        return self

    def __exit__(self, *raised: object) -> None:
        self.seconds += time.monotonic() - self._since
