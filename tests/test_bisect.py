"""`fusebench bisect` and `run --against-env`: the search logic with a fake step function (no
timing), bad input (one line, exit 2), and the whole command on a scratch history built here, so a
depth-1 clone passes. Slowdowns are injected into commits of that scratch history, never through
hooks in the product."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fusebench, fusebench_here, tree_copy

from fusebench.analysis.bisect import (
    BAD,
    CANNOT_TELL,
    CULPRIT,
    GOOD,
    REGRESSION,
    SEARCH,
    Reading,
    bisect,
    regressed,
)

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 5.0
EXPERIMENT = """\
name: bisect-test
models: [{preset: tiny}]
variants:
  base: {}
comparisons: []
workloads: {prompt_tokens: 12, gen_tokens: 3}
trials: 8
# One pair of workers an A/B run (by default a fresh pair takes over after 6 rounds): each
# worker is seconds of imports, and tests/test_builds.py checks the fresh pairs.
worker_rounds: 0
shares: 0
warmup: 1
"""
PREFILL = (
    "    start = time.perf_counter()\n    last = prefill(",
    "    start = time.perf_counter()\n    time.sleep(0.3)\n    last = prefill(",
)


def reading(
    delta: float, half: float, variant: str = "all variants", metric: str = "prefill"
) -> Reading:
    # a spread of half / 3 a round: step 1's spread plans the search steps' rounds
    return Reading(
        "tiny", "pp12", variant, metric, delta, delta - half, delta + half, 8, sd_log=half / 300
    )


def fake(
    culprit: int | None, half: float = 2.0, calls: list | None = None, families: list | None = None
):
    """A step function: candidates from `culprit` on are 10% slower than everything before them."""

    def measure(
        index: int, against: int, runs: int, rounds: int | None, family=None
    ) -> list[Reading]:
        if calls is not None:
            calls.append((index, against, runs, rounds))
        if families is not None:
            families.append(family)
        slow = [culprit is not None and i >= culprit for i in (index, against)]
        delta = -10.0 if slow[0] and not (against >= 0 and slow[1]) else 0.0
        return [
            reading(delta, half),
            reading(delta, half, metric="gen"),
            reading(0.0, 20.0, "base"),
        ]

    return measure


@pytest.mark.parametrize("culprit", range(8))
def test_the_search_names_the_culprit_wherever_it_is(culprit: int):
    calls: list = []
    families: list = []
    outcome = bisect(8, fake(culprit, calls=calls, families=families), LIMIT, max_runs=3)
    assert outcome.first_bad == culprit and outcome.confirmed
    roles = [s.role for s in outcome.steps]
    assert roles[0] == REGRESSION and roles[-1] == CULPRIT and set(roles[1:-1]) == {SEARCH}
    assert len(roles) - 2 == math.ceil(math.log2(8))  # a binary search: log2(N) steps
    assert all(s.runs == 1 for s in outcome.steps)  # every step decided on its first run
    # step 1 at the experiment's own rounds; the later steps at the step's, fixed before each
    size = outcome.size
    assert size is not None and size.delta_pct == -10.0 and -5.2 < size.midway_pct < -5.1
    assert calls[0][3] is None and {c[3] for c in calls[1:]} == {size.rounds}
    assert (culprit, culprit - 1, 1, size.rounds) in calls  # against its predecessor (-1: GOOD)
    # Both regressed metrics are tracked, the per-variant row (never wholly below the limit) is not.
    assert {(r.variant, r.metric) for r in outcome.tracked} == {
        ("all variants", "prefill"),
        ("all variants", "gen"),
    }
    # step 1 reads the whole table; a later step decides on the tracked rows, Holm over them alone
    assert families[0] is None and {tuple(f) for f in families[1:]} == {
        tuple(r.row for r in outcome.tracked)
    }


def test_no_regression_ends_after_the_first_ab():
    calls: list = []
    outcome = bisect(8, fake(None, calls=calls), LIMIT, max_runs=3)
    assert outcome.first_bad is None and not outcome.tracked and calls == [(7, -1, 1, None)]
    assert outcome.steps[0].status == GOOD


def test_a_first_ab_that_cannot_tell_is_repeated_then_reports_no_confirmed_regression():
    calls: list = []

    def straddles(
        index: int, against: int, runs: int, rounds: int | None, family=None
    ) -> list[Reading]:
        calls.append(runs)
        return [reading(-4.0, 3.0)]  # [-7%, -1%]: reaches below -5% but not wholly

    outcome = bisect(4, straddles, LIMIT, max_runs=3)
    assert (
        calls == [1, 2, 3] and outcome.first_bad is None and outcome.steps[0].status == CANNOT_TELL
    )


def test_an_inconclusive_step_pools_more_runs_and_then_decides():
    def narrowing(
        index: int, against: int, runs: int, rounds: int | None, family=None
    ) -> list[Reading]:
        if index == 3:  # the midpoint: wide at first, then pooled runs settle it as bad
            return [reading(-9.0, 6.0 / runs)]
        return (
            [reading(-10.0 if index >= 2 else 0.0, 2.0)] if against < 0 else [reading(-10.0, 2.0)]
        )

    outcome = bisect(8, narrowing, LIMIT, max_runs=3)
    mid = next(s for s in outcome.steps if s.index == 3)
    assert mid.runs == 2 and mid.status == BAD and outcome.first_bad == 2


def test_a_step_that_stays_inconclusive_names_both_sides_never_a_guess():
    def stuck(
        index: int, against: int, runs: int, rounds: int | None, family=None
    ) -> list[Reading]:
        # index 3 sits on the limit
        return [reading(-5.0 if index == 3 else -10.0 if index > 3 else 0.0, 2.0)]

    outcome = bisect(8, stuck, LIMIT, max_runs=2)
    assert outcome.first_bad is None and outcome.undecided == (-1, 7)
    assert outcome.steps[-1].index == 3 and outcome.steps[-1].runs == 2


def test_a_first_a_b_that_cannot_tell_says_so_and_exits_3_never_no_regression():
    from types import SimpleNamespace

    from fusebench.commands.bisect import exit_code, verdict_line

    def across(
        index: int, against: int, runs: int, rounds: int | None, family=None
    ) -> list[Reading]:
        return [
            Reading(
                "tiny", "pp12", "all variants", "prefill", -4.0, -12.0, 4.0, 8, settle_rounds=31
            )
        ]

    outcome = bisect(8, across, LIMIT, max_runs=2)
    assert outcome.steps[0].status == CANNOT_TELL and not outcome.tracked
    names = SimpleNamespace(side=lambda i: SimpleNamespace(short=f"c{i}", title=f"commit {i}"))
    line = verdict_line(outcome, names, LIMIT)
    assert exit_code(outcome) == 3 and line.startswith("cannot tell whether")
    assert (
        "about 31 rounds (8 ran) would settle all variants prefill" in line
        and "no regression" not in line
    )
    clear = bisect(
        8, lambda index, against, runs, rounds, family: [reading(0.0, 2.0)], LIMIT, max_runs=1
    )
    assert exit_code(clear) == 1 and verdict_line(clear, names, LIMIT).startswith(
        "no regression beyond -5%"
    )


def test_a_regression_spread_over_two_commits_is_named_but_not_confirmed_alone():
    def spread(
        index: int, against: int, runs: int, rounds: int | None, family=None
    ) -> list[Reading]:
        # commits 4 and 5 cost 3% and 4%: together beyond the limit, alone within it
        def level(i: int) -> float:
            return (-3.0 if i >= 4 else 0.0) + (-4.0 if i >= 5 else 0.0)

        return [reading(level(index) - (level(against) if against >= 0 else 0.0), 0.5)]

    outcome = bisect(8, spread, LIMIT, max_runs=1)
    # Commit 4 lies on GOOD's side of the step's middle (-3.6%), so 5 is the first like BAD; against
    # 4 it is not slower beyond the limit.
    assert outcome.first_bad == 5 and not outcome.confirmed and outcome.steps[-1].status == GOOD


def test_the_step_plans_the_search_rounds_from_its_spread():
    from dataclasses import replace

    from fusebench.analysis.bisect import step_size

    def at(delta: float, sd: float) -> list[Reading]:
        return [replace(reading(delta, 1.0), sd_log=sd)]

    quiet, noisy = step_size(at(-10.0, 0.003), 60), step_size(at(-10.0, 0.08), 60)
    assert quiet is not None and noisy is not None
    assert quiet.rounds == 8 < noisy.rounds <= 60  # never fewer than a planned cell's fewest
    # a smaller step needs more rounds at the same spread; none without a spread to plan on
    smaller, larger = step_size(at(-6.0, 0.03), 60), step_size(at(-10.0, 0.03), 60)
    assert smaller is not None and larger is not None and smaller.rounds > larger.rounds
    assert step_size(at(-10.0, float("nan")), 60) is None


def test_pooled_rows_stand_for_the_variants_when_they_regressed():
    rows = [reading(-10, 2, "base"), reading(-10, 2), reading(-3, 1, "sdpa")]
    assert [r.variant for r in regressed(rows, LIMIT)] == ["all variants"]
    assert [r.variant for r in regressed(rows[:1], LIMIT)] == ["base"]


# --- the command ----------------------------------------------------------------------------------


A_B_TIMEOUT = 900  # for the commands that run A/B runs of the tiny model (a search runs several)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A scratch repository: a copy of this tree (bench/, models/) and a tiny experiment, one
    commit."""
    repo = tmp_path / "repo"
    tree_copy(repo)
    (repo / "exp.yaml").write_text(EXPERIMENT)
    git(repo, "init", "-q")
    commit(repo, "base")
    return repo


def history(repo: Path, count: int, slow_at: int | None) -> list[str]:
    """`count` more commits; the one at `slow_at` makes the worker's prefill sleep 300 ms (the tiny
    model's takes a few ms, tens of ms with both cores busy; at 50 ms a loaded machine left steps
    undecided): a patch committed to the scratch history, never a hook in the product."""
    commits = []
    for i in range(count):
        (repo / "NOTES.md").write_text(f"note {i}\n")
        if i == slow_at:
            worker = repo / "bench" / "measure" / "worker.py"
            text = worker.read_text()
            assert PREFILL[0] in text
            worker.write_text(text.replace(*PREFILL, 1))
        commits.append(commit(repo, f"change {i}" + (" (slow)" if i == slow_at else "")))
    return commits


def one_line_exit_2(done: subprocess.CompletedProcess, message: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_bisect_names_the_commit_that_slowed_the_model(repo: Path, tmp_path: Path):
    good = git(repo, "rev-parse", "HEAD")
    # Two commits after GOOD are enough for every kind of step, each its own A/B run (three in all,
    # each costing seconds): BAD against GOOD, one search step (commit 0, which decides good), and
    # the culprit against its predecessor. A search step that decides bad is covered by the
    # fake-step tests above, for every position.
    # The slow commit's prefill sleeps 300 ms against the tiny model's ~10 ms (about -97%), so an
    # 80% limit still finds it, while an unchanged commit would have to read 5x slower in every
    # round to be called bad: at 50%, two cores kept busy once made one read 2x slower (under-load
    # run 3 of 5).
    commits = history(repo, 2, slow_at=1)
    done = fusebench(
        "bisect",
        good,
        commits[-1],
        "exp.yaml",
        "--max-regression",
        "80",
        "--out",
        str(tmp_path / "search"),
        "--format",
        "json",
        cwd=repo,
        timeout=A_B_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["first_bad"] == commits[1] and found["confirmed"]
    assert [(step["asks"], step["candidate"], step["against"]) for step in found["steps"]] == [
        (REGRESSION, commits[1], good),
        (SEARCH, commits[0], good),
        (CULPRIT, commits[1], commits[0]),
    ]
    files = [f for step in found["steps"] for f in step["files"]]
    assert files and all(Path(f).is_file() for f in files)
    # Each step's two builds started alike: copies side by side, paths of one length, no control
    # arm (a search step reads its pair's rounds alone).
    for file in files:
        records = [json.loads(line) for line in Path(file).read_text().splitlines()]
        placed = [r["placement"] for r in records if r["kind"] == "worker"]
        assert {r["build"] for r in records if r["kind"] == "worker"} == {"current", "reference"}
        assert len({(p["tree_chars"], p["interpreter"], p["env_bytes"]) for p in placed}) == 1
    # Resumable: a second run reads the finished A/B runs instead of measuring again.
    again = fusebench(
        "bisect",
        good,
        commits[-1],
        "exp.yaml",
        "--max-regression",
        "80",
        "--out",
        str(tmp_path / "search"),
        cwd=repo,
        timeout=A_B_TIMEOUT,
    )
    assert (
        again.returncode == 0 and "results -> " not in again.stdout and commits[1] in again.stdout
    )
    assert "first bad" in again.stdout and "bisect steps" in again.stdout


def test_bisect_without_a_regression_says_so_or_that_it_cannot_tell(repo: Path, tmp_path: Path):
    good = git(repo, "rev-parse", "HEAD")
    commits = history(repo, 1, slow_at=None)
    # The tiny model's millisecond trials swing by tens of percent, hence the wide limit (as in
    # test_builds).
    # Whether one A/B run settles it is a timing outcome; what each answer says is not: "no
    # regression" (exit 1) only when every interval lies above the limit, "cannot tell" (exit 3)
    # otherwise, never a search.
    done = fusebench(
        "bisect",
        good,
        commits[-1],
        "exp.yaml",
        "--max-regression",
        "60",
        "--max-runs",
        "1",
        "--out",
        str(tmp_path / "search"),
        cwd=repo,
        timeout=A_B_TIMEOUT,
    )
    assert done.returncode in (1, 3), done.stdout + done.stderr
    said = {1: "no regression beyond -60% to find", 3: "cannot tell whether"}
    assert said[done.returncode] in done.stdout and said[4 - done.returncode] not in done.stdout


def test_bad_refs_and_a_dirty_tree_are_one_line_and_exit_2(repo: Path):
    good = git(repo, "rev-parse", "HEAD")
    commits = history(repo, 2, slow_at=None)
    # In the scratch tree's own process: bisect searches the repository of the fusebench it runs.
    one_line_exit_2(
        fusebench("bisect", "no-such-ref", commits[-1], "exp.yaml", cwd=repo),
        "GOOD: 'no-such-ref' is not a git ref",
    )
    one_line_exit_2(
        fusebench("bisect", commits[-1], good, "exp.yaml", cwd=repo), "is not an ancestor of BAD"
    )
    one_line_exit_2(fusebench("bisect", good, good, "exp.yaml", cwd=repo), "are the same commit")
    (repo / "NOTES.md").write_text("uncommitted\n")
    one_line_exit_2(fusebench("bisect", good, "HEAD", "exp.yaml", cwd=repo), "uncommitted changes")


def test_unknown_packages_and_versions_are_one_line_and_exit_2(repo: Path):
    one_line_exit_2(
        fusebench_here(
            "bisect", "--package", "no-such-package-fusebench", "1.0", "2.0", "exp.yaml", cwd=repo
        ),
        "has no package 'no-such-package-fusebench'",
    )
    one_line_exit_2(
        fusebench_here("bisect", "--package", "mlx", "0.0.7", "0.32.4", "exp.yaml", cwd=repo),
        "no release 0.0.7",
    )
    one_line_exit_2(
        fusebench_here("bisect", "--package", "mlx", "0.32.4", "0.31.2", "exp.yaml", cwd=repo),
        "must be an older release",
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("/etc/hostname", "is not a Python 3 interpreter"),
        ("not a requirement!", "neither a Python interpreter"),
    ],
)
def test_an_environment_that_cannot_serve_is_one_line_and_exit_2(
    spec: str, message: str, repo: Path
):
    done = fusebench_here("run", "exp.yaml", "--against-env", spec, "--out", "ab.jsonl", cwd=repo)
    one_line_exit_2(done, message)
    assert not (repo / "ab.jsonl").exists()


def test_a_version_pip_cannot_install_is_one_line_and_exit_2(
    repo: Path, tmp_path: Path, monkeypatch
):
    # In a process of its own: bench reads XDG_CACHE_HOME, where environments are built, when it is
    # imported.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    done = fusebench(
        "run", "exp.yaml", "--against-env", "mlx==0.0.999", "--out", "ab.jsonl", cwd=repo
    )
    one_line_exit_2(done, "pip cannot install mlx==0.0.999")
    assert not (repo / "ab.jsonl").exists()


def test_an_interpreter_runs_the_reference_workers_and_the_header_names_both_environments(
    repo: Path, tmp_path: Path
):
    done = fusebench(
        "run",
        "exp.yaml",
        "--against-env",
        sys.executable,
        "--out",
        "ab.jsonl",
        "--quiet",
        cwd=repo,
        timeout=A_B_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    header = json.loads((repo / "ab.jsonl").read_text().splitlines()[0])
    builds = header["builds"]
    assert (
        builds["reference"]["python"] == sys.executable and "mlx" in builds["reference"]["packages"]
    )
    assert builds["current"]["packages"]["mlx"] == builds["reference"]["packages"]["mlx"]
    assert "mlx " in builds["reference"]["label"]
    check = fusebench_here("check", "ab.jsonl", "--max-regression", "60", cwd=repo)
    assert (
        check.returncode in (0, 1, 3) and "reference mlx " in check.stdout
    )  # any outcome: plumbing
