"""The conversation between the runner and a worker process.

The runner starts a worker with a `WorkerJob` (one JSON line on its stdin): the model and everything that stays
fixed. Then it drives the worker one command at a time (`Command`, one JSON line each) and reads back events (one
JSON line each on the worker's stdout): `Recorded` for every record a command produces, then `Done`. The runner, not
the worker, decides the order of trials, so it can interleave two builds' workers trial by trial (`run --against`)
and stop a cell as soon as its confidence intervals are narrow enough (`trials: auto`).

PROTOCOL is bumped whenever this conversation changes; a reference build that speaks another one is refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

PROTOCOL = 2


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
class Gate:
    """The correctness gate: every variant's logits against the reference variant's."""

    reference: str
    atol: float
    tokens: int


@dataclass(frozen=True)
class WorkerJob:
    model: ModelRef
    variants: dict[str, dict[str, str]]  # name -> complete op assignment
    prefill_step_size: int
    seed: int
    correctness: Gate
    plugins: tuple[str, ...] = ()  # files that register variants; imported before the model is built
    protocol: int = PROTOCOL

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerJob:
        data = json.loads(text)
        if data.get("protocol") != PROTOCOL:
            raise ValueError(f"worker protocol {PROTOCOL}, job protocol {data.get('protocol')}")
        return cls(
            model=ModelRef(**data["model"]),
            variants=data["variants"],
            prefill_step_size=data["prefill_step_size"],
            seed=data["seed"],
            correctness=Gate(**data["correctness"]),
            plugins=tuple(data["plugins"]),
        )


@dataclass(frozen=True)
class CellShape:
    """The workload of a cell, as a command carries it."""

    key: str
    prompt_tokens: int
    gen_tokens: int
    batch: int


@dataclass(frozen=True)
class Command:
    """One thing for the worker to do. `do`: "correctness" or "kernels" (for a cell), "trial" (one variant at one
    round), "depth" (one variant's decode speed at each KV depth, from one long prefill)."""

    do: str
    cell: CellShape
    variant: str | None = None
    round: int = 0
    warmup: bool = False
    depths: tuple[int, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Command:
        data = json.loads(text)
        return cls(**{**data, "cell": CellShape(**data["cell"]), "depths": tuple(data["depths"])})


@dataclass(frozen=True)
class Loaded:
    load_s: float
    parameters: int
    weight_bytes: int


@dataclass(frozen=True)
class Recorded:
    """A record for the results file (trial, correctness, depth, kernel), without the cell's common fields."""

    record: dict[str, Any]


@dataclass(frozen=True)
class Done:
    """The command is finished."""


Event = Loaded | Recorded | Done
_EVENT_TYPES: dict[str, type] = {"loaded": Loaded, "record": Recorded, "done": Done}
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
