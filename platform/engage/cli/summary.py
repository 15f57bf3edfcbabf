"""What the CLI prints when a pipeline run ends."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from engage.runtime.pipeline import PipelineResult
from engage.spec import LoadedSpec
from engage.tracking.store import run_url, ui_command


def print_summary(console: Console, loaded: LoadedSpec, result: PipelineResult) -> None:
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
    if result.deployment is not None:
        _print_deployment(console, result.deployment)
    if result.metrics_url:
        console.print(f"live metrics were served at {result.metrics_url} (Prometheus format)")
    console.print(f"open the run:  {ui_command(result.tracking_uri)}")
    console.print(
        f"           then {run_url(result.tracking_uri, result.experiment_id, result.run_id)}"
    )


def _print_deployment(console: Console, deployment) -> None:
    served = deployment.result
    response = deployment.response
    console.print(
        f"[green]serving[/] {served.model} version {served.version} at [bold]{served.url}/predict[/]"
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
