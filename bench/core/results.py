"""The results store: JSON Lines, append-only, one record per line, flushed as each completes.

Record kinds:
- ``run``: the header, with the experiment (name, file, sha256, content) and the environment the
  workers ran in;
- ``trial``: one timed (or warmup) prefill + generation;
- ``correctness``: one variant's logits and greedy tokens against the experiment's reference
  variant;
- ``depth``: decode speed after a prefill to a given KV depth;
- ``op``: one op microbenchmark sample (``fusebench ops``);
- ``skip`` / ``error``: a cell that was not measured, and why;
- ``worker``: one worker process: its build, pair and placement (core.placement).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pandas as pd

from .cell import CURRENT_BUILD, StopRecord, TrialRecord
from .experiment import Trials
from .fileformat import (
    FORMAT,
    RECORD_KINDS,
    CellPlace,
    Clock,
    Column,
    KernelFact,
    KernelRecord,
    OpRecord,
    Record,
    ResultsError,
    SiteCalls,
    SiteRecord,
    header_format,
    require_fields,
    upgrade,
)
from .fingerprint import Fingerprint, MachineMismatchError, fingerprint
from .header import UNKNOWN_MACHINE, LoadSummary, RunHeader, TimeSpent
from .placement import WorkerRecord
from .typed import from_mapping, to_record

# The records written as the dataclass that declares them (core.typed.to_record).
Written = RunHeader | LoadSummary | TimeSpent | OpRecord | TrialRecord | StopRecord | WorkerRecord


class ResultsWriter:
    """Appends records to a JSONL file, flushing and fsyncing each, so an interrupted run loses
    nothing. A path ending in `.gz` is written compressed, as results/ keeps raw rounds: each
    record is sync-flushed, so a file cut short reads back to its last whole record, and a run
    resumed onto such a file first rewrites what it holds as a whole gzip stream."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._raw = None
        if self.path.suffix == ".gz":
            _finish_cut_gzip(self.path)
            self._raw = self.path.open("ab")
            self._file: IO[str] = io.TextIOWrapper(
                gzip.GzipFile(fileobj=self._raw, mode="ab"), encoding="utf-8"
            )
        else:
            self._file = self.path.open("a", encoding="utf-8")

    def write(self, record: Mapping[str, object] | Written) -> None:
        """One record, a mapping or a dataclass that declares its kind (core.typed.to_record)."""
        line = record if isinstance(record, Mapping) else to_record(record)
        self._file.write(json.dumps(line, sort_keys=False) + "\n")
        self._file.flush()  # through a GzipFile, a zlib sync flush: whole records reach the file
        os.fsync((self._raw or self._file).fileno())

    def close(self) -> None:
        self._file.close()
        if self._raw is not None:
            self._raw.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _finish_cut_gzip(path: Path) -> None:
    """A `.gz` results file an interrupted run left without its gzip trailer, rewritten (atomically)
    as a whole stream of the records it holds, so records appended after it stay readable."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    text, whole = _gunzip(data)
    if whole:
        return
    kept = text[: text.rfind(b"\n") + 1]
    spare = path.with_name(path.name + ".partial")
    spare.write_bytes(gzip.compress(kept, mtime=0))
    os.replace(spare, path)


@dataclass
class Results:
    """Every record of one or more results files, by kind; corrupt lines are counted, not fatal."""

    records: list[Record] = field(default_factory=list)
    corrupt_lines: list[str] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.get("kind") == kind]

    def kernel_records(self) -> list[KernelRecord]:
        """Every kernel fact, read back as the type that wrote it, with its cell and machine."""
        machines = self.machines()
        return [
            KernelRecord(**vars(_place(record, machines)), fact=from_mapping(KernelFact, record))
            for record in self.of_kind("kernel")
        ]

    def site_records(self) -> list[SiteRecord]:
        """Every switched name of an mlx-lm model (fusebench.models.switched), with its cell and
        machine."""
        machines = self.machines()
        return [
            SiteRecord(**vars(_place(record, machines)), site=from_mapping(SiteCalls, record))
            for record in self.of_kind(SiteCalls.KIND)
        ]

    def stop_records(self) -> list[StopRecord]:
        """Why each cell stopped adding rounds, read back as the type that wrote it."""
        return [from_mapping(StopRecord, record) for record in self.of_kind(StopRecord.KIND)]

    def worker_records(self) -> list[WorkerRecord]:
        """Every worker process a run started, with its placement (files from before have none)."""
        return [from_mapping(WorkerRecord, record) for record in self.of_kind(WorkerRecord.KIND)]

    def op_records(self) -> list[OpRecord]:
        """Every `fusebench ops` sample, read back as the type that wrote it."""
        return [from_mapping(OpRecord, record) for record in self.of_kind(OpRecord.KIND)]

    @property
    def runs(self) -> dict[str, Record]:
        """The first header of each run_id (a resumed run appends another with the same id)."""
        headers: dict[str, Record] = {}
        for record in self.of_kind("run"):
            headers.setdefault(record["run_id"], record)
        return headers

    @property
    def headers(self) -> dict[str, RunHeader]:
        """The first header of each run_id, read back as the type that wrote it."""
        return {run_id: RunHeader.read(header) for run_id, header in self.runs.items()}

    def machines(self) -> dict[str, str]:
        """Each run's machine label, by run id."""
        return {run_id: run.machine for run_id, run in self.headers.items()}

    def loads(self) -> list[LoadSummary]:
        """The load records that hold samples."""
        samples = (from_mapping(LoadSummary, record) for record in self.of_kind("load"))
        return [load for load in samples if load.samples]

    def time_spent(self) -> list[TimeSpent]:
        """Each run's time by phase (runs from before the record: none)."""
        return [from_mapping(TimeSpent, record) for record in self.of_kind("time")]

    def merge(self, other: Results, path: str | Path = "", *, warn: Any = None) -> None:
        """Add another file's records, leaving out those this one already holds.

        Duplicates are dropped, not refused: the same file given twice (`report a.jsonl a.jsonl`), a
        copy of it, or a file `baseline save` wrote from it (it kept the run_id and the records)
        holds the same records again, and counting them twice would double every step count and
        narrow every interval. A record is the same when its JSON is, so the rounds of one run that
        only one of the files holds (a later resume) are all kept; identical lines inside one file
        are left alone.
        """
        held = {_identity(r) for r in self.records}
        kept = [r for r in other.records if _identity(r) not in held]
        if warn and len(kept) < len(other.records):
            warn(
                f"{path}: {len(other.records) - len(kept)} record(s) already read "
                "from an earlier file (the same file or run given twice) counted once"
            )
        self.records.extend(kept)
        self.corrupt_lines.extend(
            line for line in other.corrupt_lines if line not in self.corrupt_lines
        )

    def frame(self, kind: str) -> pd.DataFrame:
        """One kind of record as a table, with the machine of its run attached (host, device,
        backend, blas)."""
        rows = self.of_kind(kind)
        if kind == TrialRecord.KIND:
            rows = self._kept_rounds(rows)
        frame = pd.DataFrame(rows)
        if frame.empty:
            return frame
        frame["machine"] = frame["run_id"].map(self.machines()).fillna(UNKNOWN_MACHINE)
        if kind == "trial":
            headers = self.headers
            rule = {run_id: run.trials for run_id, run in headers.items()}
            frame[Column.TRIALS] = frame["run_id"].map(rule).fillna(Trials.AUTO)
            clock = {run_id: run.clock for run_id, run in headers.items()}
            frame[Column.CLOCK] = frame["run_id"].map(clock).fillna(Clock.WALL)
        return frame

    def _kept_rounds(self, trials: list[Record]) -> list[Record]:
        """The trials that count: in a cell whose first rounds weighed the schedules, those of the
        schedule its stop record names (the other's are set aside; a cell cut short before its
        stop record keeps neither)."""
        kept = {
            (stop.cell.run_id, stop.cell.cell): stop.schedule
            for stop in self.stop_records()
            if stop.weighing is not None
        }
        return [
            trial
            for trial in trials
            if trial.get(Column.SCHEDULE) is None
            or kept.get((trial.get(Column.RUN_ID), trial.get(Column.CELL)))
            == trial[Column.SCHEDULE]
        ]


def _place(record: Record, machines: Mapping[str, str]) -> CellPlace:
    """Where a cell's record was measured: its machine, cell and build."""
    return CellPlace(
        machine=machines.get(record.get(Column.RUN_ID, ""), UNKNOWN_MACHINE),
        model_key=str(record.get(Column.MODEL_KEY, "")),
        size=str(record.get(Column.SIZE, "")),
        workload=str(record.get(Column.WORKLOAD, "")),
        build=str(record.get(Column.BUILD) or CURRENT_BUILD),
    )


def read_results(paths: Iterable[str | Path], *, warn: Any = None) -> Results:
    """Read and merge results files, each record once however often its file or run is given
    (Results.merge). An empty file, or one with no valid record, is an error naming it."""
    results = Results()
    read: set[Path] = set()
    for path in map(Path, paths):
        if path.resolve() in read:
            if warn:
                warn(f"{path}: given twice; read once")
            continue
        results.merge(_read_file(path, warn), path, warn=warn)
        read.add(path.resolve())
    return results


def _read_file(path: Path, warn: Any) -> Results:
    """Every valid record of one file, in today's format: each upgraded from the format its run's
    header names."""
    if not path.is_file():
        raise ResultsError(f"{path}: no such results file")
    results = Results()
    formats: dict[str, int] = {}
    for number, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        record = _parse_line(line)
        if record is None:
            results.corrupt_lines.append(f"{path}:{number}")
            continue
        try:
            results.records.append(_upgraded(record, formats))
        except ResultsError as err:
            raise ResultsError(f"{path}:{number}: {err}") from None
    if not results.records:
        raise ResultsError(f"{path}: no valid records (empty or corrupt file)")
    if warn and results.corrupt_lines:
        warn(_corrupt_summary(path, results.corrupt_lines))
    return results


def kept_results(records: Iterable[Record]) -> Results:
    """Records kept elsewhere than in a results file (the history's), upgraded as a file's are."""
    formats: dict[str, int] = {}
    return Results(records=[_upgraded(record, formats) for record in records])


def _upgraded(record: Record, formats: dict[str, int]) -> Record:
    """A record in today's shape, from the format its run's header (read before it) names."""
    if record["kind"] == "run":
        formats.setdefault(record.get("run_id", ""), header_format(record))
    # A record whose run has no header before it has nothing to say which format it is: taken as
    # today's.
    return upgrade(record, formats.get(record.get("run_id", ""), FORMAT))


def _corrupt_summary(path: Path, where: list[str]) -> str:
    """One warning for a file's corrupt lines, however many: "r.jsonl: 2 corrupt JSON lines skipped
    (lines 4, 9)", the first few named."""
    numbers = [spot.rsplit(":", 1)[1] for spot in where]
    shown = ", ".join(numbers[:5]) + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")
    lines = "line" if len(numbers) == 1 else "lines"
    return f"{path}: {len(numbers)} corrupt JSON {lines} skipped ({lines} {shown})"


def _identity(record: Record) -> str:
    return json.dumps(record, sort_keys=True)


def _lines(path: Path) -> list[bytes]:
    """The file's lines; a gzip-compressed file (`.jsonl.gz`, as results/ keeps raw rounds) is
    read through gzip, up to where an interrupted run cut it short (its last line, if cut, is
    counted as corrupt like any other)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ResultsError(f"{path}: cannot read ({err.strerror or err})") from None
    if data[:2] != _GZIP_MAGIC:
        return data.splitlines()
    text, _ = _gunzip(data)
    if not text and data:
        raise ResultsError(f"{path}: cannot read (a gzip file cut before its first record)")
    return text.splitlines()


def _gunzip(data: bytes) -> tuple[bytes, bool]:
    """The bytes of every gzip member in `data` and whether the last one was whole: a member cut
    short (a run interrupted while writing) yields what it decompressed so far."""
    out = []
    while data[:2] == _GZIP_MAGIC:
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out.append(member.decompress(data))
        except zlib.error:
            return b"".join(out), False
        if not member.eof:
            return b"".join(out), False
        data = member.unused_data
    return b"".join(out), True


_GZIP_MAGIC = b"\x1f\x8b"


def _parse_line(line: bytes) -> Record | None:
    # Line by line, so one line of binary junk (or a file in another encoding) is a corrupt line,
    # not a traceback.
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(record, dict) or record.get("kind") not in RECORD_KINDS:
        return None
    return record


def results_fingerprint(results: Results, path: Path) -> Fingerprint:
    """The one machine a results file was measured on; no header, or headers from several machines,
    is an error."""
    prints = list(dict.fromkeys(fingerprint(run.env) for run in results.headers.values()))
    if not prints:
        raise ResultsError(
            f"{path}: no run header, so no machine fingerprint; is it a fusebench results file?"
        )
    if len(prints) > 1:
        raise MachineMismatchError(
            f"{path}: runs from {len(prints)} machines "
            f"({' | '.join(map(str, prints))}); keep one machine per file"
        )
    return prints[0]


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
