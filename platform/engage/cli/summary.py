"""What the CLI prints when a pipeline run ends, and the display that prints it on time.

The run's summary (metrics, run id, registered version, where to open it) is printed as
soon as the run ended and its model is registered, before a deploy starts
(:class:`SummaryDisplay`); the serving lines follow once the deploy is done. So a deploy
that fails cannot hide the run's results.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from engage.cli.progress import RunDisplay
from engage.runtime.pipeline import PipelineResult
from engage.spec import LoadedSpec
from engage.tracking.store import run_url, ui_command


class SummaryDisplay(RunDisplay):
    """The run display that prints the run's summary the moment the job shows its result.

    It is the job's :class:`~engage.runtime.job.ResultObserver`: ``concluded`` comes once
    the run ended and its model is registered, before any deploy starts.
    """

    def __init__(self, console: Console, loaded: LoadedSpec) -> None:
        super().__init__(console, loaded.spec.data.task, loaded.spec.train.epochs)
        self.loaded = loaded
        self.shown: PipelineResult | None = None  # the result whose summary was printed

    def concluded(self, result: PipelineResult) -> None:
        """Print ``result``'s summary now (the live bars stop; a later stage prints a line)."""
        if self.live:
            self.progress.stop()
            self.live = False
        print_run_summary(self.console, self.loaded, result)
        self.shown = result


def print_summary(console: Console, loaded: LoadedSpec, result: PipelineResult) -> None:
    """Print the run's summary, then what its deploy stage serves (if it ran)."""
    print_run_summary(console, loaded, result)
    if result.deployment is not None:
        print_deployment(console, result.deployment, result.stage_seconds.get("deploy"))


def print_run_summary(console: Console, loaded: LoadedSpec, result: PipelineResult) -> None:
    """Print the run's test metrics, its registration or gate verdict, and where to look next."""
    table = Table(title=f"run {result.run_id}", show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name in sorted(result.metrics):
        table.add_row(name, f"{result.metrics[name]:.4f}")
    console.print(table)
    stages = "  ".join(f"{k} {v:.1f}s" for k, v in result.stage_seconds.items())
    console.print(f"stages: {stages}")
    for warning in result.health:
        console.print(f"[red]training health:[/] {warning}")
    console.print(f"experiment: {result.experiment} (id {result.experiment_id or 'pending'})")
    console.print(f"run id: [bold]{result.run_id}[/]")
    if result.pending:
        console.print(
            f"[yellow]MLflow at {result.tracking_uri} is not reachable[/]: {result.pending} entries "
            f"of this run wait in the spool (local run id {result.local_id}); the next engage "
            "command or `engage sync` sends them, nothing is lost"
        )
    if result.decision is not None:
        console.print(result.decision.explain())
    if result.registration is not None:
        reg = result.registration
        console.print(
            f"[green]registered[/] model [bold]{reg.name}[/] version [bold]{reg.version}[/] "
            f"(alias @{reg.alias})"
        )
    elif (
        loaded.spec.tracking.registration is not None and result.decision and result.decision.passed
    ):
        console.print("[yellow]registration pending[/]: it happens when MLflow has the run")
    elif loaded.spec.tracking.registration is not None:
        console.print(
            "[yellow]not registered[/]: the model did not pass the gate; it is logged with the "
            f"run as {result.model_uri}"
        )
    if result.metrics_url:
        console.print(f"live metrics were served at {result.metrics_url} (Prometheus format)")
    console.print(f"open the run:  {ui_command(result.tracking_uri)}")
    console.print(
        f"           then {run_url(result.tracking_uri, result.experiment_id, result.run_id)}"
    )


def print_deployment(console: Console, deployment: Any, seconds: float | None = None) -> None:
    """Print what the deploy stage serves, the prediction it checked, and how to call it.

    Parameters
    ----------
    deployment:
        The deploy stage's :class:`~engage.runtime.deploy.Deployment`.
    seconds:
        How long the deploy stage took (None: not shown).
    """
    served = deployment.result
    response = deployment.response
    took = f" (deploy {seconds:.1f}s)" if seconds is not None else ""
    console.print(
        f"[green]serving[/] {served.model} version {served.version} at "
        f"[bold]{served.url}/predict[/]{took}"
    )
    prediction = response.get("predictions", [None])[0]
    classes = response.get("classes")
    shown = (
        f"{prediction} ({classes[prediction]})"
        if classes and isinstance(prediction, int)
        else prediction
    )
    console.print(f"one prediction from the served model: {shown}")
    console.print(
        f"  curl -s -X POST {served.url}/predict -H 'Content-Type: application/json' "
        f"-d @{deployment.example_file}"
    )
    console.print("  stop serving with: engage serve stop")
