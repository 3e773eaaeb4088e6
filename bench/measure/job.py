"""The conversation between the runner and a worker process.

The runner starts a worker with a `WorkerJob` (one JSON line on its stdin): the model and everything
that stays fixed. Then it drives the worker one command at a time (`Command`, one JSON line each)
and reads back events (one JSON line each on the worker's stdout): `Recorded` for every result a
command produces, then `Done`. The runner, not the worker, decides the order of trials, so it can
interleave two builds' workers trial by trial (`run --against`) and stop a cell as soon as its
confidence intervals are narrow enough (`trials: auto`).

Each side holds typed values; JSON exists only on the pipe, written and read here. A result is one
of the `Result` dataclasses, on the pipe as `{"event": "record", "record": {"kind": KIND, FIELD:
VALUE, ...}}`: the fields of the record the runner writes to the results file, without the cell's
common ones.

PROTOCOL is bumped whenever this conversation changes; a reference build that speaks another one is
refused. A field added to a result without bumping it needs a default: a build of the same protocol
from before the field lacks it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from ..core.cell import Agreement, DepthSpeed, KernelFact, ShareTime, SiteCalls, Trial
from ..core.experiment import ModelSpec, model_spec
from ..core.typed import from_mapping, to_record

PROTOCOL = 3

# The model as a job carries it: what a worker builds it from. Its label stays with the runner (the
# worker needs none, and protocol 2 has no field for it).
_MODEL_FIELDS = ("preset", "path", "layers", "dtype", "quantize")


# Defaults of the correctness gate: max |logit error| against the reference variant, by dtype.
ATOL_BY_DTYPE = {"float32": 1e-2, "float16": 0.25, "bfloat16": 0.5}


@dataclass(frozen=True)
class Gate:
    """The correctness gate: every variant's logits against the reference variant's."""

    reference: str
    atol: float
    tokens: int


@dataclass(frozen=True)
class WorkerJob:
    model: ModelSpec
    variants: dict[str, dict[str, str]]  # name -> complete op assignment
    prefill_step_size: int
    seed: int
    correctness: Gate
    # files that register variants; imported before the model is built
    plugins: tuple[str, ...] = ()
    protocol: int = PROTOCOL

    def to_json(self) -> str:
        return json.dumps(
            {**asdict(self), "model": {name: getattr(self.model, name) for name in _MODEL_FIELDS}}
        )

    @classmethod
    def from_json(cls, text: str) -> WorkerJob:
        data = json.loads(text)
        if data.get("protocol") != PROTOCOL:
            raise ValueError(f"worker protocol {PROTOCOL}, job protocol {data.get('protocol')}")
        # The pipe carries no label: model_spec gives the model its default one.
        return from_mapping(cls, {**data, "model": model_spec(**data["model"])})


@dataclass(frozen=True)
class CellShape:
    """The workload of a cell, as a command carries it."""

    key: str
    prompt_tokens: int
    gen_tokens: int
    batch: int


class Do(StrEnum):
    """What a command asks of the worker (the JSON carries the value: a reference build of an older
    commit reads the same strings)."""

    KERNELS = "kernels"  # the kernel facts of a cell
    TRIAL = "trial"  # one variant at one round
    DEPTH = "depth"  # one variant's decode speed at each KV depth, from one long prefill
    SHARES = "shares"  # one round timing every switchable op call of a prefill and a decode step


@dataclass(frozen=True)
class Command:
    """One thing for the worker to do, for one cell."""

    do: Do
    cell: CellShape
    variant: str | None = None
    round: int = 0
    warmup: bool = False
    depths: tuple[int, ...] = ()
    # a warm-up trial whose logits the worker compares with the reference variant's (the run's
    # correctness check, which thus costs no pass of its own)
    check: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Command:
        return from_mapping(cls, json.loads(text))


# --- results: what a command produces (declared with the records they become: core.cell) ---------


# What a command produces; a kernel fact (measure.ops.kernels) is one too.
Result = Trial | Agreement | DepthSpeed | ShareTime | SiteCalls | KernelFact


# Each kind of result by the kind its record names.
_RESULTS: dict[str, type[Result]] = {
    kind.KIND: kind for kind in (Trial, Agreement, DepthSpeed, ShareTime, SiteCalls, KernelFact)
}


def _result(record: Mapping[str, Any]) -> Result:
    kind = record.get("kind")
    if kind not in _RESULTS:
        raise ValueError(f"unknown result kind {kind!r}")
    return from_mapping(_RESULTS[kind], record)


# --- events: what the worker says ----------------------------------------------------------------


@dataclass(frozen=True)
class Loaded:
    load_s: float  # weights built or read, less written_s
    parameters: int
    weight_bytes: int
    written_s: float = 0.0  # writing a preset's weights to the cache: the machine's one-time cost
    not_kept: str = ""  # why the weights made here could not be kept in the cache (WeightsCache)


@dataclass(frozen=True)
class Recorded:
    """A result for the results file: the runner adds the cell's common fields."""

    result: Result


@dataclass(frozen=True)
class Done:
    """The command is finished."""


Event = Loaded | Recorded | Done


def encode_event(event: Event) -> str:
    if isinstance(event, Recorded):
        record = to_record(event.result)
        return json.dumps({"event": "record", "record": record})
    return json.dumps({"event": "loaded" if isinstance(event, Loaded) else "done", **asdict(event)})


def decode_event(line: str) -> Event:
    """An event from one line of a worker's stdout; ValueError if the line is not one."""
    data = json.loads(line)
    event = data.get("event") if isinstance(data, dict) else None
    if event not in ("loaded", "record", "done"):
        raise ValueError(f"not a worker event: {line[:80]!r}")
    try:
        if event == "record":
            return Recorded(_result(data["record"]))
        return from_mapping(Loaded, data) if event == "loaded" else Done()
    except (KeyError, TypeError) as err:
        raise ValueError(f"a worker event of another shape ({err}): {line[:80]!r}") from None
