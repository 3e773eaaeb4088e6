"""keep every run in a history: steps and drift over commits, per machine

`add` stores results files (each run once: adding one twice changes nothing) in the history, a
SQLite file by default or PostgreSQL by URL (--store postgresql+pg8000://user@host/db). Each run is
keyed by its machine's fingerprint, its commit (parent and date read from git where the commit is
in this checkout), its experiment, cells, variants and builds. `show` prints, per machine, every
series whose level stepped (the commit, the shift and its 95% interval; single noisy runs are set
aside and named, never flagged), and the drift since each anchor a run was A/B'd against. `check`
gates that drift: exit 1 if a row's whole interval is slower than --limit, 3 if it cannot tell, 0
if every row's interval lies above it. The method: docs/history.md.

examples:
  fusebench history add results/ci-*.jsonl
  fusebench history show
  fusebench run ci --against v0.1.0 --out r.jsonl && fusebench history add r.jsonl
  fusebench history check --anchor v0.1.0 --limit 5
  fusebench publish site/                              the dashboard of the same history
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from ..core.errors import UserError

if TYPE_CHECKING:
    from ..core.history import HistoryStore

DEFAULT_STORE = "results/history.sqlite"
ACTIONS = ("add", "show", "check")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        default="show",
        choices=ACTIONS,
        help="add results, show the history (the default, as `git stash` lists), or gate it",
    )
    parser.add_argument(
        "results", nargs="*", type=Path, metavar="RESULTS.jsonl", help="add: the files to store"
    )
    add_store_argument(parser)
    parser.add_argument(
        "--anchor",
        metavar="REF",
        help="check, show: the anchor's drift only (a tag or commit a run was A/B'd against)",
    )
    parser.add_argument(
        "--limit",
        type=float,
        default=5.0,
        metavar="PCT",
        help="check: the slowdown since the anchor that fails (default 5%%)",
    )


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=DEFAULT_STORE,
        metavar="PATH|URL",
        help=f"the history: a SQLite file or a database URL (default {DEFAULT_STORE})",
    )


def main(args: argparse.Namespace, console: Console) -> int:
    from ..core.history import HistoryStore

    store = HistoryStore(args.store)
    if args.action == "add":
        return _add(store, args.results, console)
    if args.results:
        raise HistoryInputError(f"history {args.action}: takes no results files (add does)")
    if args.action == "show":
        return _show(store, args.anchor, console)
    return _check(store, args.anchor, args.limit, console)


class HistoryInputError(UserError):
    """A history command given what it does not take; one line, exit 2."""


def _add(store: HistoryStore, paths: list[Path], console: Console) -> int:
    from ..analysis.drift import entries
    from ..core.records import utc_now
    from ..core.results import read_results
    from ..measure.builds import describe_commit

    if not paths:
        raise HistoryInputError("history add: give the results files to store")
    for path in paths:
        results = read_results([path])
        found = entries(results, str(path), describe_commit, utc_now())
        added = [entry for entry in found if store.add(entry.run, entry.points)]
        held = len(found) - len(added)
        console.print(
            f"{path}: {len(added)} run(s) added"
            + (f", {held} already held" if held else "")
            + ("" if found else " (no timed trials)"),
            highlight=False,
        )
    return 0


def _show(store: HistoryStore, anchor: str | None, console: Console) -> int:
    from ..analysis.drift import drifts, read_series
    from ..present.document import to_console
    from ..present.history import history_blocks

    series = read_series(store.runs(), store.points())
    to_console(history_blocks(series, drifts(series, _commit(anchor))), console)
    return 0


def _check(store: HistoryStore, anchor: str | None, limit: float, console: Console) -> int:
    from ..analysis.drift import drifts, read_series
    from ..analysis.gate import EXIT_CANNOT_TELL, EXIT_FAILED, EXIT_PASSED
    from ..present.document import to_console
    from ..present.history import drift_table

    found = drifts(read_series(store.runs(), store.points()), _commit(anchor))
    if not found:
        raise HistoryInputError(
            "history check: no run in the history was A/B'd against "
            + (f"{anchor}" if anchor else "an anchor")
            + "; run `fusebench run EXPERIMENT --against ANCHOR` and add it"
        )
    outcomes = [d.outcome(limit) for d in found]
    to_console([drift_table(found, limit)], console)
    if "failed" in outcomes:
        console.print(f"failed: {outcomes.count('failed')} row(s) slower than -{limit:g}%")
        return EXIT_FAILED
    if "cannot tell" in outcomes:
        console.print(f"cannot tell: {outcomes.count('cannot tell')} row(s) straddle -{limit:g}%")
        return EXIT_CANNOT_TELL
    console.print(f"passed: every row's interval lies above -{limit:g}%")
    return EXIT_PASSED


def _commit(ref: str | None) -> str | None:
    """A tag or branch as the commit it names here, else as given (a commit prefix)."""
    if ref is None:
        return None
    from ..measure.builds import git_output

    return (
        git_output("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=Path.cwd()) or ref
    )
