"""`run --against REF`: the reference build, a second fusebench tree whose workers run beside the
current ones.

REF is a git ref of this repository (checked out into a temporary worktree, removed afterwards) or
the path of another fusebench checkout. Its workers import the reference tree's own `fusebench`
(`bench` in a checkout from before the one package; its path goes first on their module search
path), so what is compared is really the two trees; the Python packages (mlx, mlx-lm, ...) are
this environment's. Before anything is measured the reference must speak this worker protocol,
import, and read the experiment with its own spec parser; otherwise the run stops with one line and
exit 2.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from ...core.errors import UserError
from ..job import PROTOCOL
from ..machine.env import child_command, own_root
from ..run.session import CURRENT, Build
from . import venvs

_TREE_PREFIX = "fusebench-ref-"
_OWNER_FILE = "owner.pid"


class ReferenceBuildError(UserError):
    """A reference build that cannot be compared with this one; the message says why, in one
    line."""


def git_output(*args: str, cwd: Path | None = None) -> str | None:
    """git's answer in `cwd` (default: this build's tree), or None where it failed."""
    done = subprocess.run(
        ["git", *args], cwd=cwd or own_root(), capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else None


def describe_commit(commit: str) -> tuple[str | None, str | None]:
    """A commit's first parent and its committer date (ISO 8601), as the checkout in the current
    directory knows them; (None, None) for a commit it does not hold."""
    shown = git_output("show", "-s", "--format=%P%n%cI", commit, cwd=Path.cwd())
    if not shown:
        return None, None
    parents, _, date = shown.partition("\n")
    return (parents.split() or [None])[0], date or None


@contextlib.contextmanager
def reference_build(ref: str, experiment: Path) -> Iterator[Build]:
    """The build REF names, checked; a temporary worktree for a git ref lives as long as the
    context."""
    path = Path(ref).expanduser()
    if path.is_dir():
        if not (path / "bench").is_dir():
            raise ReferenceBuildError(
                f"--against {ref}: {path} holds no fusebench tree (no bench/ folder)"
            )
        build = _checked(
            Build(
                "reference",
                path.resolve(),
                git_output("rev-parse", "HEAD", cwd=path),
                _dirty(path),
                str(path.resolve()),
            ),
            f"--against {ref}",
            experiment,
        )
        yield build
        return
    if git_output("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}") is None:
        raise ReferenceBuildError(
            f"--against {ref}: neither a git ref of this repository nor a directory holding "
            "fusebench; give a ref such as HEAD~1 or main, or a checkout's path"
        )
    with commit_build("reference", ref, experiment, f"--against {ref}") as build:
        yield build


def resolve_commit(ref: str, what: str) -> str:
    """The full hash of the commit REF names in this repository."""
    commit = git_output("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit is None:
        raise ReferenceBuildError(
            f"{what}: {ref!r} is not a git ref of this repository "
            "(a commit, branch or tag, such as HEAD~3 or main)"
        )
    return commit


@contextlib.contextmanager
def commit_build(name: str, ref: str, experiment: Path, what: str) -> Iterator[Build]:
    """Build NAME at the commit REF names, checked out into a temporary worktree that lives as long
    as the context."""
    commit = resolve_commit(ref, what)
    for left in remove_abandoned_trees():
        print(
            f"fusebench: removed a reference tree that an interrupted run left behind: {left}",
            file=sys.stderr,
        )
    folder = Path(tempfile.mkdtemp(prefix=_TREE_PREFIX))
    (folder / _OWNER_FILE).write_text(str(os.getpid()))
    try:
        if (
            git_output("worktree", "add", "--detach", "--force", str(folder / "tree"), commit)
            is None
        ):
            raise ReferenceBuildError(
                f"{what}: git could not check out {commit[:12]} into {folder}"
            )
        yield _checked(Build(name, folder / "tree", commit, False, commit), what, experiment)
    finally:
        git_output("worktree", "remove", "--force", str(folder / "tree"))
        shutil.rmtree(folder, ignore_errors=True)


def environment_build(
    name: str, environment: venvs.Environment, experiment: Path, what: str
) -> Build:
    """Build NAME: this tree's code run by the environment's Python."""
    build = Build(
        name,
        own_root(),
        git_output("rev-parse", "HEAD"),
        _dirty(own_root()),
        environment.spec,
        python=environment.python,
        label=environment.label,
    )
    checked = _checked(build, what, experiment)
    # Read in the environment its workers get: the mlx they will import.
    return replace(
        checked, packages=venvs.versions(build.interpreter, build.worker_env(dict(os.environ)))
    )


def environment_builds(spec: str, experiment: Path, say=print) -> tuple[Build, Build]:
    """`run --against-env SPEC`: this environment (current) and SPEC's (reference), each labelled by
    the versions of the packages SPEC names, e.g. "mlx 0.32.4" against "mlx 0.31.2"."""
    what = f"--against-env {spec}"
    environment = venvs.resolve(spec, what, say)
    mine = venvs.versions(sys.executable, dict(os.environ))
    current = replace(CURRENT, packages=mine, label=venvs.label(mine, environment.shown) or None)
    return current, environment_build("reference", environment, experiment, what)


def remove_abandoned_trees() -> list[Path]:
    """Remove the reference trees of runs that are gone (killed, or stopped before their cleanup),
    and git's records of them; the folders removed. A SIGKILL leaves both the folder and the
    worktree registration."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{_TREE_PREFIX}*"):
        if _owner_alive(folder):
            continue
        git_output("worktree", "remove", "--force", str(folder / "tree"))
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():  # another user's folder stays
            removed.append(folder)
    git_output("worktree", "prune")
    return removed


def _owner_alive(folder: Path) -> bool:
    try:
        pid = int((folder / _OWNER_FILE).read_text())
    except (OSError, ValueError):
        # No pid yet: a run that is just starting (seconds old) or one killed before it wrote the
        # pid.
        return _age_s(folder) < 60
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def _age_s(folder: Path) -> float:
    try:
        return time.time() - folder.stat().st_mtime
    except OSError:
        return 0.0


def _dirty(path: Path) -> bool | None:
    status = git_output("status", "--porcelain", "--untracked-files=no", cwd=path)
    return None if status is None else bool(status)


def _checked(build: Build, what: str, experiment: Path) -> Build:
    """The build, if its workers speak this protocol, import, and can read the experiment."""
    job = build.root / "bench" / "measure" / "job.py"
    found = (
        re.search(r"^PROTOCOL = (\d+)", job.read_text(), re.MULTILINE) if job.is_file() else None
    )
    if not found or int(found.group(1)) != PROTOCOL:
        theirs = (
            f"protocol {found.group(1)}"
            if found
            else "no worker protocol (it predates run --against)"
        )
        raise ReferenceBuildError(
            f"{what}: the {build.name} build speaks {theirs}, this one protocol "
            f"{PROTOCOL}; choose a reference from after the protocol changed"
        )
    check = (
        f"import sys\nfrom {build.package}.measure import worker\n"
        f"from {build.package}.core.spec import load_experiment\nload_experiment(sys.argv[1])\n"
    )
    done = subprocess.run(
        [*child_command("-c", build.interpreter, build.root), check, str(experiment.resolve())],
        cwd=build.root,
        env=build.worker_env(dict(os.environ)),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReferenceBuildError(
            f"{what}: the {build.name} build cannot import or cannot read {experiment}: {last}"
        )
    return build
