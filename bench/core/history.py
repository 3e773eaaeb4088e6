"""The history store: every results file a team adds, kept as the figures its reports show, keyed by
machine, commit, experiment, cell, series and build, so trends, steps and drift can be read back,
with each run's header and timed trials (so any run held can be gated against: `check --baseline`)
and the names given to runs (`history add --name`), one name per machine.

One embedded SQLite file by default (a path: nothing to start), or the same tables on PostgreSQL by
URL (`postgresql+pg8000://user@host/db`) for runners that share one, through SQLAlchemy Core.
Adding a run is one transaction: it lands whole or not at all, and a run already held (its run_id
on its machine) is left as it is, so adding the same file twice changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
import typing
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError

from .errors import UserError
from .fileformat import Record
from .typed import FLAT, from_mapping, to_mapping

_NAME = re.compile(r"[A-Za-z0-9._-]+")


class HistoryError(UserError):
    """A history store that cannot be opened or written; the message names it."""


class Series(StrEnum):
    """What a point measures: a variant's tok/s, one variant against another within a run, or this
    build against the run's reference build (the parent, or an anchor such as the last release)."""

    RATE = "rate"
    COMPARISON = "comparison"
    BUILD = "build"


@dataclass(frozen=True)
class HistoryRun:
    """One results file's run: where it ran, which commit it measured (with its parent and date),
    and the commit its reference build was (None without one)."""

    run_id: str
    machine: str  # core.fingerprint.Fingerprint, as text: one machine's runs are never pooled
    machine_label: str
    experiment: str
    commit: str
    parent: str | None
    commit_date: str | None  # ISO 8601, the commit's own date: the order of the series
    against: str | None
    source: str  # the file it was added from
    added_at: str


@dataclass(frozen=True)
class PointKey:
    """What a point is a figure of within its run: its series, cell (model, size, workload), name
    (the variant for RATE and BUILD, BUILD also "all variants"; "new vs baseline" for COMPARISON)
    and metric. A series of the history is the same key on one machine and experiment."""

    series: Series
    model_key: str
    size: str
    workload: str
    name: str
    metric: str


@dataclass(frozen=True)
class HistoryPoint:
    """One figure of a run with its 95% interval: a rate in tok/s, or a Δ in %."""

    run_id: str
    machine: str
    of: PointKey = field(metadata=FLAT)
    value: float
    low: float
    high: float
    rounds: int
    verdict: str | None = None


# The longest text each stored field holds (a machine's fingerprint and a model's key are long).
_LENGTHS = {
    "run_id": 64,
    "machine": 400,
    "machine_label": 400,
    "experiment": 200,
    "commit": 64,
    "parent": 64,
    "commit_date": 40,
    "against": 64,
    "source": 1000,
    "added_at": 40,
    "series": 20,
    "model_key": 1000,
    "size": 200,
    "workload": 100,
    "name": 200,
    "metric": 20,
    "verdict": 40,
    "named_at": 40,
}


def _columns(record: type, *, keys: Sequence[str] = ()) -> list[sa.Column]:
    """A table's columns, one per field of the record it stores (a FLAT part's fields inline),
    typed and nullable as the field is declared; `keys` make the primary key."""
    hints = typing.get_type_hints(record)
    columns = []
    for f in fields(record):
        if f.metadata.get("flat"):
            columns += _columns(hints[f.name])
            continue
        kinds = [k for k in typing.get_args(hints[f.name]) if k is not type(None)]
        kind = kinds[0] if kinds else hints[f.name]
        optional = type(None) in typing.get_args(hints[f.name])
        sql = {float: sa.Float, int: sa.Integer}.get(kind) or sa.String(_LENGTHS[f.name])
        key = f.name in keys
        columns.append(sa.Column(f.name, sql, primary_key=key, nullable=optional and not key))
    return columns


_METADATA = sa.MetaData()
_RUNS = sa.Table("runs", _METADATA, *_columns(HistoryRun, keys=("run_id", "machine")))
_POINTS = sa.Table(
    "points",
    _METADATA,
    *_columns(HistoryPoint),
    sa.ForeignKeyConstraint(["run_id", "machine"], ["runs.run_id", "runs.machine"]),
    sa.UniqueConstraint("run_id", "machine", "series", "model_key", "workload", "name", "metric"),
)
# A run's header and timed trials as JSON, in today's results format, in the order of its file.
_RECORDS = sa.Table(
    "records",
    _METADATA,
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("machine", sa.String(400), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    sa.ForeignKeyConstraint(["run_id", "machine"], ["runs.run_id", "runs.machine"]),
    sa.UniqueConstraint("run_id", "machine", "seq"),
)
_NAMES = sa.Table(
    "names",
    _METADATA,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("machine", sa.String(400), primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("named_at", sa.String(40), nullable=False),
    sa.ForeignKeyConstraint(["run_id", "machine"], ["runs.run_id", "runs.machine"]),
)


def store_url(where: str) -> str:
    """A database URL as given, or a path made into SQLite's."""
    return where if "://" in where else f"sqlite:///{Path(where).expanduser()}"


class HistoryStore:
    """The store at `where`: a SQLite path (created on first add) or a database URL."""

    def __init__(self, where: str) -> None:
        self.where = where
        try:
            self.engine = sa.create_engine(store_url(where))
        except (ArgumentError, ImportError, SQLAlchemyError) as err:
            raise HistoryError(f"{where}: not a history store ({_reason(err)})") from None

    def add(
        self, run: HistoryRun, points: Sequence[HistoryPoint], records: Sequence[Record] = ()
    ) -> bool:
        """Store the run, its points and its records; False if the run is already held, which is
        left as it is but for the records a store made before they were kept lacks."""
        with self._writing() as connection:
            held = self._holds(connection, run)
            if not held:
                connection.execute(_RUNS.insert(), [asdict(run)])
                if points:
                    connection.execute(_POINTS.insert(), [to_mapping(p) for p in points])
            if records and not self._records_held(connection, run):
                rows = [
                    {
                        "run_id": run.run_id,
                        "machine": run.machine,
                        "seq": i,
                        "record": json.dumps(r),
                    }
                    for i, r in enumerate(records)
                ]
                connection.execute(_RECORDS.insert(), rows)
        return not held

    def name(self, name: str, run: HistoryRun, named_at: str) -> str | None:
        """Give a held run a name on its machine; the run_id the name was moved from, if any."""
        require_name(name)
        key = (_NAMES.c.name == name) & (_NAMES.c.machine == run.machine)
        with self._writing() as connection:
            before = connection.execute(sa.select(_NAMES.c.run_id).where(key)).scalar()
            connection.execute(_NAMES.delete().where(key))
            connection.execute(
                _NAMES.insert(),
                [
                    {
                        "name": name,
                        "machine": run.machine,
                        "run_id": run.run_id,
                        "named_at": named_at,
                    }
                ],
            )
        return before if before != run.run_id else None

    def named(self, name: str) -> dict[str, HistoryRun]:
        """The runs a name is given to, by machine."""
        on = (_RUNS.c.run_id == _NAMES.c.run_id) & (_RUNS.c.machine == _NAMES.c.machine)
        query = sa.select(_RUNS).join(_NAMES, on).where(_NAMES.c.name == name)
        runs = [from_mapping(HistoryRun, row) for row in self._read(query, _NAMES)]
        return {run.machine: run for run in runs}

    def names(self) -> list[str]:
        return sorted(set(self._read(sa.select(_NAMES.c.name), _NAMES, scalars=True)))

    def records(self, run: HistoryRun) -> list[Record]:
        """The run's header and timed trials, as added (none for a run added before they were
        kept)."""
        key = (_RECORDS.c.run_id == run.run_id) & (_RECORDS.c.machine == run.machine)
        query = sa.select(_RECORDS.c.record).where(key).order_by(_RECORDS.c.seq)
        return [json.loads(text) for text in self._read(query, _RECORDS, scalars=True)]

    def runs(self, machine: str | None = None) -> list[HistoryRun]:
        query = sa.select(_RUNS).order_by(_RUNS.c.commit_date, _RUNS.c.added_at)
        if machine is not None:
            query = query.where(_RUNS.c.machine == machine)
        return [from_mapping(HistoryRun, row) for row in self._read(query)]

    def points(self, machine: str | None = None) -> list[HistoryPoint]:
        query = sa.select(_POINTS)
        if machine is not None:
            query = query.where(_POINTS.c.machine == machine)
        return [from_mapping(HistoryPoint, row) for row in self._read(query)]

    def _holds(self, connection: sa.Connection, run: HistoryRun) -> bool:
        key = (_RUNS.c.run_id == run.run_id) & (_RUNS.c.machine == run.machine)
        return connection.execute(sa.select(_RUNS.c.run_id).where(key)).first() is not None

    def _records_held(self, connection: sa.Connection, run: HistoryRun) -> bool:
        key = (_RECORDS.c.run_id == run.run_id) & (_RECORDS.c.machine == run.machine)
        return connection.execute(sa.select(_RECORDS.c.seq).where(key)).first() is not None

    def _writing(self) -> contextlib.AbstractContextManager[sa.Connection]:
        """A connection in a transaction, on a store whose tables all exist (a store made before
        records and names were kept gets those tables here)."""
        if not self.is_database:  # a new SQLite file's folder (results/ in a fresh checkout)
            Path(self.where).expanduser().parent.mkdir(parents=True, exist_ok=True)
        return _created(self._connection())

    @property
    def is_database(self) -> bool:
        return "://" in self.where

    def _read(
        self, query: sa.Select, table: sa.Table = _RUNS, *, scalars: bool = False
    ) -> list[Any]:
        """The query's rows; none from a store not made yet (a SQLite file is not created by a
        read)."""
        if not self.is_database and not Path(self.where).expanduser().is_file():
            return []
        with self._connection() as connection:
            if not sa.inspect(connection).has_table(table.name):
                return []
            result = connection.execute(query)
            return list(result.scalars() if scalars else result.mappings())

    def _connection(self) -> sa.Connection:
        try:
            return self.engine.connect()
        except (OperationalError, SQLAlchemyError) as err:
            raise HistoryError(f"{self.where}: cannot open the history ({_reason(err)})") from None


@contextlib.contextmanager
def _created(connection: sa.Connection) -> Iterator[sa.Connection]:
    with connection, connection.begin():
        _METADATA.create_all(connection)
        yield connection


def require_name(name: str) -> None:
    """A run's name is also what `check --baseline` takes, beside a file's path: no separators."""
    if not _NAME.fullmatch(name) or set(name) == {"."}:
        raise HistoryError(
            f"--name {name!r}: use letters, digits, '-', '_' and '.' (no path separators)"
        )


def _reason(err: Exception) -> str:
    return " ".join(str(getattr(err, "orig", None) or err).split())[:200]
