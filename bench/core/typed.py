"""Records written and read back as one type: a dataclass written as a mapping of its fields
(`to_mapping`, `to_record`) and filled from one (a JSON object, a YAML entry) by its own field names
(`from_mapping`), as mlx-lm's BaseModelArgs.from_dict fills a model's args, so no writer or reader
names a key.

Keys the dataclass does not declare are left out (a newer writer's fields, an older one's spares);
fields the mapping lacks keep their defaults (what an older writer never recorded). A field marked
FLAT holds a part whose fields are written beside the record's own, not under the field's name.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")

# A dataclass-typed field whose fields are written and read inline: a trial record's measurements
# sit beside its cell's fields, as results files have always held them.
FLAT = {"flat": True}


def from_mapping(cls: type[T], mapping: Mapping[str, object]) -> T:
    """Dataclass `cls` from the mapping's values of its fields. A field typed as a dataclass (or
    None), a dict or tuple of them, or an enum is converted from what JSON holds for it."""
    hints = _hints(cls)
    values = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.metadata.get("flat"):
            part = _flat_part(hints[field.name], mapping)
            if part is not None:
                values[field.name] = part
        elif field.init and field.name in mapping:
            values[field.name] = _converted(hints[field.name], mapping[field.name])
    return cls(**values)


def _flat_part(hint: Any, mapping: Mapping[str, object]) -> object:
    """A FLAT part read from the record's own mapping; None for an optional part of which the
    record holds no field (a trial of a format before the part)."""
    kinds = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
    part = kinds[0]
    if type(None) in typing.get_args(hint) and not any(
        f.name in mapping for f in dataclasses.fields(part)
    ):
        return None
    return from_mapping(part, mapping)


def written_fields(cls: type) -> tuple[str, ...]:
    """Every field a record of `cls` is written with, in order, its FLAT parts' inline."""
    hints = _hints(cls)
    found: list[str] = []
    for field in dataclasses.fields(cls):
        if not field.metadata.get("flat"):
            found.append(field.name)
            continue
        hint = hints[field.name]
        (part,) = [a for a in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(a)]
        found += written_fields(part)
    return tuple(found)


def required_fields(cls: type) -> tuple[str, ...]:
    """The fields a record of `cls` must hold: those without a default, FLAT parts' among them."""
    hints = _hints(cls)
    found: list[str] = []
    for field in dataclasses.fields(cls):
        if (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        ):
            continue
        if field.metadata.get("flat"):
            found += required_fields(hints[field.name])
        else:
            found.append(field.name)
    return tuple(found)


def to_mapping(value: object) -> Any:
    """What JSON holds for `value`: a dataclass as an object of its fields (in declaration order),
    an enum as its value, a tuple as a list, each within converted too."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        written: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = to_mapping(getattr(value, f.name))
            if f.metadata.get("flat"):
                written.update(item or {})  # an absent part writes nothing
            else:
                written[f.name] = item
        return written
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [to_mapping(item) for item in value]
    if isinstance(value, Mapping):
        return {key: to_mapping(item) for key, item in value.items()}
    return value


def to_record(value: object) -> dict[str, Any]:
    """A record of a results file: the dataclass's fields after its kind (its KIND)."""
    return {"kind": type(value).KIND, **to_mapping(value)}  # type: ignore[attr-defined]


# A dataclass's field types, resolved once (its annotations are strings under `from __future__`):
# a report reads thousands of records.
_hints = cache(typing.get_type_hints)


def _converted(hint: Any, value: object) -> object:
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [arg for arg in args if arg is not type(None)]
        return _converted(kinds[0], value) if len(kinds) == 1 else value
    if origin is tuple and isinstance(value, list | tuple):
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else Any
        return tuple(_converted(item, v) for v in value)
    if origin is dict and isinstance(value, Mapping):
        return {key: _converted(args[1], item) for key, item in value.items()}
    if dataclasses.is_dataclass(hint) and not isinstance(value, hint):
        if not isinstance(value, Mapping):
            raise TypeError(f"{hint.__name__}: expected an object, got {value!r}")
        return from_mapping(hint, value)  # type: ignore[arg-type]
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    return value
