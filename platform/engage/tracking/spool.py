"""The durable spool: every MLflow write of a job, committed locally before it is sent.

A SQLite database in WAL mode under ``.engage/``. Writers (the driver, and any process on
the same machine) append to the ``outbox`` in one transaction per batch, synced to disk:
one *batch row* per report batch (:mod:`engage.tracking.batch_rows`: one row per point
cost the writer 6 µs a point), one row per operation. The drainer
(:mod:`engage.tracking.drain`) replays the outbox to MLflow in order per run and marks
what landed, per point. A point keeps its original timestamp and step, so sending it
twice never makes a second row in MLflow.

A spool of the one-row-per-point layout (engage before batch rows) is migrated in place
when opened: two columns are added, and its rows read as batch rows of one point.
"""

from __future__ import annotations

import bisect
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
from engage.tracking import batch_rows
from engage.tracking.batch_rows import BadBatchRow
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
    result TEXT,
    n INTEGER NOT NULL DEFAULT 1,
    data BLOB
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
            self._migrate()
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

    def _migrate(self) -> None:
        # A spool of the one-row-per-point layout gets the batch rows' two columns; its rows
        # keep n = 1 and read as before. Checked again inside the write lock: another
        # process may be migrating the same file.
        if _has_batch_columns(self._db):
            return
        with self._tx() as db:
            if not _has_batch_columns(db):
                db.execute("ALTER TABLE outbox ADD COLUMN n INTEGER NOT NULL DEFAULT 1")
                db.execute("ALTER TABLE outbox ADD COLUMN data BLOB")

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
        """Append (kind, key, value, step, timestamp_ms) points in one synced transaction.

        They go in as batch rows (as few as MLflow's per-request limits allow), each point
        with its own sequence number. Returns how many points were appended.
        """
        points = points if isinstance(points, Sequence) else list(points)
        rows = [(run, len(chunk), *batch_rows.encode(chunk)) for chunk in batch_rows.chunks(points)]
        if rows:
            self._write_rows(rows)
        return len(points)

    def append_metrics(
        self,
        run: str,
        keys: Sequence[str],
        values: Sequence[float],
        steps: Sequence[int | None],
        stamps: Sequence[int],
    ) -> int:
        """:meth:`append_points` of metric points given as four columns, one entry per
        point (no tuple per point: the driver's writer of report batches, issue 11).

        Returns how many points were appended.
        """
        size = batch_rows.ROW_LIMIT["metric"]
        rows = [
            (run, len(keys[i : i + size]), *batch_rows.encode_metrics(*cut))
            for i in range(0, len(keys), size)
            for cut in [
                (
                    keys[i : i + size],
                    values[i : i + size],
                    steps[i : i + size],
                    stamps[i : i + size],
                )
            ]
        ]
        if rows:
            self._write_rows(rows)
        return len(keys)

    def append_op(self, run: str, kind: str, payload: dict[str, Any]) -> int:
        """Append one operation (text, artifacts, dataset, model, register) in a synced transaction; returns its seq."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO outbox (run, kind, text, ts) VALUES (?, ?, ?, ?)",
                (run, kind, json.dumps(payload), now_ms()),
            )
            return int(cur.lastrowid)

    def _write_rows(self, rows: list[tuple[str, int, bytes, int]]) -> None:
        with self._tx() as db:
            for run, n, blob, oldest in rows:
                # The row's key is its last point's seq: the n seqs after the last one
                # reserved, so AUTOINCREMENT's own record stays the last seq reserved.
                db.execute(
                    "INSERT INTO outbox (seq, run, kind, ts, n, data) VALUES (COALESCE("
                    "(SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0) + ?, ?, ?, ?, ?, ?)",
                    (n, run, batch_rows.KIND, oldest, n, blob),
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
        """Mark entries as in MLflow, with an operation's result (the drainer's side).

        A batch row all of whose points are marked is marked whole; one only part marked
        is split into rows of its sent and unsent points (seqs unchanged).

        Raises
        ------
        SpoolDamaged
            A batch row to split does not decode.
        """
        marks = sorted(set(seqs))
        if not marks:
            return
        with self._tx() as db:
            rows = db.execute(  # every row whose seqs reach from the first mark to the last
                "SELECT seq, n FROM outbox WHERE seq BETWEEN ?"
                " AND COALESCE((SELECT MIN(seq) FROM outbox WHERE seq >= ?), ?)",
                (marks[0], marks[-1], marks[-1]),
            ).fetchall()
            whole = []
            for seq, n in rows:
                low = bisect.bisect_left(marks, seq - n + 1)
                high = bisect.bisect_right(marks, seq)
                if high - low == n:
                    whole.append((result, seq))
                elif high > low:
                    self._split(db, seq, n, marks[low:high], result)
            db.executemany("UPDATE outbox SET sent = 1, result = ? WHERE seq = ?", whole)

    def _split(
        self, db: sqlite3.Connection, seq: int, n: int, marked: list[int], result: str | None
    ) -> None:
        """Rewrite batch row ``seq`` (its last point's) as rows of its marked (sent) and
        unmarked points, each keyed by its own last point's seq."""
        run, data = db.execute("SELECT run, data FROM outbox WHERE seq = ?", (seq,)).fetchone()
        try:
            points = batch_rows.decode(data, n)
        except BadBatchRow as exc:
            raise bad_row(self.path, seq, exc) from None
        first = seq - n + 1
        flags = [False] * n
        for s in marked:
            flags[s - first] = True
        for offset, sent, piece in batch_rows.split(points, flags):
            blob, oldest = batch_rows.encode(piece)
            done = (int(sent), result if sent else None)
            last = first + offset + len(piece) - 1
            if last == seq:
                db.execute(
                    "UPDATE outbox SET n = ?, ts = ?, data = ?, sent = ?, result = ? WHERE seq = ?",
                    (len(piece), oldest, blob, *done, seq),
                )
            else:
                db.execute(
                    "INSERT INTO outbox (seq, run, kind, ts, n, data, sent, result)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (last, run, batch_rows.KIND, oldest, len(piece), blob, *done),
                )

    def mark_ended(self, run: str) -> None:
        """Record that MLflow has the run's end (the drainer's side)."""
        with self._tx() as db:
            db.execute("UPDATE runs SET ended_on_server = 1 WHERE local_id = ?", (run,))

    def pending(self, run: str, limit: int) -> list[Entry]:
        """Up to ``limit`` unsent entries of ``run`` (a batch row's points each), in order.

        Raises
        ------
        SpoolDamaged
            A corrupted page, or a batch row that does not decode (its seq is named).
        """
        entries: list[Entry] = []
        with self._lock:
            try:
                cursor = self._db.execute(
                    "SELECT seq, run, kind, key, num, text, step, ts, n, data FROM outbox"
                    " WHERE sent = 0 AND run = ? ORDER BY seq",
                    (run,),
                )
                try:
                    while len(entries) < limit and (row := cursor.fetchone()) is not None:
                        entries += self._entries(row)  # decoded only as far as needed
                finally:
                    cursor.close()
            except sqlite3.Error as exc:
                raise spool_error(self.path, exc, "read") from None
        return entries[:limit]

    def _entries(self, row: tuple) -> list[Entry]:
        seq, run, kind, key, num, text, step, ts, n, data = row
        if kind != batch_rows.KIND:
            return [_entry((seq, run, kind, key, num, text, step, ts))]
        try:
            points = batch_rows.decode(data, n)
        except BadBatchRow as exc:
            raise bad_row(self.path, seq, exc) from None
        first = seq - n + 1  # a batch row's key is its last point's seq
        return [Entry(first + i, run, *point) for i, point in enumerate(points)]

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

    def damaged_rows(self) -> list[int]:
        """The seqs of unsent batch rows whose blob fails its check (SQLite cannot see that)."""
        rows = self._read(
            "SELECT seq, data FROM outbox WHERE sent = 0 AND kind = ?", (batch_rows.KIND,)
        )
        return [seq for seq, data in rows if not batch_rows.intact(data)]

    def result(self, seq: int) -> str | None:
        """What an operation entry produced (JSON), once sent."""
        rows = self._read("SELECT result FROM outbox WHERE seq = ?", (seq,))
        return rows[0][0] if rows else None

    def stats(self) -> SpoolStats:
        """How many entries (points and operations) wait to be sent, and the age of the oldest."""
        ((depth, oldest),) = self._read(
            "SELECT COALESCE(SUM(n), 0), MIN(ts) FROM outbox WHERE sent = 0"
        )
        lag = (now_ms() - oldest) / 1000 if oldest else 0.0
        return SpoolStats(int(depth), lag)

    def pending_count(self, run: str) -> int:
        """How many entries of ``run`` wait to be sent."""
        return self._read(
            "SELECT COALESCE(SUM(n), 0) FROM outbox WHERE sent = 0 AND run = ?", (run,)
        )[0][0]

    def integrity_check(self) -> str:
        """SQLite's integrity check of the spool file: ``ok`` or what is damaged."""
        return self._read("PRAGMA integrity_check")[0][0]


@dataclass(frozen=True)
class SpoolStats:
    """The spool's backlog: entries not yet in MLflow and the age of the oldest."""

    depth: int  # entries not yet in MLflow
    lag_seconds: float  # age of the oldest of them


def _has_batch_columns(db: sqlite3.Connection) -> bool:
    return "data" in {row[1] for row in db.execute("PRAGMA table_info(outbox)")}


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


_REPAIR_HINT = (
    "run `engage sync --repair`: it keeps the damaged file as a backup beside it, "
    "salvages every readable entry into a fresh spool and sends them"
)


def bad_row(path: Path, seq: int, exc: BadBatchRow) -> SpoolDamaged:
    """The SpoolDamaged for a batch row (``seq``) whose blob does not decode."""
    return SpoolDamaged(
        f"the tracking spool at {path} is damaged: outbox row {seq}: {exc}", hint=_REPAIR_HINT
    )


def spool_error(path: Path, exc: sqlite3.Error, action: str) -> TrackingError:
    """The TrackingError for a SQLite error on the spool at ``path``, with the repair to run."""
    if is_sqlite_damage(exc):
        return SpoolDamaged(f"the tracking spool at {path} is damaged ({exc})", hint=_REPAIR_HINT)
    if action == "read":
        return TrackingError(f"cannot read the tracking spool at {path}: {exc}")
    return TrackingError(
        f"the tracking spool at {path} refused a write: {exc}",
        hint="free disk space or fix permissions; no point was dropped silently",
    )
