"""`engage quickstart`: the repository's quickstart spec, or the copy packaged with engage."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from rich.console import Console

from engage.runtime.pipeline import PipelineResult

REPO_SPEC = Path("pipelines/quickstart.yaml")


def quickstart_spec_path() -> Path:
    """pipelines/quickstart.yaml in the working directory, else the packaged copy."""
    if REPO_SPEC.is_file():
        return REPO_SPEC
    return Path(str(resources.files("engage") / "resources" / "quickstart.yaml"))


def print_next_steps(console: Console, result: PipelineResult) -> None:
    console.print()
    console.print("[bold]What happened[/]")
    console.print(
        "  synthetic smart-home sensor data was generated, windowed and split by time; a model "
        "trained data-parallel on Ray; the run, its dataset and model landed in MLflow"
        + ("; the model passed its gate and was registered." if result.registration else ".")
    )
    console.print("[bold]Try next[/]")
    console.print(
        "  engage run pipelines/quickstart.yaml --set train.epochs=10 --set model.name=gru"
    )
    console.print("  engage validate pipelines/quickstart.yaml")
    console.print(
        "  cp pipelines/quickstart.yaml my.yaml  # and point data.source at your CSV or Parquet"
    )
