"""The tracking side of a job's event bus: its metric sink and its health sink.

Every job kind (the centralised pipeline, the federated job, any later kind) hands its
events to the same two sinks, so what reaches the MLflow run through the spool is decided
in one place: :class:`MetricSink` spools the run's own metric series, :class:`HealthSink`
turns non-finite metrics and alerts into run tags and training-health events.

A training job restarted after a worker failure replays the epoch it was in (and any after
its last valid checkpoint). MLflow only appends, so :class:`MetricSink` keeps each series'
history at one value per step: a point whose step is not above the last step already
spooled for its series is a replay and is dropped. The first value of a step stands; the
replay computes the same value, as it resumes from the checkpoint's model, optimiser and
RNG states and the same data position.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Protocol

from engage.events import POINTS, Event, from_rows

#: Labels that mark a series the run itself does not keep: per-worker copies (``rank``
#: other than 0) live in the monitor only, per-client series go to the round child runs.
PER_RANK_LABEL = "rank"
PER_CLIENT_LABEL = "client"

_Batch = Sequence[Event | tuple]  # Events and rows mixed (engage.events.RowSink)


class MetricRun(Protocol):
    """What :class:`MetricSink` needs of a run (``engage.tracking.PipelineRun`` has it).

    A run that also has ``log_metric_columns(keys, values, steps, stamps)`` (PipelineRun
    does) gets the rows' points as columns, with no Event built for them.
    """

    def log_metric_events(self, events: Sequence[Event]) -> None:
        """Spool metric events; the run ignores events that are not metrics."""


class TaggedRun(Protocol):
    """What :class:`HealthSink` needs of a run (``engage.tracking.PipelineRun`` has it)."""

    def set_tags(self, tags: dict[str, str]) -> None:
        """Spool tags on the run."""

    def log_text(self, text: str, artifact_file: str) -> None:
        """Spool a text artifact of the run."""


class MetricSink:
    """Spools a job's metric events into its run (the drainer sends them to MLflow).

    Per-worker series (step timings, resources) reach MLflow from rank 0 only, and
    per-client series (labelled ``client``) stay out of the job's run (the federated job
    logs them to one child run per round); the live monitor still gets every event.

    It reads rows too (:meth:`emit_rows`): the hub's rows go to the spool as columns, no
    Event built per point (issue 11).

    Parameters
    ----------
    run:
        The job's run, usually an :class:`engage.tracking.PipelineRun`.
    """

    def __init__(self, run: MetricRun) -> None:
        self._run = run
        self._columns = getattr(run, "log_metric_columns", None)
        # Per label key (the frozenset of a series' labels): [the last step spooled per
        # name, the highest of those steps]. A row whose step is above the highest replays
        # none of its series: checked once for the row, not once per name.
        self._series: dict[frozenset, list] = {}
        self.replayed = 0  # points dropped as replays of a step already spooled

    def emit(self, events: Sequence[Event]) -> None:
        """Spool the events that belong to the run itself, each step of a series once.

        A metric point whose step is not above the last one spooled for its series is a
        replay (see the module doc) and is dropped.
        """
        # A batch's events share a few labels mappings (one per Reporter): decide keeps()
        # and find the series' state once per mapping, not per event, and check the replay
        # inline (the driver's spool writer paid 1 µs a point for this, issue 11).
        # id() is safe within this call: the events hold their mappings alive.
        per_labels: dict[int, list | None] = {}
        kept = []
        for e in events:
            labels = e.labels
            if (state := per_labels.get(id(labels), False)) is False:
                state = per_labels[id(labels)] = self._state(labels)
            if state is None:
                continue
            if e.kind == "metric" and (step := e.step) is not None:
                seen = state[0]
                last = seen.get(e.name)
                if last is not None and step <= last:
                    self.replayed += 1
                    continue
                seen[e.name] = step
                if step > state[1]:
                    state[1] = step
            kept.append(e)
        self._run.log_metric_events(kept)

    def emit_rows(self, batch: _Batch) -> None:
        """:meth:`emit` of ``batch``'s Events, read from its rows (Events and rows mixed, as
        the hub's drain and a Reporter's buffer hold them), the kept points handed to the
        run as columns: the same points, the same order, the same replays dropped."""
        if self._columns is None:  # a run that takes Events only
            self.emit(from_rows(batch))
            return
        keys: list[str] = []
        values: list[float] = []
        steps: list[int | None] = []
        stamps: list[int] = []
        per_labels: dict[int, list | None] = {}  # as in emit(): the rows hold them alive
        for entry in batch:
            if type(entry) is tuple:
                kind, name, value, step, ts, labels, _ = entry
            else:
                kind, name, value, step = entry.kind, entry.name, entry.value, entry.step
                ts, labels = entry.timestamp_ms, entry.labels
            if (state := per_labels.get(id(labels), False)) is False:
                state = per_labels[id(labels)] = self._state(labels)
            if state is None:
                continue
            if kind == POINTS:  # one metrics() call: ``name`` and ``value`` are tuples
                if step is not None:
                    fresh = dict.fromkeys(name, step) if step > state[1] else None
                    # Above every series' last step, and each name once: no replay here.
                    if fresh is not None and len(fresh) == len(name):
                        state[0].update(fresh)
                        state[1] = step
                    else:
                        name, value = self._fresh(state, name, value, step)
                keys += name
                values += value
                steps += repeat(step, len(name))
                stamps += repeat(ts, len(name))
            elif kind == "metric":
                if step is not None and self._replay(state, name, step):
                    continue
                if value is not None:
                    keys.append(name)
                    values.append(value)
                    steps.append(step)
                    stamps.append(ts)
        if keys:
            self._columns(keys, values, steps, stamps)

    def _state(self, labels: Mapping[str, str]) -> list | None:
        """The replay state of the series labelled ``labels``, None when the run keeps none."""
        if not _keeps(labels):
            return None
        key = frozenset(labels.items())
        if (state := self._series.get(key)) is None:
            state = self._series[key] = [{}, -math.inf]
        return state

    def _replay(self, state: list, name: str, step: int) -> bool:
        """Whether point ``name`` at ``step`` is a replay; records its step when it is not."""
        last = state[0].get(name)
        if last is not None and step <= last:
            self.replayed += 1
            return True
        state[0][name] = step
        if step > state[1]:
            state[1] = step
        return False

    def _fresh(
        self, state: list, names: Sequence[str], values: Sequence[float], step: int
    ) -> tuple[list[str], list[float]]:
        """The names and values of one row's points that are not replays, in order."""
        pairs = zip(names, values, strict=True)
        kept = [(n, v) for n, v in pairs if not self._replay(state, n, step)]
        return [n for n, _ in kept], [v for _, v in kept]

    @staticmethod
    def keeps(event: Event) -> bool:
        """Whether ``event`` belongs in the job's own run (not a per-rank or per-client copy)."""
        return _keeps(event.labels)


def _keeps(labels: Mapping[str, str]) -> bool:
    """Whether events labelled ``labels`` belong in the job's own run."""
    return labels.get(PER_RANK_LABEL, "0") == "0" and PER_CLIENT_LABEL not in labels


class HealthSink:
    """Raises non-finite metrics as training-health events, and marks them, alerts,
    training restarts and skipped checkpoints on the run as tags, and Ray Data's statistics
    of a streamed split as a text artifact (so all reach MLflow through the spool).

    Parameters
    ----------
    run:
        The job's run, usually an :class:`engage.tracking.PipelineRun`.
    publish:
        Where the ``training_health`` events go: the job's event bus.

    Attributes
    ----------
    warnings:
        One line per non-finite metric seen, in order (the run summary prints them).
    """

    def __init__(self, run: TaggedRun, publish: Callable[[list[Event]], None]) -> None:
        self._run = run
        self._publish = publish
        self.warnings: list[str] = []

    def emit(self, events: Sequence[Event]) -> None:
        """Tag the run with every non-finite metric and alert state change in ``events``."""
        for e in events:
            if e.kind == "metric" and e.is_finite:
                continue  # nearly every event
            self._one(e)

    def emit_rows(self, batch: _Batch) -> None:
        """:meth:`emit` of ``batch``'s Events, read from its rows (Events and rows mixed):
        a ``metrics()`` row is looked at point by point only when its values' sum is not
        finite (any NaN or infinity makes it so; a sum that overflows is checked too)."""
        for entry in batch:
            if type(entry) is not tuple:
                self._one(entry)
            elif entry[0] != POINTS:
                self._one(from_rows([entry])[0])
            elif not math.isfinite(sum(entry[2])):
                _, names, values, step = entry[:4]
                for name, value in zip(names, values, strict=True):
                    if not math.isfinite(value):
                        self._nonfinite(name, value, step)

    def _nonfinite(self, name: str, value: float, step: int | None) -> None:
        """Warn, tag the run and publish a ``training_health`` event for one point."""
        message = f"{name} is {value} at step {step}"
        self.warnings.append(message)
        self._run.set_tags({f"engage.health.{name}": message})
        self._publish([Event("lifecycle", "training_health", data={"message": message})])

    def _one(self, e: Event) -> None:
        """Handle one event (the body of :meth:`emit`)."""
        if e.kind == "metric" and not e.is_finite:
            self._nonfinite(e.name, e.value, e.step)
        elif e.kind == "lifecycle" and e.name == "restart":
            restarts = int(e.data.get("attempt", 2)) - 1
            self._run.set_tags(
                {
                    "engage.restarts": str(restarts),
                    f"engage.restart.{restarts}": f"resumed at epoch {e.data.get('epoch')}",
                }
            )
        elif e.kind == "lifecycle" and e.name == "checkpoint_skipped":
            self._run.set_tags(
                {f"engage.checkpoint_skipped.{e.data['checkpoint']}": e.data["reason"]}
            )
        elif e.kind == "lifecycle" and e.name == "ray_data_stats":
            self._run.log_text(e.data["text"], e.data["artifact_file"])
        elif e.kind == "lifecycle" and e.name == "alert":
            state = e.data.get("state", "firing")
            self._run.set_tags(
                {f"engage.alert.{e.data['rule']}": f"{state}: {e.data.get('summary', '')}"}
            )
