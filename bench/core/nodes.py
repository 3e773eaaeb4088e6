"""Typed reads of YAML nodes, each keeping its line: the readers core.spec builds the experiment
schema from. A bad value raises `Invalid` (line, field, message), which the schema turns into a
SpecError naming the file.

Validation works on the `yaml.compose` node tree rather than on loaded Python values, because only
the nodes know their line numbers, and only they can tell a duplicate key (which `yaml.safe_load`
silently drops) or the bool `yes` from the int `1`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import NoReturn, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

T = TypeVar("T")

_NAME = re.compile(r"[A-Za-z0-9._-]+")
_TAG = "tag:yaml.org,2002:"
NULL, BOOL, INT, FLOAT, STR = (_TAG + kind for kind in ("null", "bool", "int", "float", "str"))


# --- errors -----------------------------------------------------------------------------


class Invalid(Exception):
    """Raised deep in validation, where the file name is not known; `_parse` turns it into a
    SpecError."""

    def __init__(self, line: int, field: str, message: str) -> None:
        super().__init__(message)
        self.line, self.field, self.message = line, field, message


def line_of(node: Node) -> int:
    return node.start_mark.line + 1


def fail(node: Node, field: str, message: str) -> NoReturn:
    raise Invalid(line_of(node), field, message)


def join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def listed(names: Sequence[str]) -> str:
    return ", ".join(names)


def describe(node: Node) -> str:
    """What the user wrote, in words, for 'expected X, got Y' messages."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    value = node.value if len(node.value) <= 40 else node.value[:37] + "..."
    kinds = {
        NULL: "nothing (null)",
        BOOL: f"a boolean ({value})",
        INT: f"an integer ({value})",
        FLOAT: f"a float ({value})",
        STR: f"a string ({value!r})",
    }
    return kinds.get(node.tag, f"a value tagged {node.tag}")


# --- node readers --------------------------------------------------------------------------------

Items = dict[str, tuple[Node, Node]]  # key -> (key node, value node), in document order
SCALARS = yaml.constructor.SafeConstructor()


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == NULL


def mapping(node: Node, field: str, valid: Sequence[str] | None, what: str = "key") -> Items:
    if not isinstance(node, MappingNode):
        fail(node, field, f"expected a mapping, got {describe(node)}")
    items: Items = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, ScalarNode) or is_null(key_node):
            fail(
                key_node,
                field or "experiment",
                f"expected a name as {what}, got {describe(key_node)}",
            )
        key = key_node.value
        if key in items:
            first = line_of(items[key][0])
            fail(
                key_node,
                join(field, key),
                f"duplicate {what} {key!r} (first defined on line {first})",
            )
        if valid is not None and key not in valid:
            fail(key_node, join(field, key), f"unknown key {key!r}; valid keys: {listed(valid)}")
        items[key] = (key_node, value_node)
    return items


def required(items: Items, key: str, parent: Node, field: str) -> Node:
    if key not in items:
        fail(parent, join(field, key), "required key is missing")
    return items[key][1]


def optional(items: Items, key: str, field: str, read: Callable[[Node, str], T], default: T) -> T:
    """An absent key, or one left empty, takes its default."""
    if key not in items or is_null(items[key][1]):
        return default
    return read(items[key][1], join(field, key))


def sequence(node: Node, field: str) -> list[Node]:
    if not isinstance(node, SequenceNode):
        fail(node, field, f"expected a list, got {describe(node)}")
    return node.value


def text(node: Node, field: str, allow_empty: bool = False) -> str:
    # Any plain scalar is text, so `1: {}` defines variant "1" and `[1, 2]` refers to it.
    if not isinstance(node, ScalarNode) or is_null(node) or (node.value == "" and not allow_empty):
        fail(node, field, f"expected a string, got {describe(node)}")
    return node.value


def name(node: Node, field: str) -> str:
    # Names end up in file names and on command lines.
    name = text(node, field)
    if not _NAME.fullmatch(name) or set(name) == {"."}:
        fail(node, field, f"bad name {name!r}; use letters, digits, '-', '_' and '.'")
    return name


def choice(node: Node, field: str, choices: Sequence[str], what: str) -> str:
    value = text(node, field)
    if value not in choices:
        fail(node, field, f"unknown {what} {value!r}; choose from {listed(choices)}")
    return value


def integer(node: Node, field: str, minimum: int | None = None) -> int:
    # Only the int tag: `true` and `2.0` are not counts, even though Python would accept them as
    # such.
    if not isinstance(node, ScalarNode) or node.tag != INT:
        fail(node, field, f"expected an integer, got {describe(node)}")
    value = SCALARS.construct_yaml_int(node)
    if minimum is not None and value < minimum:
        fail(node, field, f"must be >= {minimum}, got {value}")
    return value


def number(node: Node, field: str, minimum: float, exclusive: bool = False) -> float:
    if not isinstance(node, ScalarNode) or node.tag not in (INT, FLOAT):
        fail(node, field, f"expected a number, got {describe(node)}")
    reader = SCALARS.construct_yaml_int if node.tag == INT else SCALARS.construct_yaml_float
    value = float(reader(node))
    if not math.isfinite(value):
        fail(node, field, f"must be a finite number, got {node.value}")
    if value < minimum or (exclusive and value == minimum):
        fail(node, field, f"must be {'>' if exclusive else '>='} {minimum:g}, got {value:g}")
    return value


def int_values(
    node: Node, field: str, read: Callable[[Node, str], int], allow_empty: bool
) -> tuple[int, ...]:
    """An int or a list of distinct ints, each checked by `read`: repeats would give cells with the
    same key."""
    if isinstance(node, ScalarNode):
        return (read(node, field),)
    items = sequence(node, field)
    if not items and not allow_empty:
        fail(node, field, "empty list; give at least one value, or the matrix is empty")
    values: list[int] = []
    for i, item in enumerate(items):
        value = read(item, f"{field}[{i}]")
        if value in values:
            fail(item, f"{field}[{i}]", f"duplicate value {value}")
        values.append(value)
    return tuple(values)


def counts(node: Node, field: str, allow_empty: bool = False) -> tuple[int, ...]:
    """An int >= 1 or a list of distinct ones."""
    return int_values(node, field, partial(integer, minimum=1), allow_empty)
