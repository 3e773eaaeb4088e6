"""`fusebench baseline save`: store a run's timed trials as a named baseline for `fusebench check`.

    fusebench baseline save RESULTS.jsonl --name NAME [--force]

writes results/baselines/NAME.jsonl: the run header(s), each stamped with its machine fingerprint, then the timed
trial records. Throughput only means something on the machine that measured it, so `fusebench check` refuses a
baseline whose fingerprint (backend, device, BLAS, CPU model) differs from the results it is given.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from .report import TRIAL_FIELDS
from .results import Results, ResultsError, blas_name, read_results

BASELINE_DIR = Path("results/baselines")
_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Fingerprint:
    """What makes two throughput figures comparable. The hostname is left out: CI runners get a new one each time."""

    backend: str
    device: str
    blas: str
    cpu: str

    def __str__(self) -> str:
        return f"{self.backend} · {self.device} · {self.blas} · {self.cpu}"

    @property
    def slug(self) -> str:
        """A file-name-safe label, e.g. `cpu-openblas-intel-r-xeon-r-processor-2-80ghz`."""
        parts = dict.fromkeys([self.backend, self.blas, self.device, self.cpu])  # on CPU, device == cpu
        return re.sub(r"[^a-z0-9]+", "-", " ".join(parts).lower()).strip("-")


def fingerprint(env: dict[str, Any]) -> Fingerprint:
    """The fingerprint of a run header's `env`; the BLAS is reduced to its family (the path varies by distro)."""
    return Fingerprint(
        backend=str(env.get("backend", "?")),
        device=str(env.get("device", "?")),
        blas=blas_name(env),
        cpu=str(env.get("cpu", "?")),
    )


class MachineMismatchError(ResultsError):
    """Two files measured on different machines; comparing their throughput would measure the machines."""


def results_fingerprint(results: Results, path: Path) -> Fingerprint:
    """The one machine a results file was measured on; no header, or headers from several machines, is an error."""
    prints = list(dict.fromkeys(fingerprint(h.get("env", {})) for h in results.runs.values()))
    if not prints:
        raise ResultsError(f"{path}: no run header, so no machine fingerprint; is it a fusebench results file?")
    if len(prints) > 1:
        raise MachineMismatchError(f"{path}: runs from {len(prints)} machines ({' | '.join(map(str, prints))}); "
                                   "keep one machine per file")
    return prints[0]


def require_timed_trials(results: Results, path: Path) -> list[dict[str, Any]]:
    """The timed trial records, each with the fields the comparisons key on; none at all is an error naming the file."""
    trials = results.of_kind("trial")
    for record in trials:
        missing = [f for f in TRIAL_FIELDS if f not in record]
        if missing:
            where = f"variant {record.get('variant', '?')}, round {record.get('round', '?')}"
            raise ResultsError(f"{path}: a trial record ({where}) lacks field(s) {', '.join(missing)}")
    timed = [r for r in trials if not r["warmup"]]
    if not timed:
        found = ", ".join(f"{n} {kind}" for kind, n in Counter(r["kind"] for r in results.records).items())
        raise ResultsError(f"{path}: no timed trial records (found {found})")
    return timed


def load_baseline(path: Path) -> Results:
    """A baseline must be intact: a corrupt line means it was truncated or hand-edited, so nothing in it is trusted."""
    results = read_results([path])
    if results.corrupt_lines:
        raise ResultsError(f"{results.corrupt_lines[0]}: corrupt line in baseline; save it again with "
                           "fusebench baseline save")
    results_fingerprint(results, path)
    require_timed_trials(results, path)
    return results


def baseline_path(name: str) -> Path:
    if not _NAME.fullmatch(name) or set(name) == {"."}:
        raise ResultsError(f"--name {name!r}: use letters, digits, '-', '_' and '.' (no path separators)")
    return BASELINE_DIR / f"{name}.jsonl"


def save_baseline(source: Path, name: str, *, force: bool = False) -> Path:
    """Write the baseline NAME from a results file; an existing one is kept unless `force`."""
    out = baseline_path(name)
    if out.exists() and not force:
        raise ResultsError(f"{out}: baseline exists; pass --force to replace it")
    results = read_results([source])
    machine = results_fingerprint(results, source)
    timed = require_timed_trials(results, source)
    saved = {"name": name, "source": str(source), "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "fingerprint": asdict(machine)}
    records = [{**header, "baseline": saved} for header in results.of_kind("run")] + timed
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    save = actions.add_parser("save", help="store a results file's timed trials as results/baselines/NAME.jsonl",
                              description="Store a results file's run header(s) and timed trials as a baseline.")
    save.add_argument("results", type=Path, metavar="RESULTS.jsonl")
    save.add_argument("--name", required=True, help=f"baseline name: writes {BASELINE_DIR}/NAME.jsonl")
    save.add_argument("--force", action="store_true", help="replace an existing baseline of that name")


def command(args: argparse.Namespace, console: Console) -> int:
    """Run `fusebench baseline save`; bad input raises ResultsError."""
    out = save_baseline(args.results, args.name, force=args.force)
    machine = results_fingerprint(read_results([out]), out)
    console.print(Text(f"wrote {out} (machine: {machine})"))
    return 0
