"""Records read back as the types that wrote them: a dataclass filled from a mapping (a JSON object,
a YAML entry) by its own field names, as mlx-lm's BaseModelArgs.from_dict fills a model's args, so
no reader names a key.

Keys the dataclass does not declare are left out (a newer writer's fields, an older one's spares);
fields the mapping lacks keep their defaults (what an older writer never recorded).
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


def from_mapping(cls: type[T], mapping: Mapping[str, object]) -> T:
    """Dataclass `cls` from the mapping's values of its fields. A field typed as a dataclass (or
    None), a dict or tuple of them, or an enum is converted from what JSON holds for it."""
    hints = _hints(cls)
    return cls(
        **{
            field.name: _converted(hints[field.name], mapping[field.name])
            for field in dataclasses.fields(cls)  # type: ignore[arg-type]
            if field.init and field.name in mapping
        }
    )


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
