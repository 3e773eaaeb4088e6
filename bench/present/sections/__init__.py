"""The report's sections, one module each. Every section is a `Section`: it takes the one
ReportContext and returns its blocks (none when the results hold nothing for it);
fusebench.present.report lists them, in report order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...analysis.reference import Reference
from ...analysis.study import Study
from ..document import Block


@dataclass
class ReportContext:
    """What every section is built from. A section may add to `warnings`; the Warnings section lists
    those raised before it, and the terminal shows them all."""

    study: Study
    comparisons: list[tuple[str, str]]  # (baseline, new) pairs
    out_dir: Path  # where the plots go
    reference: Reference | None = None  # published figures to show beside the measured Δ
    sources: Sequence[str | Path] = ()  # the results files
    warnings: list[str] = field(default_factory=list)


class Section(Protocol):
    def __call__(self, context: ReportContext, /) -> list[Block]: ...
