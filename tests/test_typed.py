"""from_mapping: a dataclass read back from the JSON (or YAML) it was written as, by its own field
names."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum

import pytest

from fusebench.core.typed import FLAT, from_mapping, required_fields, to_mapping, to_record


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


@dataclass(frozen=True, kw_only=True)
class Flat:
    """A record with parts written inline, as a trial's cell and measurements are."""

    KIND = "flat"

    inner: Inner = field(metadata=FLAT)
    maybe: Extra | None = field(default=None, metadata=FLAT)
    own: str


@dataclass(frozen=True)
class Extra:
    weight: float
    unit: str = "kg"


def test_flat_parts_are_written_beside_the_records_own_fields_and_read_back():
    written = to_record(Flat(inner=Inner(1), maybe=Extra(2.0), own="x"))
    assert written == {
        "kind": "flat",
        "size": 1,
        "colour": "red",
        "weight": 2.0,
        "unit": "kg",
        "own": "x",
    }
    assert from_mapping(Flat, written) == Flat(inner=Inner(1), maybe=Extra(2.0), own="x")


def test_an_optional_flat_part_the_record_lacks_reads_as_none_and_writes_nothing():
    record = {"size": 1, "own": "x"}
    assert from_mapping(Flat, record) == Flat(inner=Inner(1), own="x")
    assert to_mapping(Flat(inner=Inner(1), own="x")) == {"size": 1, "colour": "red", "own": "x"}


def test_required_fields_are_those_without_a_default_inside_flat_parts_too():
    assert required_fields(Flat) == ("size", "own")
