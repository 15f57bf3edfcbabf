"""The run display: stages, an epoch bar and the latest metrics, live in the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from engage.events import POINTS, Event, Row, from_rows
from engage.train.metrics import PRIMARY_VAL_METRIC

_STAGE_TEXT = {
    "data": "loading and checking data",
    "tracking": "waiting for MLflow to have every point",
    "ray": "starting Ray",
    "train": "training",
    "evaluate": "evaluating on the test split",
    "register": "logging and registering the model",
    "export": "exporting ONNX and TorchScript copies, checked against torch",
    "deploy": "serving the registered version",
}

#: The row kinds :meth:`RunDisplay.emit` ignores: a metrics() call's points and a metric.
_IGNORED = (POINTS, "metric")


class RunDisplay:
    """An Observer for :func:`engage.runtime.pipeline.run_pipeline` drawing with rich.

    On a terminal it draws live bars; elsewhere (CI, pipes) it prints one line per stage
    and per epoch so logs stay readable.
    """

    def __init__(self, console: Console, task: str, epochs: int) -> None:
        self.console = console
        self.live = console.is_terminal
        self.epochs = epochs
        self.val_key = PRIMARY_VAL_METRIC[task]
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[metrics]}"),
            console=console,
            transient=False,
        )
        self._stage_task = self.progress.add_task("starting", total=None, metrics="")
        self._epoch_task: Any = None
        self._trial_task: Any = None  # a tuning job's trials bar, from its first trial tick

    def __enter__(self) -> RunDisplay:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()

    def stage(self, name: str, detail: str = "") -> None:
        """Show that the pipeline entered stage ``name`` (``detail`` replaces its usual text)."""
        text = detail or _STAGE_TEXT.get(name, name)
        self.progress.update(self._stage_task, description=f"{name}: {text}")
        if name == "train" and self._epoch_task is None:
            self._epoch_task = self.progress.add_task("epochs", total=self.epochs, metrics="")
        if not self.live:
            self.console.print(f"[bold]{name}[/]: {text}")

    def emit(self, events: Sequence[Event]) -> None:
        """Advance the epoch bar from training progress events; other events are ignored."""
        for event in events:
            if event.kind == "progress" and event.name == "step" and self._epoch_task is not None:
                done = event.data["epoch"] - 1 + event.data["step"] / event.data["steps"]
                self.progress.update(self._epoch_task, completed=done)
            elif event.kind == "progress" and event.name == "epoch":
                self._epoch(event.data)
            elif event.kind == "progress" and event.name == "trial":
                self._trial(event.data)
            elif event.kind == "lifecycle" and event.name == "alert":
                self._alert(event.data)
            elif event.kind == "lifecycle" and "message" in event.data:
                style = "red" if event.name == "training_health" else "yellow"
                self.console.print(
                    f"[{style}]{event.name}:[/] {event.data['message']}", markup=True
                )

    def emit_rows(self, batch: Sequence[Event | Row]) -> None:
        """:meth:`emit` of ``batch``'s Events, read from its rows (Events and rows mixed, as
        the hub's drain holds them): metric points are skipped, as :meth:`emit` ignores
        them, so only the progress and lifecycle rows become Events (issue 11)."""
        wanted = [e for e in batch if type(e) is not tuple or e[0] not in _IGNORED]
        if wanted:
            self.emit(from_rows(wanted))

    def _alert(self, d: dict[str, Any]) -> None:
        firing = d.get("state") == "firing"
        style = {"critical": "bold red", "warning": "yellow"}.get(d.get("severity"), "white")
        self.console.print(
            f"[{style if firing else 'green'}]alert {d.get('rule')} {d.get('state')}:[/] "
            f"{escape(str(d.get('summary', '')))}",
            markup=True,
        )

    def _trial(self, d: dict[str, Any]) -> None:
        """Advance the trials bar of a tuning job (each end prints its own line too)."""
        best = d.get("best")
        text = f"best {d.get('metric', '')} {best:.4f}" if best is not None else ""
        if self._trial_task is None:
            self._trial_task = self.progress.add_task("trials", total=d["total"], metrics="")
        self.progress.update(self._trial_task, completed=d["done"], metrics=text)

    def _epoch(self, d: dict[str, Any]) -> None:
        text = (
            f"loss {d['train_loss']:.4f}  {self.val_key} {d.get(self.val_key, float('nan')):.4f}"
            f"  {d['samples_per_second']:,.0f} samples/s"
        )
        if self._epoch_task is not None:
            self.progress.update(self._epoch_task, completed=d["epoch"], metrics=text)
        if not self.live:
            self.console.print(f"  epoch {int(d['epoch'])}/{d['epochs']}: {text}")
