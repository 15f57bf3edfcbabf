"""The durable spool: every MLflow write of a job, committed locally before it is sent.

A SQLite database in WAL mode under ``.engage/``. Writers (the driver, and any process on
the same machine) append to the ``outbox`` in one transaction per batch, synced to disk;
the drainer (:mod:`engage.tracking.drain`) replays the outbox to MLflow in order per run
and marks what landed. A point keeps its original timestamp and step, so sending it
twice never makes a second row in MLflow.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.errors import TrackingError
from engage.paths import private_file
from engage.tracking.faults import SpoolDamaged, is_sqlite_damage
from engage.tracking.uris import remember

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    local_id TEXT PRIMARY KEY,
    tracking_uri TEXT NOT NULL,
    experiment TEXT NOT NULL,
    run_name TEXT NOT NULL,
    tags TEXT NOT NULL,
    start_ms INTEGER NOT NULL,
    parent_local_id TEXT,
    server_id TEXT,
    experiment_id TEXT,
    status TEXT,
    end_ms INTEGER,
    ended_on_server INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL REFERENCES runs(local_id),
    kind TEXT NOT NULL,
    key TEXT,
    num REAL,
    text TEXT,
    step INTEGER,
    ts INTEGER NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0,
    result TEXT
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox(sent, run, seq);
"""

POINT_KINDS = ("metric", "param", "tag")
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def now_ms() -> int:
    """Milliseconds since the epoch (MLflow's timestamp unit)."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class SpoolRun:
    """One run as the spool knows it: what to create, and the MLflow ids once created."""

    local_id: str
    tracking_uri: str
    experiment: str
    run_name: str
    tags: dict[str, str]
    start_ms: int
    parent_local_id: str | None
    server_id: str | None
    experiment_id: str | None
    status: str | None
    end_ms: int | None
    ended_on_server: bool

    @property
    def run_id(self) -> str:
        """The MLflow run id once the server has the run, else engage's local id."""
        return self.server_id or self.local_id


@dataclass(frozen=True)
class Entry:
    """One outbox row: a metric, param or tag point, or an operation with a JSON payload."""

    seq: int
    run: str
    kind: str
    key: str | None
    value: Any
    step: int | None
    ts: int
    result: str | None = None


def _encode_number(value: float) -> tuple[float | None, str | None]:
    # sqlite3 stores NaN as NULL; keep non-finite values as text so they survive exactly.
    if math.isfinite(value):
        return value, None
    return None, "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


class Spool:
    """The spool database at ``path`` (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.files = self.path.parent / "spool-files"
        self._lock = threading.Lock()
        try:
            private_file(self.path)  # 0600 in a 0700 folder; SQLite's -wal/-shm follow
            self._db = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._probe_writable()
        except sqlite3.Error as exc:
            if is_sqlite_damage(exc):
                raise spool_error(self.path, exc, "open") from None
            raise self._unwritable(exc) from None
        except SpoolDamaged:
            raise
        except (OSError, TrackingError) as exc:  # TrackingError: the write probe's
            raise self._unwritable(exc) from None

    def _unwritable(self, exc: Exception) -> TrackingError:
        detail = exc.message if isinstance(exc, TrackingError) else exc
        return TrackingError(
            f"cannot write the tracking spool at {self.path}: {detail}",
            hint="engage refuses to run without a durable spool rather than lose metrics; "
            "free disk space, fix permissions, or point ENGAGE_HOME / --home at a writable folder",
        )

    def _probe_writable(self) -> None:
        # A read-only file or folder only fails on the first write; find out now, not mid-job.
        with self._tx() as db:
            db.execute("CREATE TABLE IF NOT EXISTS probe (x)")
            db.execute("DELETE FROM probe")
        if not os.access(self.path.parent, os.W_OK):
            raise OSError(f"folder {self.path.parent} is not writable")

    def close(self) -> None:
        """Close this connection (other processes' connections are unaffected)."""
        self._db.close()

    # -- writing -------------------------------------------------------------------------
    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._lock, self.path)

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise spool_error(self.path, exc, "read") from None

    def create_run(
        self,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        tags: dict[str, str],
        parent_local_id: str | None = None,
        local_id: str | None = None,
    ) -> str:
        """Spool a new run; returns its local id.

        The URI is stored masked (:func:`engage.tracking.uris.mask_uri`): a password stays
        in this process's memory, and the drainer gets it from there or the environment.
        """
        local_id = local_id or uuid.uuid4().hex
        tracking_uri = remember(tracking_uri)
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs (local_id, tracking_uri, experiment, run_name, tags, start_ms,"
                " parent_local_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    local_id,
                    tracking_uri,
                    experiment,
                    run_name,
                    json.dumps(tags),
                    now_ms(),
                    parent_local_id,
                ),
            )
        return local_id

    def append_points(
        self, run: str, points: Iterable[tuple[str, str, Any, int | None, int]]
    ) -> int:
        """Append (kind, key, value, step, timestamp_ms) points in one synced transaction."""
        rows = []
        for kind, key, value, step, ts in points:
            if kind == "metric":
                num, text = _encode_number(float(value))
            else:
                num, text = None, str(value)
            rows.append((run, kind, key, num, text, step, ts))
        if rows:
            self._write_many(rows)
        return len(rows)

    def append_op(self, run: str, kind: str, payload: dict[str, Any]) -> int:
        """Append one operation (text, artifacts, dataset, model, register) in a synced transaction; returns its seq."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO outbox (run, kind, text, ts) VALUES (?, ?, ?, ?)",
                (run, kind, json.dumps(payload), now_ms()),
            )
            return int(cur.lastrowid)

    def _write_many(self, rows: list[tuple]) -> None:
        with self._tx() as db:
            db.executemany(
                "INSERT INTO outbox (run, kind, key, num, text, step, ts) VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def end_run(self, run: str, status: str) -> None:
        """Record the run's end status (the first status recorded wins)."""
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET status = ?, end_ms = ? WHERE local_id = ? AND status IS NULL",
                (status, now_ms(), run),
            )

    # -- the drainer's side --------------------------------------------------------------
    def set_server_ids(self, run: str, server_id: str, experiment_id: str) -> None:
        """Record the MLflow run and experiment ids of a created run (the drainer's side)."""
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET server_id = ?, experiment_id = ? WHERE local_id = ?",
                (server_id, experiment_id, run),
            )

    def mark_sent(self, seqs: Sequence[int], result: str | None = None) -> None:
        """Mark entries as in MLflow, with an operation's result (the drainer's side)."""
        with self._tx() as db:
            db.executemany(
                "UPDATE outbox SET sent = 1, result = ? WHERE seq = ?", [(result, s) for s in seqs]
            )

    def mark_ended(self, run: str) -> None:
        """Record that MLflow has the run's end (the drainer's side)."""
        with self._tx() as db:
            db.execute("UPDATE runs SET ended_on_server = 1 WHERE local_id = ?", (run,))

    def pending(self, run: str, limit: int) -> list[Entry]:
        """Up to ``limit`` unsent entries of ``run``, in order."""
        rows = self._read(
            "SELECT seq, run, kind, key, num, text, step, ts FROM outbox"
            " WHERE sent = 0 AND run = ? ORDER BY seq LIMIT ?",
            (run, limit),
        )
        return [_entry(r) for r in rows]

    def runs(self, where: str = "1 = 1", args: Sequence[Any] = ()) -> list[SpoolRun]:
        """Runs matching a SQL condition, oldest first."""
        rows = self._read(f"SELECT * FROM runs WHERE {where} ORDER BY start_ms", args)
        return [_run(r) for r in rows]

    def run(self, local_id: str) -> SpoolRun:
        """The run with this local or MLflow id; raises TrackingError when there is none."""
        found = self.runs("local_id = ? OR server_id = ?", (local_id, local_id))
        if not found:
            raise TrackingError(f"no run {local_id} in the spool at {self.path}")
        return found[0]

    def unfinished_runs(self) -> list[SpoolRun]:
        """Runs with anything left to send: creation, outbox entries, or their end."""
        return self.runs(
            "server_id IS NULL OR (status IS NOT NULL AND ended_on_server = 0)"
            " OR local_id IN (SELECT DISTINCT run FROM outbox WHERE sent = 0)"
        )

    def result(self, seq: int) -> str | None:
        """What an operation entry produced (JSON), once sent."""
        rows = self._read("SELECT result FROM outbox WHERE seq = ?", (seq,))
        return rows[0][0] if rows else None

    def stats(self) -> SpoolStats:
        """How many entries wait to be sent, and the age of the oldest."""
        ((depth, oldest),) = self._read("SELECT COUNT(*), MIN(ts) FROM outbox WHERE sent = 0")
        lag = (now_ms() - oldest) / 1000 if oldest else 0.0
        return SpoolStats(int(depth), lag)

    def pending_count(self, run: str) -> int:
        """How many entries of ``run`` wait to be sent."""
        return self._read("SELECT COUNT(*) FROM outbox WHERE sent = 0 AND run = ?", (run,))[0][0]

    def integrity_check(self) -> str:
        """SQLite's integrity check of the spool file: ``ok`` or what is damaged."""
        return self._read("PRAGMA integrity_check")[0][0]


@dataclass(frozen=True)
class SpoolStats:
    """The spool's backlog: entries not yet in MLflow and the age of the oldest."""

    depth: int  # entries not yet in MLflow
    lag_seconds: float  # age of the oldest of them


def _entry(row: tuple) -> Entry:
    seq, run, kind, key, num, text, step, ts = row
    if kind == "metric":
        value: Any = num if text is None else _NON_FINITE[text]
    elif kind in POINT_KINDS:
        value = text
    else:
        value = json.loads(text)
    return Entry(seq, run, kind, key, value, step, ts)


def _run(row: tuple) -> SpoolRun:
    (local_id, uri, experiment, name, tags, start, parent, server, exp_id, status, end, ended) = row
    return SpoolRun(
        local_id,
        uri,
        experiment,
        name,
        json.loads(tags),
        start,
        parent,
        server,
        exp_id,
        status,
        end,
        bool(ended),
    )


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT: one writer at a time across processes, synced on commit.

    The lock keeps threads sharing one connection from interleaving transactions. Any
    SQLite error (a full disk, a corrupted page, a lock held too long) leaves as a
    :class:`~engage.errors.TrackingError` naming the file, never as a bare sqlite3 error.
    """

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock, path: Path) -> None:
        self._db = db
        self._lock = lock
        self._path = path

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._lock.release()
            if isinstance(exc, sqlite3.Error):
                raise spool_error(self._path, exc, "write") from None
            raise
        return self._db

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._db.execute("ROLLBACK" if exc_type else "COMMIT")
        except sqlite3.Error as failed:
            if exc_type is None:  # the commit itself failed (the disk filled, say)
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise spool_error(self._path, failed, "write") from None
        finally:
            self._lock.release()
        if isinstance(exc, sqlite3.Error):
            raise spool_error(self._path, exc, "write") from None


def spool_error(path: Path, exc: sqlite3.Error, action: str) -> TrackingError:
    """The TrackingError for a SQLite error on the spool at ``path``, with the repair to run."""
    if is_sqlite_damage(exc):
        return SpoolDamaged(
            f"the tracking spool at {path} is damaged ({exc})",
            hint="run `engage sync --repair`: it keeps the damaged file as a backup beside it, "
            "salvages every readable entry into a fresh spool and sends them",
        )
    if action == "read":
        return TrackingError(f"cannot read the tracking spool at {path}: {exc}")
    return TrackingError(
        f"the tracking spool at {path} refused a write: {exc}",
        hint="free disk space or fix permissions; no point was dropped silently",
    )
