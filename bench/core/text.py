"""Plain text helpers the analysis and presentation layers share."""

from __future__ import annotations

from collections.abc import Sequence


def join_words(items: Sequence[object], last: str = "and") -> str:
    """ "a", "a and b", "a, b and c" (or another last word: "a, b or c")."""
    words = [str(item) for item in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def short_commit(commit: str | None) -> str:
    """A commit as tables name it: its first 12 hex digits ("?" for none)."""
    return (commit or "?")[:12]
