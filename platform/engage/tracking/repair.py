"""`engage sync --repair`: the repair for the two permanent faults engage can mend itself.

- A damaged spool (a corrupted page, or a batch row whose blob fails its check): the file
  is kept as ``spool.db.damaged-<time>`` beside it, every readable run and row is copied,
  with its sequence numbers and sent state, into a fresh spool, and the points that could
  not be read are counted (each point has its own sequence number, so a lost batch row
  counts all of its points). A spool of the one-row-per-point layout salvages the same way.
- A half-created or damaged local MLflow store (``sqlite:///…``), e.g. a job killed while
  MLflow was creating it: the store is moved aside as ``mlflow.db.broken-<time>``, and
  every run of the spool that went to it is marked unsent, so the next drain rebuilds
  the store from the spool (entries are never deleted from it).

A remote server's database is not engage's to repair: its fault message says what to run.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from engage.errors import TrackingError
from engage.tracking import batch_rows
from engage.tracking.faults import SpoolDamaged, permanent_fault
from engage.tracking.spool import Spool
from engage.tracking.sqlite_store import forget_store
from engage.tracking.uris import resolve, sqlite_store_path

_RUN_COLUMNS = (
    "local_id, tracking_uri, experiment, run_name, tags, start_ms, parent_local_id, "
    "server_id, experiment_id, status, end_ms, ended_on_server"
)
_OUTBOX_COLUMNS = "seq, run, kind, key, num, text, step, ts, sent, result, n, data"
_OLD_OUTBOX_COLUMNS = "seq, run, kind, key, num, text, step, ts, sent, result, 1, NULL"
_CHUNK = 512


@dataclass
class RepairReport:
    """What ``repair`` did: backups made, entries salvaged or lost, runs to resend."""

    spool_backup: Path | None = None
    salvaged: int = 0
    lost: int = 0
    store_backups: list[Path] = field(default_factory=list)
    resent_runs: int = 0

    def lines(self) -> list[str]:
        """One human line per thing done (empty when nothing needed repair)."""
        out = []
        if self.spool_backup is not None:
            out.append(
                f"spool damaged: kept as {self.spool_backup}; {self.salvaged} entries salvaged "
                f"into a fresh spool, {self.lost} unreadable"
            )
        for backup in self.store_backups:
            out.append(f"MLflow store moved aside to {backup}; a fresh one is built from the spool")
        if self.resent_runs:
            out.append(f"{self.resent_runs} runs will be sent again")
        return out


def repair(spool_path: Path) -> RepairReport:
    """Mend a damaged spool and half-created local MLflow stores; see the module docstring.

    Raises
    ------
    TrackingError
        The spool cannot be opened even after salvage (a disk or permission problem).
    """
    report = RepairReport()
    if spool_path.exists() and _damaged(spool_path):
        _salvage(spool_path, report)
    spool = Spool(spool_path)
    try:
        for uri in sorted({run.tracking_uri for run in spool.runs()}):
            store = sqlite_store_path(uri)
            if store is not None and store.exists() and _store_broken(uri):
                report.store_backups.append(_move_aside(store, "broken"))
                forget_store(resolve(uri))
                report.resent_runs += _mark_unsent(spool_path, uri)
    finally:
        spool.close()
    return report


def _damaged(path: Path) -> bool:
    try:
        spool = Spool(path)
    except SpoolDamaged:
        return True
    try:
        return spool.integrity_check() != "ok" or bool(spool.damaged_rows())
    except SpoolDamaged:
        return True
    finally:
        spool.close()


def _salvage(path: Path, report: RepairReport) -> None:
    backup = _move_aside(path, "damaged")
    report.spool_backup = backup
    source = sqlite3.connect(backup)
    try:
        runs, lost_runs = _readable(source, "runs", "rowid", _RUN_COLUMNS)
        entries, _ = _readable(source, "outbox", "seq", _outbox_columns(source))
        top = _top(source, "outbox", "seq")
    finally:
        source.close()
    known = {row[0] for row in runs}
    kept = [row for row in entries if row[1] in known and _intact(row)]
    Spool(path).close()  # a fresh spool, with the schema and modes
    fresh = sqlite3.connect(path)
    try:
        with fresh:
            fresh.executemany(f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES ({_marks(12)})", runs)
            fresh.executemany(f"INSERT INTO outbox ({_OUTBOX_COLUMNS}) VALUES ({_marks(12)})", kept)
            _reserve(fresh, top)
    finally:
        fresh.close()
    report.salvaged = sum(row[10] for row in kept)
    last = max((row[0] for row in entries), default=0)  # a row's key is its last point's seq
    report.lost = lost_runs + max(top, last) - report.salvaged


def _outbox_columns(db: sqlite3.Connection) -> str:
    """The outbox columns to copy: a spool of the one-row-per-point layout lacks n and data."""
    try:
        names = {row[1] for row in db.execute("PRAGMA table_info(outbox)")}
    except sqlite3.DatabaseError:
        names = {"data"}
    return _OUTBOX_COLUMNS if "data" in names else _OLD_OUTBOX_COLUMNS


def _intact(row: tuple) -> bool:
    """Whether an outbox row can be sent: not a batch row whose blob fails its check."""
    return row[2] != batch_rows.KIND or batch_rows.intact(row[11])


def _reserve(db: sqlite3.Connection, top: int) -> None:
    """Keep the damaged spool's seqs reserved, so new rows never reuse a lost row's."""
    done = db.execute("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'outbox'", (top,))
    if done.rowcount == 0 and top > 0:
        db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('outbox', ?)", (top,))


def _readable(db: sqlite3.Connection, table: str, key: str, columns: str) -> tuple[list, int]:
    """Every row of ``table`` that can still be read, and how many could not."""
    top = _top(db, table, key)
    rows: list[tuple] = []
    lost = 0
    for low in range(1, top + 1, _CHUNK):
        got, bad = _chunk(db, table, key, columns, low, min(low + _CHUNK - 1, top))
        rows += got
        lost += bad
    return rows, lost


def _chunk(db, table: str, key: str, columns: str, low: int, high: int) -> tuple[list, int]:
    sql = f"SELECT {columns} FROM {table} WHERE {key} BETWEEN ? AND ? ORDER BY {key}"
    try:
        return db.execute(sql, (low, high)).fetchall(), 0
    except sqlite3.DatabaseError:
        if low == high:
            return [], 1  # one unreadable key (or a gap on a damaged page)
        middle = (low + high) // 2
        first = _chunk(db, table, key, columns, low, middle)
        second = _chunk(db, table, key, columns, middle + 1, high)
        return first[0] + second[0], first[1] + second[1]


def _top(db: sqlite3.Connection, table: str, key: str) -> int:
    """The highest key the table used (for the outbox, AUTOINCREMENT's record of it too)."""
    queries = [f"SELECT MAX({key}) FROM {table}"]
    if table == "outbox":
        queries.append("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'")
    top = 0
    for sql in queries:
        with contextlib.suppress(sqlite3.DatabaseError, TypeError, IndexError):
            top = max(top, int(db.execute(sql).fetchall()[0][0] or 0))
    return top


def _store_broken(uri: str) -> bool:
    from engage.tracking.store import open_client

    try:
        open_client(resolve(uri)).search_experiments(max_results=1)
    except TrackingError:
        raise
    except Exception as exc:
        return permanent_fault(exc, uri) is not None
    return False


def _mark_unsent(spool_path: Path, uri: str) -> int:
    db = sqlite3.connect(spool_path, timeout=30)
    try:
        with db:
            runs = [
                r[0] for r in db.execute("SELECT local_id FROM runs WHERE tracking_uri = ?", (uri,))
            ]
            db.execute(
                "UPDATE runs SET server_id = NULL, experiment_id = NULL, ended_on_server = 0"
                " WHERE tracking_uri = ?",
                (uri,),
            )
            db.execute(
                "UPDATE outbox SET sent = 0, result = NULL"
                " WHERE run IN (SELECT local_id FROM runs WHERE tracking_uri = ?)",
                (uri,),
            )
    finally:
        db.close()
    return len(runs)


def _move_aside(path: Path, why: str) -> Path:
    backup = path.with_name(f"{path.name}.{why}-{time.strftime('%Y%m%dT%H%M%S')}")
    os.replace(path, backup)
    for suffix in ("-wal", "-shm", "-journal"):
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            os.replace(companion, backup.with_name(backup.name + suffix))
    return backup


def _marks(n: int) -> str:
    return ", ".join("?" * n)
