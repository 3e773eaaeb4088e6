"""Published reference figures (e.g. ollama PR 15587's table), shown beside measured ones by
`fusebench report`.

A reference is a YAML file: its source, the ops it changed, its method and hardware, and rows of
size x metric with baseline, new and Δ. Shipped references live in bench/data/reference_<name>.yaml
and can be named by <name>.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from ..core.fileformat import METRICS

REQUIRED_KEYS = ("name", "source", "method", "hardware", "rows")
ROW_KEYS = ("size", "metric", "baseline", "new")


class ReferenceFileError(UserError):
    """A reference that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class ReferenceRow:
    size: str
    metric: str
    baseline: float
    new: float
    delta_pct: float


@dataclass(frozen=True)
class Method:
    """How the reference was measured; None where the source does not say."""

    quantize: str | None = None
    prompt_tokens: int | None = None
    gen_tokens: int | None = None
    epochs: int | None = None
    warmup: int = 0


@dataclass(frozen=True)
class Hardware:
    backend: str = "?"
    device: str = "?"


@dataclass(frozen=True)
class Reference:
    name: str
    title: str
    source: str
    ops: dict[str, tuple[str, str]]
    method: Method
    hardware: Hardware
    rows: tuple[ReferenceRow, ...]

    def row(self, size_label: str, metric: str) -> ReferenceRow | None:
        """The published row for a measured size label ("E2B (2/35 layers)" matches "E2B") and
        metric."""
        for row in self.rows:
            if row.metric == metric and matches_size(size_label, row.size):
                return row
        return None

    def describe(self) -> str:
        """Where and how the reference was measured, e.g. "Metal (Apple Silicon ...), nvfp4, pp2048
        tg128"."""
        hw, method = self.hardware, self.method
        parts = [f"{hw.backend} ({hw.device})", method.quantize or "unquantized"]
        if method.prompt_tokens is not None and method.gen_tokens is not None:
            parts.append(f"pp{method.prompt_tokens} tg{method.gen_tokens}")
        if method.epochs is not None:
            parts.append(f"{method.epochs} epochs + {method.warmup} warmup")
        return ", ".join(parts)


def matches_size(label: str, size: str) -> bool:
    """True when a display label names that size: "E2B (2/35 layers)" is an E2B, "E2Bx" is not."""
    return (
        re.match(rf"{re.escape(size)}(?![0-9A-Za-z])", label.strip(), flags=re.IGNORECASE)
        is not None
    )


def reference_from(data: object, path: Path) -> Reference:
    """A reference from a YAML file's parsed content (`path` names it in errors)."""
    if not isinstance(data, dict):
        raise ReferenceFileError(f"{path}: expected a mapping with keys {', '.join(REQUIRED_KEYS)}")
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing:
        raise ReferenceFileError(f"{path}: missing key(s) {', '.join(missing)}")
    return Reference(
        name=str(data["name"]),
        title=str(data.get("title", data["name"])),
        source=str(data["source"]),
        ops=_ops(data.get("ops") or {}, path),
        method=_method(data["method"], path),
        hardware=_hardware(data["hardware"], path),
        rows=tuple(_row(item, path, i) for i, item in enumerate(_list(data["rows"], path))),
    )


def _method(node: Any, path: Path) -> Method:
    method = _mapping(node, path, "method")
    quantize = method.get("quantize")
    return Method(
        quantize=str(quantize) if quantize else None,
        prompt_tokens=method.get("prompt_tokens"),
        gen_tokens=method.get("gen_tokens"),
        epochs=method.get("epochs"),
        warmup=method.get("warmup", 0),
    )


def _hardware(node: Any, path: Path) -> Hardware:
    hardware = _mapping(node, path, "hardware")
    return Hardware(
        backend=str(hardware.get("backend", "?")), device=str(hardware.get("device", "?"))
    )


def _mapping(node: Any, path: Path, field: str) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise ReferenceFileError(f"{path}: {field}: expected a mapping")
    return node


def _list(node: Any, path: Path) -> list[Any]:
    if not isinstance(node, list) or not node:
        raise ReferenceFileError(f"{path}: rows: expected a non-empty list")
    return node


def _ops(node: Any, path: Path) -> dict[str, tuple[str, str]]:
    ops = {}
    for op, change in _mapping(node, path, "ops").items():
        if not (isinstance(change, list) and len(change) == 2):
            raise ReferenceFileError(
                f"{path}: ops.{op}: expected [baseline implementation, new implementation]"
            )
        ops[str(op)] = (str(change[0]), str(change[1]))
    return ops


def _row(item: Any, path: Path, index: int) -> ReferenceRow:
    field = f"rows[{index}]"
    row = _mapping(item, path, field)
    missing = [key for key in ROW_KEYS if key not in row]
    if missing:
        raise ReferenceFileError(f"{path}: {field}: missing key(s) {', '.join(missing)}")
    if row["metric"] not in METRICS:
        raise ReferenceFileError(
            f"{path}: {field}.metric: expected one of {', '.join(METRICS)}, got {row['metric']!r}"
        )
    baseline, new = (
        _positive(row["baseline"], path, f"{field}.baseline"),
        _positive(row["new"], path, f"{field}.new"),
    )
    # Keep the published Δ when given: it is what the source printed, rounding included.
    delta = row.get("delta_pct")
    return ReferenceRow(
        size=str(row["size"]),
        metric=row["metric"],
        baseline=baseline,
        new=new,
        delta_pct=(new / baseline - 1.0) * 100.0 if delta is None else float(delta),
    )


def _positive(value: Any, path: Path, field: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ReferenceFileError(f"{path}: {field}: expected a positive number, got {value!r}")
    return float(value)
