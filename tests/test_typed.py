"""from_mapping: a dataclass read back from the JSON (or YAML) it was written as, by its own field
names."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

import pytest

from bench.core.typed import from_mapping


class Colour(StrEnum):
    RED = "red"


@dataclass(frozen=True)
class Inner:
    size: int
    colour: Colour = Colour.RED


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    many: tuple[Inner, ...] = ()
    maybe: Inner | None = None
    note: str = "none"


def test_a_dataclass_reads_back_what_it_wrote():
    written = Outer("a", Inner(1), (Inner(2), Inner(3)), Inner(4), "n")
    assert from_mapping(Outer, asdict(written)) == written
    assert isinstance(from_mapping(Outer, asdict(written)).maybe, Inner)


def test_unknown_keys_are_ignored_and_absent_ones_take_their_default():
    read = from_mapping(Outer, {"name": "a", "inner": {"size": 1, "colour": "red"}, "new": 1})
    assert read == Outer("a", Inner(1, Colour.RED)) and isinstance(read.inner.colour, Colour)


def test_a_missing_field_without_a_default_is_a_type_error():
    with pytest.raises(TypeError):
        from_mapping(Outer, {"name": "a"})
