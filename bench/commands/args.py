"""Argument types shared by the commands: each turns text into a typed value at the edge, or a
one-line usage error (argparse's exit code 2)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def at_least(minimum: int, why: str = ""):
    """An integer type for argparse that is >= minimum."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"{value} is not >= {minimum}" + (f": {why}" if why else "")
            )
        return value

    return parse


positive_int = at_least(1)


def percent(text: str) -> float:
    """`10`, `10%` or `7.5` -> the percentage; must lie in [0, 100)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a percentage such as 10 or 10%"
        ) from None
    if not 0.0 <= value < 100.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0% and below 100%")
    return value


def duration(text: str) -> float:
    """`20m`, `90s`, `1h`, `1h30m` or `330` (seconds) -> seconds, > 0."""
    parts = re.fullmatch(
        r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*"
        r"(?:(\d+(?:\.\d+)?)s?)?\s*",
        text,
    )
    if not parts or not any(parts.groups()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration such as 20m, 90s, 1h30m or 330 (seconds)"
        )
    hours, minutes, seconds = (float(value or 0.0) for value in parts.groups())
    total = 3600.0 * hours + 60.0 * minutes + seconds
    if total <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than 0 s")
    return total


def shard(text: str) -> tuple[int, int]:
    """`2/4` -> (2, 4): shard I of N, 1 <= I <= N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise argparse.ArgumentTypeError(
            f"bad shard {text!r}: expected I/N with 1 <= I <= N, e.g. 2/4"
        )
    return int(match[1]), int(match[2])


def variant_pair(text: str) -> tuple[str, str]:
    """`baseline:compiled` -> ("baseline", "compiled")."""
    match = re.fullmatch(r"\s*([^:\s]+)\s*:\s*([^:\s]+)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected BASELINE:NEW (two variant names joined by ':'), got {text!r}"
        )
    return match.group(1), match.group(2)


def names(text: str) -> list[str]:
    """`E2B, 26b` -> ["E2B", "26b"]."""
    values = [name.strip() for name in text.split(",") if name.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return values


def op_values(text: str) -> tuple[str, tuple[str, ...]]:
    """`geglu=unfused,compiled` -> ("geglu", ("unfused", "compiled")): an op and its variants, the
    first the baseline."""
    op, sep, values = text.partition("=")
    names = tuple(dict.fromkeys(v.strip() for v in values.split(",") if v.strip()))
    if not sep or not op.strip() or len(names) < 2:
        raise argparse.ArgumentTypeError(
            f"expected OP=BASELINE,NEW[,...] (an op and two or more of its variants), got {text!r}"
        )
    return op.strip(), names


def add_plugin_argument(parser: argparse.ArgumentParser, also: str = "") -> None:
    """`--plugin FILE`, repeatable, as every command that loads op variants declares it."""
    parser.add_argument(
        "--plugin",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help=f"a Python file registering more op variants (repeatable{also})",
    )
