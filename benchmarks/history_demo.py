"""A scratch history of 12 commits, measured for real: does `fusebench history` find the commit that
made every variant ~3% slower, and only that one, when two other commits each have one noisy run?

In a throwaway clone of this checkout, commit 1 is the tree as it is; each later commit touches a
scratch file, and commit 7 also makes fusebench's decoder spin in every forward pass, about 3% of
the tiny model's prompt pass and decode step (sized from the runs before it). Every commit is
A/B'd against commit 1 (the anchor) with experiments/history-demo.yaml, and its run added to a
history; the runs of commits 4 and 10 run beside a busy loop on one core (a noisy run each). Then
`fusebench history show`, `history check --anchor` and `publish` read it back.

    python benchmarks/history_demo.py --out results/history-demo

Writes OUT/runs/commit-NN.jsonl, OUT/history.sqlite, OUT/show.txt, OUT/check.txt and OUT/site/.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMITS = 12
SLOW_AT = 7
NOISY_AT = (4, 10)
SLOWDOWN = 0.03
EXPERIMENT = "experiments/history-demo.yaml"
# The injection: fusebench's decoder spins in each forward pass, SLOWDOWN of a prompt's pass or of
# a decode step's, by the length of the call.
CALL = "        out = self.model(inputs, cache)\n"


AUTHOR = ("-c", "user.name=demo", "-c", "user.email=demo@example.com")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def fusebench(repo: Path, *args: str, out: Path | None = None) -> str:
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "fusebench", *args],
        cwd=repo, capture_output=True, text=True,
    )  # fmt: skip
    if out is not None:
        out.write_text(done.stdout)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"fusebench {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done.stdout


def pass_seconds(runs: list[Path]) -> tuple[float, float]:
    """The seconds of a prompt pass and of a decode step as the demo's trials make them: medians of
    the reference build's timed trials in the quiet runs before the slow commit (thousands of
    trials, so a sizing run's slow minute cannot set them). A prefill is the prompt's pass plus
    the last token's, which costs what a decode step does; the demo slows each call by SLOWDOWN of
    its own time, so prefill and generation alike are SLOWDOWN slower."""
    timed = [
        trial
        for results in runs
        for line in results.read_text().splitlines()
        if (trial := json.loads(line))["kind"] == "trial"
        and not trial["warmup"]
        and trial["build"] == "reference"
    ]
    decode_s = statistics.median(t["gen_s"] / (t["gen_tokens"] - 1) for t in timed)
    return statistics.median(t["prefill_s"] for t in timed) - decode_s, decode_s


def scratch_clone(where: Path) -> Path:
    repo = where / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True)
    for path in (EXPERIMENT,):  # the demo's experiment, committed or not
        shutil.copy(ROOT / path, repo / path)
    git(repo, "add", "-A")
    git(
        repo,
        "-c",
        "user.name=demo",
        "-c",
        "user.email=demo@x",
        "commit",
        "-qm",
        "commit 1",
        "--allow-empty",
    )
    return repo


def commit(repo: Path, number: int, spins: tuple[float, float]) -> str:
    (repo / "SCRATCH").write_text(f"commit {number}\n")
    if number == SLOW_AT:
        model = repo / "models" / "gemma4.py"
        text = model.read_text()
        assert CALL in text, "the injection point moved"
        prompt_s, step_s = spins
        # A spin, not a sleep: time.sleep overshot by ~80 us here (0.162 ms asked, 0.243 taken),
        # and an idle vCPU slowed the other build's next trial too (results/history-demo-sleep).
        injected = (
            f"        _until = __import__('time').perf_counter() + ({prompt_s:.6f} "
            f"if inputs.shape[1] > 1 else {step_s:.6f})  # history demo: ~3% slower\n"
            "        while __import__('time').perf_counter() < _until:\n"
            "            pass\n"
        )
        model.write_text(text.replace(CALL, injected + CALL))
    git(repo, "add", "-A")
    git(
        repo, "-c", "user.name=demo", "-c", "user.email=demo@x", "commit", "-qm", f"commit {number}"
    )
    return git(repo, "rev-parse", "HEAD")


def busy() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--reread",
        action="store_true",
        help="measure nothing: read OUT/runs/ into a new history (after the analysis changed)",
    )
    args = parser.parse_args()
    out = args.out.resolve()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    store = out / "history.sqlite"
    if args.reread:
        store.unlink(missing_ok=True)
        for results in sorted((out / "runs").glob("commit-*.jsonl")):
            fusebench(ROOT, "history", "add", str(results), "--store", str(store))
        anchor = json.loads((out / "runs" / "commit-01.jsonl").open().readline())
        read_back(ROOT, anchor["env"]["git_commit"], out, str(store))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            repo = scratch_clone(Path(tmp))
            run_history(repo, out, str(store))
    print((out / "show.txt").read_text())
    print((out / "check.txt").read_text())


def run_history(repo: Path, out: Path, store: str) -> None:
    """Commit, measure and add each of the COMMITS, then read the history back."""
    anchor = git(repo, "rev-parse", "HEAD")
    spins = (0.0, 0.0)
    for number in range(1, COMMITS + 1):
        if number == SLOW_AT:
            quiet = [n for n in range(1, SLOW_AT) if n not in NOISY_AT]
            prompt_s, decode_s = pass_seconds([run_path(out, n) for n in quiet])
            spins = (SLOWDOWN * prompt_s, SLOWDOWN * decode_s)
            print(
                f"spins at commit {SLOW_AT}: {spins[0] * 1e3:.3f} ms a prompt pass "
                f"({prompt_s * 1e3:.2f} ms), {spins[1] * 1e3:.3f} ms a decode step "
                f"({decode_s * 1e3:.2f} ms)",
                flush=True,
            )
        head = anchor if number == 1 else commit(repo, number, spins)
        results = run_path(out, number)
        results.unlink(missing_ok=True)
        measure(repo, anchor, results, noisy=number in NOISY_AT)
        fusebench(repo, "history", "add", str(results), "--store", store)
        noisy = " (noisy run)" if number in NOISY_AT else ""
        print(f"commit {number:2d} {head[:12]}{noisy} measured", flush=True)
    read_back(repo, anchor, out, store)


def run_path(out: Path, number: int) -> Path:
    return out / "runs" / f"commit-{number:02d}.jsonl"


def read_back(repo: Path, anchor: str, out: Path, store: str) -> None:
    fusebench(repo, "history", "show", "--store", store, out=out / "show.txt")
    check = ("history", "check", "--anchor", anchor, "--limit", "5", "--store", store)
    fusebench(repo, *check, out=out / "check.txt")
    fusebench(repo, "publish", str(out / "site"), "--store", store)


def measure(repo: Path, anchor: str, results: Path, noisy: bool) -> None:
    """One A/B of the checkout against the anchor; a noisy one beside a busy loop on one core."""
    load = multiprocessing.Process(target=busy) if noisy else None
    if load:
        load.start()
    try:
        fusebench(repo, "run", EXPERIMENT, "--against", anchor, "--out", str(results), "--quiet")
    finally:
        if load:
            load.terminate()


if __name__ == "__main__":
    main()
