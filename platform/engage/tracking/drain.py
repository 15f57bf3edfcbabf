"""The drainer: replays the spool's outbox to MLflow, in order per run, idempotently.

One drainer per spool at a time (a file lock), so two engage processes never send the same
entry twice; whichever holds the lock drains every run in the spool, its own and those a
killed process left behind. Faults are classified (:mod:`engage.tracking.faults`):
transient ones (server down, 5xx, timeouts, a locked database) back off and retry, with
the lag shown; permanent ones (a damaged spool, a half-created MLflow store, refused
credentials) stop the drainer and are raised by :meth:`Drainer.flush` as a TrackingError
naming the file and the repair. An entry MLflow rejects for good is set aside with its
error rather than blocking the run.

The spool hands out points one by one though it stores them a batch per row
(:mod:`engage.tracking.batch_rows`); a request takes them up to MLflow's limits and marks
them sent per point, so a row only part sent, or one bad point set aside, splits its row.
Every point keeps its timestamp and step, which is what makes a resend after a crash
between MLflow's answer and the mark harmless: MLflow stores a metric point identical in
key, value, timestamp and step once, and a param or tag sent again is the same value.

:meth:`Drainer.start` runs the drain loop in a separate process at the lowest CPU
priority (:mod:`engage.tracking.drain_process`), so MLflow's client never shares the
job's GIL or competes with it for CPU; ``in_process=True`` keeps it a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.errors import TrackingError
from engage.paths import private_file
from engage.tracking import _ops
from engage.tracking.drain_process import DrainerProcess
from engage.tracking.faults import permanent_fault
from engage.tracking.spool import Entry, Spool, SpoolRun
from engage.tracking.uris import mask_text, mask_uri, resolve

log = logging.getLogger(__name__)

_BATCH_LIMITS = {"metric": 1000, "param": 100, "tag": 100}  # MLflow log_batch limits
_BATCH_BYTES = 900_000  # under log_batch's 1 MB request limit
_PERMANENT_CODES = {"INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "INVALID_STATE"}
_FLUSH_RETRY_S = 1.0  # while flush() waits, the drainer retries at least this often
_LAG_EVERY_S = 60.0  # while MLflow stays down, say how far behind the spool is this often
# After a flush, a new drainer process starts this much later: a job's end flushes two or
# three times within seconds and then stops, and each process costs seconds of CPU to start
# (it imports MLflow). Points spooled meanwhile wait for it or for the next flush.
HANDBACK_AFTER_S = 5.0


@dataclass
class DrainStatus:
    """What the drainer has done, and what stops it.

    ``error`` is the last transient error (None when the last pass succeeded); ``fault``
    is a permanent one: the drainer has stopped and :meth:`Drainer.flush` raises it.
    """

    sent: int = 0
    failed_permanently: int = 0
    error: str | None = None
    fault: TrackingError | None = None


class Drainer:
    """Sends spooled entries to MLflow; call :meth:`drain_once`, or :meth:`start` it.

    Parameters
    ----------
    spool_path
        The spool database.
    warn
        Where outage, lag and fault messages go (the job's event bus, a console).
    client_factory
        Opens an MLflow client for a URI (tests inject one); a drainer given one runs as
        a thread, since a factory cannot cross into another process.
    in_process
        Run :meth:`start`'s loop as a thread of this process instead of a separate one.
    """

    def __init__(
        self,
        spool_path: Path,
        *,
        warn: Callable[[str], None] = log.warning,
        client_factory: Callable[[str], Any] | None = None,
        max_backoff_s: float = 30.0,
        in_process: bool = False,
    ) -> None:
        # MLflow's HTTP client retries for minutes by default; the drainer retries itself.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        self.spool = Spool(spool_path)
        self._warn = warn
        self._factory = client_factory or _ops.client_for
        self._in_process = in_process or client_factory is not None
        self._clients: dict[str, Any] = {}
        lock_path = private_file(Path(spool_path).with_suffix(".lock"))
        self._lock_file = open(lock_path, "a+")  # noqa: SIM115
        self._have_lock = False
        self._pass = threading.Lock()  # held by the thread sending a pass (drain_once)
        self._stop = threading.Event()
        self._wake = threading.Event()  # cuts a backoff short: stop(), or a flush() waiting
        self._thread: threading.Thread | None = None
        self._process: Any = None  # a DrainerProcess when start() runs the loop elsewhere
        self._process_interval: float | None = None  # set when start() uses a process
        self._handback: threading.Timer | None = None  # the process restart a flush scheduled
        self._handback_lock = threading.Lock()
        self._max_backoff = max_backoff_s
        self._down_since: float | None = None
        self._lag_said = 0.0
        self._uri: str | None = None  # the store the current pass is sending to
        self.status = DrainStatus()

    # -- one pass --------------------------------------------------------------------------
    def drain_once(self) -> DrainStatus:
        """Send everything that can be sent now; never raises (faults go to ``status``).

        One pass at a time per drainer: the spool's file lock keeps other processes out,
        but not this one's threads (a flush beside the drain thread), which would both
        create a run that has no MLflow id yet. A pass that finds another running returns.
        """
        if self.status.fault is not None or not self._pass.acquire(blocking=False):
            return self.status
        try:
            if not self._acquire():
                return self.status
            self._uri = None
            try:
                for run in self.spool.unfinished_runs():
                    self._uri = run.tracking_uri
                    self._drain_run(run)
            except Exception as exc:
                self._failed(exc)
                return self.status
            if self._down_since is not None or self.status.error is not None:
                self._warn("MLflow reachable again; the spool is draining")
            self._down_since = None
            self.status.error = None
            return self.status
        finally:
            self._pass.release()

    def _failed(self, exc: Exception) -> None:
        fault = permanent_fault(exc, self._uri)
        if fault is not None:
            self.status.fault = fault
            self._warn(f"tracking stopped: {fault}")
            return
        announced = self._down_since is not None or self.status.error is not None
        self.status.error = mask_text(f"{type(exc).__name__}: {exc}")
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = self._lag_said = now
        if not announced:
            self._warn(
                f"MLflow unreachable at {mask_uri(self._uri or '?')} "
                f"({self.status.error.splitlines()[0][:160]}); the job goes on and keeps every "
                f"point in the spool ({self._lag()}); they are sent when it is back, or by "
                "`engage sync`"
            )
        elif now - self._lag_said >= _LAG_EVERY_S:
            self._lag_said = now
            self._warn(f"MLflow still unreachable, retrying; {self._lag()}")

    def _lag(self) -> str:
        try:
            stats = self.spool.stats()
        except TrackingError:
            return "spool unreadable"
        return f"{stats.depth} waiting, the oldest for {stats.lag_seconds:.0f} s"

    def _acquire(self) -> bool:
        if not self._have_lock:
            try:
                fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._have_lock = True
            except BlockingIOError:
                return False
        return True

    def _release(self) -> None:
        if self._have_lock:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._have_lock = False

    def _client(self, uri: str) -> Any:
        if uri not in self._clients:
            self._clients[uri] = self._factory(resolve(uri))
        return self._clients[uri]

    def _drain_run(self, run: SpoolRun) -> None:
        client = self._client(run.tracking_uri)
        if run.server_id is None:
            run = self._create(run, client)
        while entries := self.spool.pending(run.local_id, 2000):
            self._send(run, entries, client)
            if self._stop.is_set():  # stop() waits: the rest goes in the next pass
                return
        if run.status and not run.ended_on_server:
            client.set_terminated(run.server_id, status=run.status, end_time=run.end_ms)
            self.spool.mark_ended(run.local_id)

    def _create(self, run: SpoolRun, client: Any) -> SpoolRun:
        parent = self.spool.run(run.parent_local_id) if run.parent_local_id else None
        if parent is not None and parent.server_id is None:
            parent = self._create(parent, client)
        server_id, experiment_id = _ops.create_run(
            client, run, parent.server_id if parent else None
        )
        self.spool.set_server_ids(run.local_id, server_id, experiment_id)
        return self.spool.run(run.local_id)

    # -- sending entries ---------------------------------------------------------------------
    def _send(self, run: SpoolRun, entries: list[Entry], client: Any) -> None:
        batch = _Batch()
        for entry in entries:
            if entry.kind in _BATCH_LIMITS:
                if batch.full_for(entry):
                    self._send_points(run, batch.entries, client)
                    batch = _Batch()
                batch.add(entry)
                continue
            self._send_points(run, batch.entries, client)
            batch = _Batch()
            self._send_op(run, entry, client)
        self._send_points(run, batch.entries, client)

    def _send_points(self, run: SpoolRun, batch: list[Entry], client: Any) -> None:
        if not batch:
            return
        try:
            _ops.log_points(client, run.server_id, batch)
        except Exception as exc:
            if not _is_permanent(exc):
                raise
            if len(batch) > 1:  # find the bad point(s); the rest still go
                for entry in batch:
                    self._send_points(run, [entry], client)
                return
            self._set_aside(batch[0], exc)
            return
        self.spool.mark_sent([e.seq for e in batch])
        self.status.sent += len(batch)

    def _send_op(self, run: SpoolRun, entry: Entry, client: Any) -> None:
        try:
            result = _ops.apply_op(client, run, entry, self.spool)
        except Exception as exc:
            if not _is_permanent(exc):
                raise
            self._set_aside(entry, exc)
            return
        self.spool.mark_sent([entry.seq], json.dumps(result) if result is not None else None)
        self.status.sent += 1

    def _set_aside(self, entry: Entry, exc: Exception) -> None:
        message = f"MLflow rejected {entry.kind} {entry.key or ''} for good: {exc}"
        self.spool.mark_sent([entry.seq], json.dumps({"error": message}))
        self.status.failed_permanently += 1
        self._warn(message)

    # -- in the background ---------------------------------------------------------------
    def start(self, interval_s: float = 0.5) -> Drainer:
        """Drain every ``interval_s`` (backing off while MLflow is down) until :meth:`stop`.

        In a separate process at nice 19 unless the drainer was made ``in_process``.
        """
        if not self._in_process:
            self._process_interval = interval_s
            self._process = DrainerProcess(self.spool.path, interval_s, self._warn, self.status)
            return self
        self._thread = threading.Thread(
            target=self.loop, args=(interval_s,), name="engage-drainer", daemon=True
        )
        self._thread.start()
        return self

    def loop(self, interval_s: float = 0.5) -> None:
        """The drain loop :meth:`start` runs; returns once :meth:`stop` is called."""
        backoff = interval_s
        while not self._stop.is_set():
            try:
                status = self.drain_once()
            except Exception as exc:  # never let the thread die silently
                self._failed(exc)
                status = self.status
            backoff = min(backoff * 2, self._max_backoff) if status.error else interval_s
            self._wake.wait(backoff)
            self._wake.clear()

    @property
    def pid(self) -> int | None:
        """The drainer process's id while :meth:`start` runs one, else None."""
        return self._process.pid if self._process is not None else None

    def assume_down(self, error: str) -> None:
        """Take over an outage another drainer of this job already announced (no repeat)."""
        self.status.error = error
        self._down_since = self._lag_said = time.monotonic()

    def request_stop(self) -> None:
        """Make :meth:`loop` return after the current pass (from any thread)."""
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Retry now rather than at the end of the current backoff."""
        if self._process is not None:
            self._process.wake()
        self._wake.set()

    def flush(self, run_local_id: str | None = None, timeout_s: float = 30.0) -> bool:
        """Drain until ``run_local_id`` (or the whole spool) is in MLflow; False on timeout.

        Raises
        ------
        TrackingError
            A permanent fault stopped the drainer (its message names the repair).
        """
        if self._process_interval is not None:
            # Someone waits for MLflow, so nothing runs that the drainer must yield to: drain
            # here at full priority (a nice-19 process on a busy machine gets almost no CPU),
            # then hand the spool back to a fresh drainer process, a little later.
            self._cancel_handback()
            if self._process is not None:
                self._process.stop(0.0)  # it releases the spool's lock
                self._process = None
            try:
                return self._flush_here(run_local_id, timeout_s)
            finally:
                if not self._stop.is_set():
                    self._release()
                    self._schedule_handback()
        return self._flush_here(run_local_id, timeout_s)

    def _flush_here(self, run_local_id: str | None, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        nudged = 0.0
        while True:
            if not self._running():
                self.drain_once()
            elif time.monotonic() - nudged >= _FLUSH_RETRY_S:
                # Someone waits: retry now and then, not after a backoff of up to 30 s that
                # began while the server was down (it may be back already).
                self.wake()
                nudged = time.monotonic()
            if self.status.fault is not None:
                raise self.status.fault
            if self.is_drained(run_local_id):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05 if self._process is not None else 0.2)

    def _schedule_handback(self) -> None:
        with self._handback_lock:
            self._handback = threading.Timer(HANDBACK_AFTER_S, self._hand_back)
            self._handback.daemon = True
            self._handback.start()

    def _cancel_handback(self) -> None:
        with self._handback_lock:
            if self._handback is not None:
                self._handback.cancel()
                self._handback = None

    def _hand_back(self) -> None:
        with self._handback_lock:
            if self._handback is None or self._stop.is_set() or self._process is not None:
                return
            self._handback = None
            self._process = DrainerProcess(
                self.spool.path, self._process_interval, self._warn, self.status
            )

    def _running(self) -> bool:
        if self._process is not None:
            return self._process.alive()  # a dead drainer process: drain here instead
        return self._thread is not None and self._have_lock

    def is_drained(self, run_local_id: str | None = None) -> bool:
        """Whether ``run_local_id`` (or every run) has nothing left to send."""
        runs = self.spool.unfinished_runs()
        return not any(r.local_id == run_local_id for r in runs) if run_local_id else not runs

    def stop(self, final_drain_s: float = 0.0) -> None:
        """Stop the loop; first try for up to ``final_drain_s`` to send what is left."""
        self._stop.set()
        self._wake.set()
        self._cancel_handback()
        if self._process is not None:
            self._process.stop(final_drain_s)
            self._process = None
            final_drain_s = 0.0  # the process did the final drain
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if final_drain_s > 0:
            with contextlib.suppress(Exception):
                self.flush(timeout_s=final_drain_s)
        self._release()
        self._lock_file.close()
        self.spool.close()


class _Batch:
    """Points for one log_batch request, with running counts.

    Counting as points are added keeps a pass linear in the points sent; recounting the
    batch for every point made the drainer spend most of its CPU here (quadratic in the
    1000-point batch), which a training loop in the same process paid for through the GIL.
    """

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._per_kind: dict[str, int] = {}
        self._bytes = 0

    def full_for(self, entry: Entry) -> bool:
        """Whether ``entry`` must start a new request (MLflow's count and size limits)."""
        return bool(self.entries) and (
            self._per_kind.get(entry.kind, 0) >= _BATCH_LIMITS[entry.kind]
            or len(self.entries) >= 1000
            or self._bytes > _BATCH_BYTES
        )

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)
        self._per_kind[entry.kind] = self._per_kind.get(entry.kind, 0) + 1
        self._bytes += len(entry.key or "") + len(str(entry.value)) + 40


def _is_permanent(exc: Exception) -> bool:
    return getattr(exc, "error_code", None) in _PERMANENT_CODES
