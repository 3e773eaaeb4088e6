"""Named baselines: a run's timed trials stored for `fusebench check` (`fusebench baseline save`).

`save_baseline` writes results/baselines/NAME.jsonl: the run header(s), each stamped with its
machine fingerprint, then the timed trial records. Throughput only means something on the machine
that measured it, so `fusebench check` refuses a baseline whose fingerprint (backend, device, BLAS,
CPU model) differs from the results it is given."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from .records import Column, Record, ResultsError, require_fields, utc_now
from .results import Results, read_results, results_fingerprint

BASELINE_DIR = Path("results/baselines")
_NAME = re.compile(r"[A-Za-z0-9._-]+")


def require_timed_trials(results: Results, path: Path) -> list[Record]:
    """The timed trial records, each with the fields the comparisons key on; none at all is an error
    naming the file."""
    trials = results.of_kind("trial")
    require_fields(path, trials, "trial")
    timed = [r for r in trials if not r[Column.WARMUP]]
    if not timed:
        found = ", ".join(
            f"{n} {kind}" for kind, n in Counter(r["kind"] for r in results.records).items()
        )
        raise ResultsError(f"{path}: no timed trial records (found {found})")
    return timed


def load_baseline(path: Path) -> Results:
    """A baseline must be intact: a corrupt line means it was truncated or hand-edited, so nothing
    in it is trusted."""
    results = read_results([path])
    if results.corrupt_lines:
        raise ResultsError(
            f"{results.corrupt_lines[0]}: corrupt line in "
            "baseline; save it again with fusebench baseline save"
        )
    results_fingerprint(results, path)
    require_timed_trials(results, path)
    return results


def baseline_path(name: str) -> Path:
    if not _NAME.fullmatch(name) or set(name) == {"."}:
        raise ResultsError(
            f"--name {name!r}: use letters, digits, '-', '_' and '.' (no path separators)"
        )
    return BASELINE_DIR / f"{name}.jsonl"


def save_baseline(source: Path, name: str, *, force: bool = False) -> Path:
    """Write the baseline NAME from a results file; an existing one is kept unless `force`."""
    out = baseline_path(name)
    if out.exists() and not force:
        raise ResultsError(f"{out}: baseline exists; pass --force to replace it")
    results = read_results([source])
    machine = results_fingerprint(results, source)
    timed = require_timed_trials(results, source)
    saved = {
        "name": name,
        "source": str(source),
        "saved_at": utc_now(),
        "fingerprint": asdict(machine),
    }
    records = [{**header, "baseline": saved} for header in results.of_kind("run")] + timed
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return out
