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

from collections.abc import Callable, Sequence
from typing import Protocol

from engage.events import Event

#: Labels that mark a series the run itself does not keep: per-worker copies (``rank``
#: other than 0) live in the monitor only, per-client series go to the round child runs.
PER_RANK_LABEL = "rank"
PER_CLIENT_LABEL = "client"


class MetricRun(Protocol):
    """What :class:`MetricSink` needs of a run (``engage.tracking.PipelineRun`` has it)."""

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

    Parameters
    ----------
    run:
        The job's run, usually an :class:`engage.tracking.PipelineRun`.
    """

    def __init__(self, run: MetricRun) -> None:
        self._run = run
        self._last_step: dict[tuple[str, frozenset], int] = {}
        self.replayed = 0  # points dropped as replays of a step already spooled

    def emit(self, events: Sequence[Event]) -> None:
        """Spool the events that belong to the run itself, each step of a series once.

        A metric point whose step is not above the last one spooled for its series is a
        replay (see the module doc) and is dropped.
        """
        # A batch's events share a few labels mappings (one per Reporter): decide keeps()
        # and build the series' label key once per mapping, not per event, and check the
        # replay inline (the driver's spool writer paid 1 µs a point for this, issue 11).
        # id() is safe within this call: the events hold their mappings alive.
        per_labels: dict[int, frozenset | None] = {}
        last_step = self._last_step
        kept = []
        for e in events:
            labels = e.labels
            if (key := per_labels.get(id(labels), False)) is False:
                key = per_labels[id(labels)] = frozenset(labels.items()) if self.keeps(e) else None
            if key is None:
                continue
            if e.kind == "metric" and (step := e.step) is not None:
                series = (e.name, key)
                last = last_step.get(series)
                if last is not None and step <= last:
                    self.replayed += 1
                    continue
                last_step[series] = step
            kept.append(e)
        self._run.log_metric_events(kept)

    @staticmethod
    def keeps(event: Event) -> bool:
        """Whether ``event`` belongs in the job's own run (not a per-rank or per-client copy)."""
        labels = event.labels
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
            if e.kind == "metric" and not e.is_finite:
                message = f"{e.name} is {e.value} at step {e.step}"
                self.warnings.append(message)
                self._run.set_tags({f"engage.health.{e.name}": message})
                self._publish([Event("lifecycle", "training_health", data={"message": message})])
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
