"""The schedules a run's rounds can follow, by the name an experiment's `schedule:` gives
(`auto` is none of them: measure.run.pilot picks one)."""

from __future__ import annotations

from .base import RoundSchedule
from .duet import Duet
from .sequential import Sequential

SCHEDULES: dict[str, RoundSchedule] = {s.name: s for s in (Sequential(), Duet())}
