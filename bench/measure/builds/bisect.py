"""`fusebench bisect`: the A/B runs a search asks for (analysis.bisect decides what they mean).

A candidate is a commit between two git refs (each build a temporary worktree of it, as
`run --against` makes) or a package release between two versions (each build this tree run by an
environment with that release, as `run --against-env` makes). Every A/B run is one results file
under OUT, named by its two candidates and its repetition; a file whose every cell has finished is
read again instead of re-run, so an interrupted search picks up where it stopped, and an unfinished
one is measured anew.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.console import Console

from ...analysis.bisect import Reading, readings
from ...analysis.stats import RowKey
from ...core.errors import UserError
from ...core.experiment import Experiment
from ...core.flags import with_trials
from ...core.results import read_results
from ..run.jobs import RunOptions
from ..run.resume import DoneWork
from ..run.runner import run_experiment
from ..run.session import Build
from . import venvs
from .builds import commit_build, environment_build, git_output, resolve_commit


class BisectError(UserError):
    """Input a search cannot start from (refs, versions, a dirty tree), or a step that cannot be
    compared."""


@dataclass(frozen=True)
class Candidate:
    key: str  # a full commit hash, or a version
    title: str  # the commit's subject, or "mlx 0.31.2"

    @property
    def short(self) -> str:
        return self.key[:12]


class Sides(Protocol):
    def build(
        self, name: str, candidate: Candidate
    ) -> contextlib.AbstractContextManager[Build]: ...


@dataclass(frozen=True)
class CommitSides:
    experiment: Path

    def build(self, name: str, candidate: Candidate) -> contextlib.AbstractContextManager[Build]:
        return commit_build(
            name, candidate.key, self.experiment, f"bisect: commit {candidate.short}"
        )


@dataclass(frozen=True)
class PackageSides:
    package: str
    experiment: Path
    console: Console

    @contextlib.contextmanager
    def build(self, name: str, candidate: Candidate) -> Iterator[Build]:
        what = f"bisect --package {self.package}: {candidate.key}"
        environment = venvs.resolve(
            f"{self.package}=={candidate.key}",
            what,
            lambda text: self.console.print(text, highlight=False),
        )
        yield environment_build(name, environment, self.experiment, what)


def commit_candidates(good: str, bad: str) -> tuple[Candidate, list[Candidate]]:
    """GOOD and the commits after it up to BAD along BAD's first-parent line, oldest first."""
    good_hash, bad_hash = resolve_commit(good, "bisect: GOOD"), resolve_commit(bad, "bisect: BAD")
    if good_hash == bad_hash:
        raise BisectError(f"bisect: GOOD {good} and BAD {bad} are the same commit {good_hash[:12]}")
    if git_output("merge-base", "--is-ancestor", good_hash, bad_hash) is None:
        raise BisectError(
            f"bisect: GOOD {good} ({good_hash[:12]}) is not an ancestor of BAD {bad} "
            f"({bad_hash[:12]}); give the older, good commit first"
        )
    head = git_output("rev-parse", "HEAD")
    if head in (good_hash, bad_hash) and git_output(
        "status", "--porcelain", "--untracked-files=no"
    ):
        named = good if head == good_hash else bad
        raise BisectError(
            f"bisect: {named} is HEAD, but the working tree has uncommitted changes that bisect "
            "would not measure (it measures commits); commit or stash them, or name another "
            "commit"
        )
    lines = (
        git_output(
            "log",
            "--reverse",
            "--first-parent",
            "--ancestry-path",
            "--format=%H %s",
            f"{good_hash}..{bad_hash}",
        )
        or ""
    )
    commits = [Candidate(*line.partition(" ")[::2]) for line in lines.splitlines()]
    if not commits or commits[-1].key != bad_hash:
        raise BisectError(
            f"bisect: {bad} does not reach {good} along its first parents (GOOD "
            "is on a merged side branch); give a GOOD on BAD's first-parent line"
        )
    subject = git_output("log", "-1", "--format=%s", good_hash) or ""
    return Candidate(good_hash, subject), commits


def package_candidates(package: str, good: str, bad: str) -> tuple[Candidate, list[Candidate]]:
    """The released versions of PACKAGE from GOOD to BAD on the package index, oldest first."""
    what = f"bisect --package {package}"
    found = venvs.between(venvs.package_versions(package, what), good, bad, what)
    first, *rest = [Candidate(v, f"{package} {v}") for v in found]
    return first, rest


class StepRuns:
    """The measure function of analysis.bisect: each A/B run made once, into its own file under
    OUT."""

    def __init__(
        self,
        exp: Experiment,
        good: Candidate,
        candidates: Sequence[Candidate],
        sides: Sides,
        out: Path,
        console: Console,
        limit_pct: float,
    ) -> None:
        self.exp, self.good, self.candidates, self.sides = exp, good, list(candidates), sides
        self.limit_pct = limit_pct
        self.out, self.console = out, console
        self.files: dict[tuple[int, int], list[Path]] = {}  # (index, against) -> its runs' files

    def side(self, index: int) -> Candidate:
        return self.good if index < 0 else self.candidates[index]

    def __call__(
        self,
        index: int,
        against: int,
        runs: int,
        rounds: int | None,
        family: Collection[RowKey] | None,
    ) -> list[Reading]:
        current, reference = self.side(index), self.side(against)
        paths = [
            self.out / f"{current.short}-vs-{reference.short}-{k}.jsonl" for k in range(1, runs + 1)
        ]
        exp = self.exp if rounds is None else with_trials(self.exp, rounds)
        for path in paths:
            if not self._complete(path):
                self._run(exp, path, current, reference)
        self.files[index, against] = paths
        results = read_results(paths)
        if errors := results.of_kind("error"):
            raise BisectError(
                f"bisect: cannot compare {current.title} with {reference.title}: "
                f"{errors[0].get('cell', '?')}: {errors[0].get('reason', '?')} ({paths[-1]})"
            )
        return readings(results.frame("trial"), self.limit_pct, family)

    def _complete(self, path: Path) -> bool:
        if not path.is_file():
            return False
        results = read_results([path])
        run_id, header = next(iter(results.headers.items()), ("", None))
        if header is None:
            return False
        if header.experiment and header.experiment.sha256 != self.exp.sha256:
            raise BisectError(
                f"bisect: {path} was measured with another version of {self.exp.file}; "
                "resume with the same experiment, or give a new --out"
            )
        done = DoneWork.recorded(results, run_id)
        return all(done.finished(cell.key) for cell in self.exp.cells())

    def _run(self, exp: Experiment, path: Path, current: Candidate, reference: Candidate) -> None:
        path.unlink(missing_ok=True)  # an unfinished run is measured anew
        rounds = f", {exp.rounds} rounds (the step's)" if exp is not self.exp else ""
        self.console.print(
            f"A/B {current.title} ({current.short}) "
            f"against {reference.title} ({reference.short}){rounds} -> {path}",
            highlight=False,
        )
        with (
            self.sides.build("current", current) as mine,
            self.sides.build("reference", reference) as theirs,
        ):
            options = RunOptions(out=path, quiet=True, current=mine, reference=theirs)
            if run_experiment(exp, options, self.console) == 130:
                raise KeyboardInterrupt
