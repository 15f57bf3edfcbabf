"""`engage quickstart`: the repository's quickstart spec, or the copy packaged with engage."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from engage.cli.console import guarded, out
from engage.cli.options import AddressOption, HomeOption, SetOption, TrackingOption

if TYPE_CHECKING:  # the pipeline pulls in Ray; `engage --help` should not
    from engage.runtime.pipeline import PipelineResult

REPO_SPEC = Path("pipelines/quickstart.yaml")


def quickstart(
    set_: SetOption = None,
    address: AddressOption = None,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Run the quickstart pipeline end to end on synthetic smart-home data, then serve it."""

    def _body() -> None:
        from engage import env_vars
        from engage.cli.run import run_file

        result = run_file(quickstart_spec_path(), set_ or [], address, tracking_uri, home, False)
        if result.deployment is not None and result.deployment.result.url:
            show_drift_caught(out, result, env_vars.engage_home(home))
        print_next_steps(out, result)

    guarded(_body)


def quickstart_spec_path() -> Path:
    """pipelines/quickstart.yaml in the working directory, else the packaged copy."""
    if REPO_SPEC.is_file():
        return REPO_SPEC
    return Path(str(resources.files("engage") / "resources" / "quickstart.yaml"))


def show_drift_caught(console: Console, result: PipelineResult, home: Path) -> None:
    """Send the served model a shifted batch and print the drift alert it raises."""
    from engage.serve.demo import drift_demo

    served = result.deployment.result
    console.print()
    console.print(
        "[bold]Drift[/]: sending the served model windows where the temperature reads 6 °C "
        "higher and CO2 60% higher than in training..."
    )
    alert = drift_demo(served.url, home)
    console.print(
        f"[red]alert {alert.rule}[/] ({alert.severity}) on {alert.model} version {alert.version} "
        f"after {alert.windows_sent} windows: features that moved: "
        f"[bold]{', '.join(alert.features)}[/]"
    )
    console.print(f"  {alert.summary}")
    console.print("  see it with: engage monitor alerts")


def print_next_steps(console: Console, result: PipelineResult) -> None:
    """Say what the quickstart did and which commands to try next."""
    console.print()
    console.print("[bold]What happened[/]")
    console.print(
        "  synthetic smart-home sensor data was generated, windowed and split by time; a model "
        "trained data-parallel on Ray while its metrics were served for Prometheus; the run, "
        "its dataset, lineage and model (with ONNX and TorchScript copies) landed in MLflow"
        + ("; the model passed its gate and was registered" if result.registration else "")
        + ("; it is now served on Ray Serve and watched for drift." if result.deployment else ".")
    )
    console.print("[bold]Try next[/]")
    console.print(
        "  engage run pipelines/quickstart.yaml --set train.epochs=10 --set model.name=gru"
    )
    console.print("  engage monitor                 # live view of running jobs and alerts")
    console.print("  engage models promote smart-home-occupancy --reason 'first champion'")
    console.print("  engage serve status            # what is served; `engage serve stop` ends it")
    console.print(
        "  cp pipelines/quickstart.yaml my.yaml  # and point data.source at your CSV or Parquet"
    )
