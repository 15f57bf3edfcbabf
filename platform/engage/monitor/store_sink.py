"""StoreSink: the event-store side of one job, an EventSink and Observer of the runner."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence

from engage.events import POINTS, Event, Row, from_rows
from engage.monitor._schema import NewEvent
from engage.monitor.store import EventStore

_log = logging.getLogger(__name__)
_SEVERITY = {"training_health": "warning", "tracking": "warning"}
_REPEAT_S = 30.0  # the same message from the same source is recorded once per this window


class StoreSink:
    """Writes one job's lifecycle events and alerts to the event store.

    Metric and progress events, the high-volume ones, are not stored; only the last
    epoch is kept on the job's row (one write per epoch). A store that fails never fails
    the job: the first error goes to ``warn`` and later ones are counted.

    The runner calls :meth:`start` once the metrics endpoint is known, adds the sink to its
    sinks (and observers, for :meth:`stage`), and calls :meth:`finish` at the end.
    """

    def __init__(
        self,
        store: EventStore,
        job: str,
        run_id: str,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.job = job
        self.run_id = run_id
        self.errors = 0
        self._warn = warn or _log.warning
        self._epoch: int | None = None
        self._recent: dict[tuple[str, str, str], float] = {}

    def start(self, metrics_url: str | None = None) -> None:
        """Record the job as running, with the URL of its metrics endpoint if it has one."""
        self._safely(lambda: self.store.job_started(self.run_id, self.job, metrics_url))

    def finish(self, state: str) -> None:
        """``state``: finished, failed or killed (MLflow's FINISHED/FAILED/KILLED too)."""
        self._safely(lambda: self.store.job_ended(self.run_id, state.lower()))

    def stage(self, name: str, detail: str = "") -> None:
        """Record that the job entered pipeline stage ``name`` (with an optional ``detail``)."""
        self.emit([Event("lifecycle", "stage", data={"stage": name, "detail": detail})])

    def emit(self, events: Sequence[Event]) -> None:
        """Store the lifecycle events among ``events`` and note the job's latest stage and epoch.

        A repeat of the same event within 30 s is dropped (a retrying drainer), except alerts
        and stages; of the workers' ``train_start`` only rank 0's is kept. Store errors are
        counted and the first is passed to ``warn``, never raised.
        """
        lifecycle = [e for e in events if e.kind == "lifecycle"]
        self._store(lifecycle, _epoch_of(events))

    def emit_rows(self, batch: Sequence[Event | Row]) -> None:
        """:meth:`emit` of ``batch``'s Events, read from its rows (Events and rows mixed, as
        the hub's drain holds them): only lifecycle rows become Events; of the metric
        points only the batch's last ``epoch`` value is read (issue 11)."""
        lifecycle: list[Event | Row] = []
        epoch: float | None = None
        for entry in batch:
            if type(entry) is not tuple:
                if entry.kind == "lifecycle":
                    lifecycle.append(entry)
                elif entry.kind == "metric" and entry.name == "epoch":
                    epoch = entry.value if entry.value is not None else epoch
            elif entry[0] == POINTS:
                names = entry[1]
                if "epoch" in names:  # the row's last "epoch" point, as emit() reads it
                    epoch = entry[2][len(names) - 1 - names[::-1].index("epoch")]
            elif entry[0] == "lifecycle":
                lifecycle.append(entry)
            elif entry[0] == "metric" and entry[1] == "epoch" and entry[2] is not None:
                epoch = entry[2]
        self._store(from_rows(lifecycle), epoch)

    def _store(self, lifecycle: list[Event], epoch_value: float | None) -> None:
        """Write the fresh ``lifecycle`` events and the job's stage and epoch (if new)."""
        now = time.time()
        rows = [self._row(e) for e in lifecycle if self._fresh(e, now)]
        epoch = self._new_epoch(epoch_value)
        stage = next((r.data["stage"] for r in reversed(rows) if r.name == "stage"), None)
        if rows or stage is not None or epoch is not None:
            self._safely(lambda: self._write(rows, stage, epoch))

    def _write(self, rows: list[NewEvent], stage: str | None, epoch: int | None) -> None:
        if rows:
            self.store.record(rows)
        if stage is not None or epoch is not None:
            self.store.note_progress(self.run_id, stage=stage, epoch=epoch)

    def _row(self, e: Event) -> NewEvent:
        data = {**e.data, **({"labels": dict(e.labels)} if e.name != "alert" else {})}
        severity = str(e.data.get("severity", "info")) if e.name == "alert" else None
        return NewEvent(
            run_id=self.run_id,
            job=self.job,
            kind=e.kind,
            name=e.name,
            ts=e.timestamp_ms / 1000,
            severity=severity or _SEVERITY.get(e.name, "info"),
            message=_message(e),
            data=data,
        )

    def _fresh(self, e: Event, now: float) -> bool:
        """False for a repeat of the same warning within the window (a retrying drainer)."""
        if e.name == "train_start":  # every rank says it; rank 0 speaks for the group
            return e.labels.get("rank", "0") == "0"
        if e.name in ("alert", "stage"):
            return True
        # The whole event is the key: verdicts per client and round differ only in labels/data.
        key = (
            e.name,
            json.dumps(dict(e.labels), sort_keys=True),
            json.dumps(e.data, sort_keys=True, default=str),
        )
        if now - self._recent.get(key, -_REPEAT_S) < _REPEAT_S:
            return False
        if len(self._recent) > 1000:  # keep only what is still inside the window
            self._recent = {k: t for k, t in self._recent.items() if now - t < _REPEAT_S}
        self._recent[key] = now
        return True

    def _new_epoch(self, value: float | None) -> int | None:
        """The epoch of the batch's last ``epoch`` point ``value``, None when it has none or
        it is the epoch noted last."""
        if value is None:
            return None
        epoch = int(value)
        if epoch == self._epoch:
            return None
        self._epoch = epoch
        return epoch

    def _safely(self, write: Callable[[], None]) -> None:
        try:
            write()
        except Exception as exc:  # the store is a side channel: never fail the job for it
            self.errors += 1
            if self.errors == 1:
                self._warn(f"event store unavailable, events of this job are not kept: {exc}")


def _epoch_of(events: Sequence[Event]) -> float | None:
    """The value of the last ``epoch`` metric among ``events`` that has one."""
    for e in reversed(events):
        if e.kind == "metric" and e.name == "epoch" and e.value is not None:
            return e.value
    return None


def _message(e: Event) -> str:
    data = e.data
    if e.name == "alert":
        return f"{data.get('rule', '?')} {data.get('state', '?')}: {data.get('summary', '')}"
    if e.name == "stage":
        detail = data.get("detail")
        return f"stage {data.get('stage')}" + (f": {detail}" if detail else "")
    if e.name == "train_start":
        return f"training started with {data.get('world_size', '?')} workers"
    return str(data.get("message", ""))
