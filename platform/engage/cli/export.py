"""``engage export``: a registered model to ONNX and TorchScript, checked against torch."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich import box
from rich.table import Table

from engage.cli.clients import tracking_client
from engage.cli.console import guarded, out
from engage.cli.options import HomeOption, TrackingOption
from engage.export.equivalence import DEFAULT_TOLERANCE

FORMATS = {"onnx": ["onnx"], "torchscript": ["torchscript"], "all": ["onnx", "torchscript"]}


@dataclass(frozen=True)
class LoadedModel:
    """A registered version, loaded: the torch module and inputs shaped like its signature."""

    name: str
    version: str
    model: Any
    example: np.ndarray
    inputs: np.ndarray


def export(
    ref: Annotated[
        str, typer.Argument(metavar="MODEL[@ALIAS|/VERSION]", help="Registered model to export.")
    ],
    format_: Annotated[
        str, typer.Option("--format", "-f", help="onnx, torchscript or all.")
    ] = "all",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Folder for the files; default: ./export/MODEL-vN."),
    ] = None,
    tolerance: Annotated[
        float, typer.Option(help="Largest absolute difference from torch that passes.")
    ] = DEFAULT_TOLERANCE,
    opset: Annotated[int, typer.Option(help="ONNX opset (18 or later).")] = 18,
    samples: Annotated[int, typer.Option(help="Inputs the equivalence check runs.")] = 256,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Export a registered model to ONNX and TorchScript; exit 7 if one differs from torch."""

    def _body() -> None:
        from engage.errors import ExportError
        from engage.export import export_all

        if format_ not in FORMATS:
            raise ExportError(
                f"--format must be one of {', '.join(FORMATS)}, got {format_!r}",
                hint="e.g. --format onnx",
            )
        if samples < 1:
            raise ExportError(f"--samples must be at least 1, got {samples}")
        client = tracking_client(tracking_uri, home)
        with tempfile.TemporaryDirectory(prefix="engage-export-") as tmp:
            loaded = load_registered(client, ref, Path(tmp), samples)
            folder = (output or Path("export") / f"{loaded.name}-v{loaded.version}").resolve()
            report = export_all(
                loaded.model,
                loaded.example,
                loaded.inputs,
                folder,
                FORMATS[format_],
                opset,
                tolerance,
            )
        out.print(f"[bold]{loaded.name}[/] version {loaded.version} -> {folder}")
        out.print(_table(report))
        for check in report.equivalence.values():
            check.raise_if_failed()
        out.print(
            f"[green]✓[/] every format matches torch within {tolerance:g} on "
            f"{len(loaded.inputs)} inputs ({report.directory / 'equivalence.json'})"
        )

    guarded(_body)


def load_registered(client: Any, ref: str, tmp: Path, samples: int) -> LoadedModel:
    """Download the version named by ``ref``, load its torch module and build inputs.

    The inputs are the MLmodel's saved input example, then random windows of the
    signature's shape drawn per feature around the example's mean and spread.
    """
    import mlflow.artifacts
    import mlflow.pytorch
    from mlflow.models import Model

    from engage.errors import ExportError
    from engage.tracking.catalog import ModelRef, get_version, refusals

    parsed = ModelRef.parse(ref)
    version = get_version(client, parsed.name, parsed.version, parsed.alias)
    # The artifact location, not models:/...: that would resolve through MLflow's global URI.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    with refusals(client):
        local = mlflow.artifacts.download_artifacts(
            artifact_uri=version.source, dst_path=str(tmp), tracking_uri=client.tracking_uri
        )
    meta = Model.load(local)
    if "pytorch" not in meta.flavors:
        raise ExportError(
            f"{parsed.name} version {version.version} is not a torch model "
            f"(flavors: {', '.join(meta.flavors)})",
            hint="engage exports models that pipelines log with the pytorch flavor",
        )
    example = meta.load_input_example(local)
    if not isinstance(example, np.ndarray) or example.ndim < 2:
        raise ExportError(
            f"{parsed.name} version {version.version} has no tensor input example to export with",
            hint="models logged by engage pipelines carry one; re-run the pipeline",
        )
    model = mlflow.pytorch.load_model(local, map_location="cpu")
    example = example.astype(np.float32)
    return LoadedModel(parsed.name, str(version.version), model, example, _inputs(example, samples))


def _inputs(example: np.ndarray, samples: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    n_random = max(samples - len(example), 0)
    axes = tuple(range(example.ndim - 1))
    mean, std = example.mean(axis=axes), example.std(axis=axes) + 1e-3
    random = rng.normal(mean, std, size=(n_random, *example.shape[1:])).astype(np.float32)
    return np.concatenate([example, random])[:samples]


def _table(report: Any) -> Table:
    table = Table("format", "file", "size", "opset", "max |diff|", "verdict", box=box.SIMPLE)
    for fmt, exported in report.exports.items():
        check = report.equivalence[fmt]
        table.add_row(
            fmt,
            exported.path.name,
            _size(exported.path.stat().st_size),
            str(getattr(exported, "opset", "-")),
            f"{check.max_abs_diff:.3g}",
            "[green]pass[/]" if check.passed else f"[bold red]FAIL[/] (> {check.tolerance:g})",
        )
    return table


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"
