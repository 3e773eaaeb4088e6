"""What the runner sends a worker process (one typed job, as JSON on its stdin) and what comes back (typed events,
one JSON line each on its stdout)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelRef:
    """The model a worker builds: a preset (with overrides) or a checkpoint directory."""

    preset: str | None
    path: str | None
    layers: int | None
    dtype: str
    quantize: str | None

    @property
    def source(self) -> str:
        return self.path or str(self.preset)


@dataclass(frozen=True)
class CellJob:
    key: str
    prompt_tokens: int
    gen_tokens: int
    batch: int


@dataclass(frozen=True)
class Gate:
    """The correctness gate: every variant's logits against the reference variant's."""

    reference: str
    atol: float
    tokens: int


@dataclass(frozen=True)
class WorkerJob:
    model: ModelRef
    cells: tuple[CellJob, ...]
    variants: dict[str, dict[str, str]]  # name -> complete op assignment
    trials: int
    warmup: int
    prefill_step_size: int
    seed: int
    depths: tuple[int, ...]
    correctness: Gate
    plugins: tuple[str, ...] = ()  # files that register variants; imported before the model is built
    # What a resumed run has recorded already: (cell, variant, warmup, round), (cell, "correctness"), ...
    done: frozenset[tuple] = field(default_factory=frozenset)

    def to_json(self) -> str:
        data = asdict(self)
        data["done"] = [list(key) for key in self.done]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> WorkerJob:
        data = json.loads(text)
        return cls(
            model=ModelRef(**data["model"]),
            cells=tuple(CellJob(**cell) for cell in data["cells"]),
            variants=data["variants"],
            trials=data["trials"],
            warmup=data["warmup"],
            prefill_step_size=data["prefill_step_size"],
            seed=data["seed"],
            depths=tuple(data["depths"]),
            correctness=Gate(**data["correctness"]),
            plugins=tuple(data["plugins"]),
            done=frozenset(tuple(key) for key in data["done"]),
        )


@dataclass(frozen=True)
class CellStarted:
    """The worker starts a cell: the runner's per-cell timeout starts now."""

    key: str


@dataclass(frozen=True)
class Loaded:
    cell: str
    load_s: float
    parameters: int
    weight_bytes: int


@dataclass(frozen=True)
class Recorded:
    """A record for the results file (trial, correctness, depth, kernel), without the cell's common fields."""

    record: dict[str, Any]


Event = CellStarted | Loaded | Recorded
_EVENT_TYPES: dict[str, type] = {"cell": CellStarted, "loaded": Loaded, "record": Recorded}
_EVENT_NAMES = {cls: name for name, cls in _EVENT_TYPES.items()}


def encode_event(event: Event) -> str:
    return json.dumps({"event": _EVENT_NAMES[type(event)], **asdict(event)})


def decode_event(line: str) -> Event:
    """An event from one line of a worker's stdout; ValueError if the line is not one."""
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("event") not in _EVENT_TYPES:
        raise ValueError(f"not a worker event: {line[:80]!r}")
    kind = _EVENT_TYPES[data.pop("event")]
    return kind(**data)
