"""The history store (core.history) on SQLite and on a real PostgreSQL server, and `fusebench
history` / `fusebench publish` on real results files: each run once, nothing lost, one line on bad
input, and a dashboard Chromium renders."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT, fusebench_here

from fusebench.core.history import HistoryPoint, HistoryRun, HistoryStore, PointKey, Series

FIXTURES = ROOT / "tests" / "fixtures"
AB_RUN = FIXTURES / "slow-vm" / "ab-identical.jsonl"


def _run(run_id: str, commit: str, date: str) -> HistoryRun:
    return HistoryRun(run_id, "cpu · m", "vm · m", "ci", commit, None, date, None, "r.jsonl", "t")


def _point(run_id: str, value: float) -> HistoryPoint:
    of = PointKey(Series.BUILD, "tiny:all", "tiny", "pp8", "all variants", "prefill")
    return HistoryPoint(run_id, "cpu · m", of, value, value - 1.0, value + 1.0, 12, "no change")


def _round_trip(store: HistoryStore) -> None:
    assert store.runs() == [] and store.points() == []
    runs = [_run("a", "c1", "2026-01-01T00:00:00+00:00"), _run("b", "c2", "2026-01-02T00:00:00Z")]
    for run, value in zip(runs, (-0.5, -3.0), strict=True):
        assert store.add(run, [_point(run.run_id, value)])
    assert not store.add(runs[0], [_point("a", 9.9)])  # held already: nothing changes
    assert store.runs() == runs
    assert sorted(p.value for p in store.points()) == [-3.0, -0.5]
    assert store.points()[0].of.series is Series.BUILD
    # a run's records, and its name: what check --baseline NAME reads back
    records = [{"kind": "run", "run_id": "c"}, {"kind": "trial", "run_id": "c", "round": 0}]
    named = _run("c", "c3", "2026-01-03T00:00:00Z")
    assert store.add(named, [], records) and store.records(named) == records
    assert store.name("cpu-ci", runs[0], "t") is None
    assert store.name("cpu-ci", named, "t") == "a"  # moved from run a
    assert store.named("cpu-ci") == {"cpu · m": named} and store.names() == ["cpu-ci"]
    assert store.records(runs[0]) == []  # added without records


def test_sqlite_round_trip_and_adding_twice_changes_nothing(tmp_path):
    _round_trip(HistoryStore(str(tmp_path / "h.sqlite")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres():
    """A PostgreSQL server of its own, in a temporary folder, for this test (as a plain user: the
    server refuses root, so as root it runs as nobody, in a folder outside pytest's private one)."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    pytest.importorskip("pg8000")
    if not initdb or not pg_ctl:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    # As root the server runs as nobody, who cannot reach root's TMPDIR (the suite points it at
    # ~/.cache/fusebench/tmp): the folder goes in the system's /tmp then.
    system = "/tmp" if os.geteuid() == 0 else None
    folder = Path(tempfile.mkdtemp(prefix="fusebench-pg-", dir=system))
    data, port = folder / "pg", _free_port()
    as_user = _as_nobody(folder) if os.geteuid() == 0 else None
    # The server keeps its output open: it goes to a log, not to pipes this test would wait on.
    run = {"check": True, "stdout": subprocess.DEVNULL, "preexec_fn": as_user, "cwd": folder}
    ctl = [pg_ctl, "-D", str(data), "-l", str(folder / "log")]
    try:
        subprocess.run([initdb, "-D", str(data), "-U", "bench", "--auth=trust"], **run)
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
        subprocess.run([*ctl, "-o", options, "-w", "start"], **run)
        yield f"postgresql+pg8000://bench@127.0.0.1:{port}/postgres"
        subprocess.run([*ctl, "-m", "immediate", "stop"], **run)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as_nobody(folder: Path) -> Callable[[], None]:
    nobody = pwd.getpwnam("nobody")
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)

    def drop() -> None:
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    return drop


def test_postgresql_holds_the_same_history(postgres):
    deadline = time.monotonic() + 30
    while True:  # pg_ctl -w waits for the server; the first connection may still race it
        try:
            _round_trip(HistoryStore(postgres))
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_history_add_show_and_check_on_a_real_ab_run(tmp_path):
    store = str(tmp_path / "h.sqlite")
    added = fusebench_here("history", "add", str(AB_RUN), "--store", store, cwd=tmp_path)
    assert added.returncode == 0 and "1 run(s) added" in added.stdout, added.stderr
    again = fusebench_here("history", "add", str(AB_RUN), "--store", store, cwd=tmp_path)
    assert "0 run(s) added, 1 already held" in again.stdout
    points = HistoryStore(store).points()
    kinds = {p.of.series for p in points}
    assert kinds == {Series.RATE, Series.COMPARISON, Series.BUILD}
    shown = fusebench_here("history", "show", "--store", store, cwd=tmp_path)
    assert shown.returncode == 0 and "since" in shown.stdout, shown.stdout
    # `history` alone shows it, as `git stash` lists
    assert fusebench_here("history", "--store", store, cwd=tmp_path).stdout == shown.stdout
    # One A/B of identical builds on the slow VM: its intervals straddle -5%, so it cannot tell;
    # all of them lie above -50%.
    check = fusebench_here("history", "check", "--store", store, "--limit", "5", cwd=tmp_path)
    assert check.returncode == 3 and "cannot tell" in check.stdout, check.stdout
    loose = fusebench_here("history", "check", "--store", store, "--limit", "50", cwd=tmp_path)
    assert loose.returncode == 0 and "passed" in loose.stdout, loose.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    corrupt = tmp_path / "bad.jsonl"
    corrupt.write_bytes(b"\x00\x01 not json\n")
    store = str(tmp_path / "h.sqlite")
    done = fusebench_here("history", "add", str(corrupt), "--store", store, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "bad.jsonl" in done.stderr
    nothing = fusebench_here("history", "check", "--store", store, cwd=tmp_path)
    assert nothing.returncode == 2 and "no run in the history" in nothing.stderr
    url = fusebench_here("history", "show", "--store", "nosuchdb://x", cwd=tmp_path)
    assert url.returncode == 2 and "nosuchdb://x" in url.stderr


def test_publish_renders_in_chromium_without_console_errors(tmp_path):
    store = str(tmp_path / "h.sqlite")
    fusebench_here("history", "add", str(AB_RUN), "--store", store, cwd=tmp_path)
    done = fusebench_here("publish", str(tmp_path / "site"), "--store", store, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = tmp_path / "site" / "index.html"
    assert (tmp_path / "site" / "runs").is_dir()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium on this machine")
    shown = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0
    assert shown.stdout.count("<svg") >= 2 and "fusebench history" in shown.stdout
    console = [line for line in shown.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "error" in line.lower()], console
