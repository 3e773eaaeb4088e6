"""keep every run in the history, the one store of past runs: steps and drift over commits

The history is a SQLite file by default or PostgreSQL by URL (--store
postgresql+pg8000://user@host/db). `add` stores results files in it (each run once: adding one
twice changes nothing), keyed by the machine's fingerprint, the commit (parent and date read from
git where the commit is in this checkout), the experiment, cells, variants and builds, with each
run's timed trials; --name NAME names the run on its machine, for `fusebench check --baseline
NAME`. Every run added also gates later runs of its experiment on its machine: `fusebench check`
holds each fusion's speedup against theirs (from 10 runs on). A results file `baseline save` wrote
is added as any other; a noise file that still holds a speedup history (from calibrate before it
added its runs here) is added as one run per calibration run, holding those speedups only.

`show` prints, per machine, every series whose level stepped (the commit, the shift and its 95%
interval; single noisy runs are set aside and named, never flagged), and the drift since each
anchor a run was A/B'd against. `check` gates that drift: exit 1 if a row's whole interval is
slower than --limit, 3 if it cannot tell, 0 if every row's interval lies above it. The method:
docs/history.md.

examples:
  fusebench history add results/ci-*.jsonl
  fusebench history add results/ci-20261130-101500.jsonl --name cpu-ci   (check --baseline cpu-ci)
  fusebench history add results/baselines/cpu-ci.jsonl --name cpu-ci     a baseline save file
  fusebench history add results/baselines/noise-<machine>.json           an old noise file
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
    from ..analysis.history import Entry
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
        "--name",
        help="add: name the file's run on its machine, for fusebench check --baseline NAME "
        "(a name given before moves to this run)",
    )
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
        return _add(store, args.results, args.name, console)
    if args.results or args.name:
        raise HistoryInputError(
            f"history {args.action}: takes no results files or --name (add does)"
        )
    if args.action == "show":
        return _show(store, args.anchor, console)
    return _check(store, args.anchor, args.limit, console)


class HistoryInputError(UserError):
    """A history command given what it does not take; one line, exit 2."""


def _add(store: HistoryStore, paths: list[Path], name: str | None, console: Console) -> int:
    from ..core.fileformat import utc_now
    from ..core.history import require_name

    if not paths:
        raise HistoryInputError("history add: give the results files to store")
    if name is not None:
        require_name(name)
        if len(paths) != 1:
            raise HistoryInputError(
                "history add --name: give the one results file whose run to name"
            )
    found = add_to_history(store, paths, console)
    if name is not None:
        if len(found) != 1 or not found[0].records:
            raise HistoryInputError(
                f"{paths[0]}: --name names one run with timed trials; the file holds "
                f"{len(found)} run(s)" + ("" if len(found) != 1 else " without trials")
            )
        run = found[0].run
        moved = store.name(name, run, utc_now())
        console.print(
            f"{name}: run {run.run_id} on {run.machine_label}"
            + (f" (was run {moved})" if moved else ""),
            highlight=False,
        )
    return 0


def add_to_history(store: HistoryStore, paths: list[Path], console: Console) -> list[Entry]:
    """Add each file's runs, saying for each file how many were new; every run found, held or
    added."""
    from ..core.fileformat import utc_now

    every = []
    for path in paths:
        found = _entries(path, utc_now())
        added = [entry for entry in found if store.add(entry.run, entry.points, entry.records)]
        held = len(found) - len(added)
        console.print(
            f"{path}: {len(added)} run(s) added"
            + (f", {held} already held" if held else "")
            + ("" if found else " (no timed trials)"),
            highlight=False,
        )
        every += found
    return every


def _entries(path: Path, added_at: str) -> list[Entry]:
    """A results file's runs; a noise file's stored speedups (a .json file is read as one)."""
    from ..analysis.history import entries
    from ..analysis.noise import noise_entries
    from ..core.results import read_results
    from ..measure.builds.builds import describe_commit
    from .sources import load_noise

    if path.suffix == ".json":
        return noise_entries(load_noise(path), path, added_at)
    return entries(read_results([path]), str(path), describe_commit, added_at)


def _show(store: HistoryStore, anchor: str | None, console: Console) -> int:
    from ..analysis.history import drifts, read_series
    from ..present.document import to_console
    from ..present.history import history_blocks

    series = read_series(store.runs(), store.points())
    to_console(history_blocks(series, drifts(series, _commit(anchor))), console)
    return 0


def _check(store: HistoryStore, anchor: str | None, limit: float, console: Console) -> int:
    from ..analysis.gate import EXIT_CANNOT_TELL, EXIT_FAILED, EXIT_PASSED
    from ..analysis.history import drifts, read_series
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
    from ..measure.builds.builds import git_output

    return (
        git_output("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=Path.cwd()) or ref
    )
