"""A record read back as the dataclass that describes it, filled by the dataclass's own field names,
so no reader names a key (as mlx-lm's `BaseModelArgs.from_dict` builds a model's arguments).

Keys the dataclass does not declare are left out (a newer writer's fields, an older one's spares);
fields the mapping lacks keep their defaults (what an older writer never recorded).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")
# a dataclass's resolved annotations, looked up once per class: a report reads thousands of records
_hints = cache(typing.get_type_hints)


def from_mapping(cls: type[T], mapping: Mapping[str, object]) -> T:
    """A `cls` (a dataclass) holding the mapping's values of its fields; a field that is itself a
    dataclass, a dataclass or None, a dict of dataclasses or a tuple is read the same way."""
    hints = _hints(cls)
    return cls(
        **{
            f.name: _value(hints[f.name], mapping[f.name])
            for f in dataclasses.fields(cls)
            if f.name in mapping
        }
    )


def _value(hint: Any, value: object) -> object:
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _value(next(arg for arg in args if arg is not type(None)), value)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise TypeError(f"{hint.__name__}: expected an object, got {value!r}")
        return from_mapping(hint, value)
    if origin is dict and isinstance(value, Mapping):
        return {key: _value(args[1], item) for key, item in value.items()}
    if origin is tuple and isinstance(value, list | tuple):
        return tuple(_value(args[0], item) for item in value)
    return value
