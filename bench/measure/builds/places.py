"""Equivalent places for the builds of an A/B, so that only their code differs.

Identical builds read 1.4-2.3% apart in `.ci/run`'s arrangement (results/build-offset-xeon): the
current build's workers ran in the user's checkout, the reference's in a worktree elsewhere, each
with its own path, working folder and command line. Here every build's tree is copied once into
a snapshot (the files its workers import, byte-compiled by its own interpreter), and each worker
pair (or triple, with the control arm) gets fresh copies of the snapshots side by side: one folder
per set, one filesystem, names of one length (`0003/a`, `0003/b`), each worker's working folder its
own copy. What cannot be equal, which build holds which slot and whose copy is written first,
rotates from one set to the next, so over a run's pairs every build takes every slot (results/
placement). Trees are small (about 2 MB), so a copy costs milliseconds of a pair's seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..launch import package_dirs
from ..machine.env import own_root
from ..run.session import Build

PLACES_PREFIX = "fusebench-ab-"
SLOTS = "abc"  # one letter a slot: every place's path has the same length
_OWNER_FILE = "owner.pid"
# What a checkout's workers import: its map (pyproject.toml) and the folders it maps, or, in a
# checkout from before the map, its links to them.
_CHECKOUT_PARTS = ("pyproject.toml", "bench", "models", "experiments", "fusebench")


def tree_parts(root: Path) -> list[str]:
    """The top-level entries of a build's tree its workers import: a checkout's map and the
    folders it maps, or an installed package's `fusebench` folder."""
    if not (root / "bench").is_dir():
        return ["fusebench"]
    mapped = {folder.relative_to(root).parts[0] for folder in package_dirs(root).values()}
    return sorted({*mapped, *(name for name in _CHECKOUT_PARTS if (root / name).exists())})


def snapshot(build: Build, dest: Path) -> Path:
    """The build's importable tree copied to `dest` and byte-compiled by the build's interpreter,
    so that every copy made from it starts with the same compiled modules."""
    source = build.root or own_root()
    dest.mkdir(parents=True)
    for part in tree_parts(source):
        origin = source / part
        if origin.is_dir() and not origin.is_symlink():
            shutil.copytree(
                origin, dest / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(origin, dest / part, follow_symlinks=False)
    subprocess.run(
        [build.interpreter, "-m", "compileall", "-q", str(dest)],
        capture_output=True,
        check=False,
    )
    return dest


@dataclass
class Places:
    """The run's builds, and where the next set of their workers starts: `next()` copies each
    build's snapshot into a fresh folder, the slots rotated by one from the set before."""

    root: Path
    builds: tuple[Build, ...]
    snapshots: tuple[Path, ...]
    made: int = 0  # sets of places made so far

    def next(self) -> tuple[Build, ...]:
        """The builds rooted in fresh copies, build i in slot (i + sets made) mod n; the copies
        are written in slot order, so which build's is written first rotates too. Earlier sets
        are removed: their workers have stopped before a new set starts."""
        count = len(self.builds)
        index, self.made = self.made, self.made + 1
        for earlier in self.root.glob("[0-9]" * 4):
            shutil.rmtree(earlier, ignore_errors=True)
        folder = self.root / f"{index:04d}"
        slot_of = [(i + index) % count for i in range(count)]
        for slot in range(count):
            i = slot_of.index(slot)
            shutil.copytree(self.snapshots[i], folder / SLOTS[slot], symlinks=True)
        return tuple(
            replace(build, root=folder / SLOTS[slot_of[i]], slot=SLOTS[slot_of[i]])
            for i, build in enumerate(self.builds)
        )


@contextlib.contextmanager
def places_for(builds: Sequence[Build]) -> Iterator[Places]:
    """Places for these builds, under one temporary folder removed when the context ends (one an
    interrupted run left behind is removed by the next, as reference worktrees are)."""
    if len(builds) > len(SLOTS):
        raise ValueError(f"at most {len(SLOTS)} builds share places, not {len(builds)}")
    remove_abandoned_places()
    root = Path(tempfile.mkdtemp(prefix=PLACES_PREFIX))
    try:
        (root / _OWNER_FILE).write_text(str(os.getpid()))
        snapshots = tuple(snapshot(build, root / f"snapshot-{i}") for i, build in enumerate(builds))
        yield Places(root, tuple(builds), snapshots)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def remove_abandoned_places() -> list[Path]:
    """Remove the places of runs that are gone (killed before their cleanup); the folders
    removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{PLACES_PREFIX}*"):
        if _owner_gone(folder):
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder)
    return removed


def _owner_gone(folder: Path) -> bool:
    try:
        pid = int((folder / _OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False  # just made, or another user's: left alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
